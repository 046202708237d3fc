//! Values: tensors with a dtype, a shape and owned little-endian bytes, scalars, text,
//! dicts in declared order and tuples; plus [`InfoDict`] / [`Metadata`] and their
//! msgpack form (docs/protocol.md §7: arrays travel as extension type 1).

use crate::error::{Error, Result};
use crate::msgpack::Mp;

/// Element types and their wire codes (docs/protocol.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    F32,
    F64,
}

pub(crate) const ALL_DTYPES: [DType; 12] = [
    DType::Bool,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::F32,
    DType::F64,
];

impl DType {
    /// The wire code (`bool`=1 ... `float64`=12).
    pub fn code(self) -> u8 {
        ALL_DTYPES.iter().position(|d| *d == self).unwrap_or(0) as u8 + 1
    }

    pub fn from_code(code: u8) -> Option<DType> {
        if (1..=12).contains(&code) {
            Some(ALL_DTYPES[code as usize - 1])
        } else {
            None
        }
    }

    /// The numpy-style name used in space specs (`"float32"`, `"uint8"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    pub fn is_integer(self) -> bool {
        !self.is_float() && self != DType::Bool
    }

    /// Inclusive range of an integer dtype (bool: 0..=1).
    pub fn int_range(self) -> (i128, i128) {
        match self {
            DType::Bool => (0, 1),
            DType::U8 => (0, u8::MAX as i128),
            DType::U16 => (0, u16::MAX as i128),
            DType::U32 => (0, u32::MAX as i128),
            DType::U64 => (0, u64::MAX as i128),
            DType::I8 => (i8::MIN as i128, i8::MAX as i128),
            DType::I16 => (i16::MIN as i128, i16::MAX as i128),
            DType::I32 => (i32::MIN as i128, i32::MAX as i128),
            DType::I64 => (i64::MIN as i128, i64::MAX as i128),
            _ => (i64::MIN as i128, i64::MAX as i128),
        }
    }
}

/// A Rust element type a tensor can hold.
pub trait Element: Copy {
    const DTYPE: DType;
    fn write_le(self, out: &mut Vec<u8>);
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(a)
            }
        }
    };
}
element!(u8, DType::U8);
element!(u16, DType::U16);
element!(u32, DType::U32);
element!(u64, DType::U64);
element!(i8, DType::I8);
element!(i16, DType::I16);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(f32, DType::F32);
element!(f64, DType::F64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// An n-dimensional array: dtype, shape and C-order little-endian bytes (owned).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl Tensor {
    /// A tensor over raw bytes; `data.len()` must be `numel × itemsize`.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Tensor> {
        let numel = checked_numel(&shape).ok_or_else(|| {
            Error::invalid_argument(format!("tensor shape {shape:?} is too large"))
        })?;
        let need = numel
            .checked_mul(dtype.itemsize())
            .ok_or_else(|| Error::invalid_argument("tensor too large"))?;
        if data.len() != need {
            return Err(Error::invalid_argument(format!(
                "a {} tensor of shape {shape:?} needs {need} bytes, got {}",
                dtype.name(),
                data.len()
            )));
        }
        Ok(Tensor { dtype, shape, data })
    }

    /// A tensor from typed elements in C order.
    ///
    /// ```
    /// let t = rlmesh::Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap();
    /// assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    /// ```
    pub fn from_slice<T: Element>(shape: &[usize], values: &[T]) -> Result<Tensor> {
        let mut data = Vec::with_capacity(values.len() * T::DTYPE.itemsize());
        for v in values {
            v.write_le(&mut data);
        }
        Tensor::new(T::DTYPE, shape.to_vec(), data)
    }

    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let numel: usize = shape.iter().product();
        Tensor {
            dtype,
            shape: shape.to_vec(),
            data: vec![0; numel * dtype.itemsize()],
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The raw little-endian bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements as `T`, when the dtype is exactly `T`'s.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.dtype != T::DTYPE {
            return Err(Error::invalid_argument(format!(
                "tensor is {}, not {}",
                self.dtype.name(),
                T::DTYPE.name()
            )));
        }
        Ok(self
            .data
            .chunks_exact(self.dtype.itemsize())
            .map(T::read_le)
            .collect())
    }

    /// Element `i` as f64 (any dtype).
    pub fn get_f64(&self, i: usize) -> f64 {
        match read_num(self.dtype, &self.data, i) {
            Num::F(f) => f,
            Num::I(v) => v as f64,
        }
    }

    /// A copy in another dtype, converted like numpy's `astype` (floats truncate toward
    /// zero, integers wrap).
    pub fn cast(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype {
            return self.clone();
        }
        let n = self.numel();
        let mut data = Vec::with_capacity(n * dtype.itemsize());
        for i in 0..n {
            write_num(dtype, read_num(self.dtype, &self.data, i), &mut data);
        }
        Tensor {
            dtype,
            shape: self.shape.clone(),
            data,
        }
    }

    /// The same bytes under another shape of the same element count.
    pub fn reshape(mut self, shape: Vec<usize>) -> Result<Tensor> {
        if checked_numel(&shape) != Some(self.numel()) {
            return Err(Error::invalid_argument(format!(
                "cannot reshape {:?} into {shape:?}",
                self.shape
            )));
        }
        self.shape = shape;
        Ok(self)
    }
}

pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Num {
    F(f64),
    I(i128),
}

pub(crate) fn read_num(dtype: DType, data: &[u8], i: usize) -> Num {
    let s = dtype.itemsize();
    let b = &data[i * s..(i + 1) * s];
    match dtype {
        DType::Bool => Num::I((b[0] != 0) as i128),
        DType::U8 => Num::I(b[0] as i128),
        DType::I8 => Num::I(b[0] as i8 as i128),
        DType::U16 => Num::I(u16::read_le(b) as i128),
        DType::I16 => Num::I(i16::read_le(b) as i128),
        DType::U32 => Num::I(u32::read_le(b) as i128),
        DType::I32 => Num::I(i32::read_le(b) as i128),
        DType::U64 => Num::I(u64::read_le(b) as i128),
        DType::I64 => Num::I(i64::read_le(b) as i128),
        DType::F16 => Num::F(f16_to_f32(u16::read_le(b)) as f64),
        DType::F32 => Num::F(f32::read_le(b) as f64),
        DType::F64 => Num::F(f64::read_le(b)),
    }
}

pub(crate) fn write_num(dtype: DType, v: Num, out: &mut Vec<u8>) {
    let as_int = |v: Num| -> i128 {
        match v {
            Num::I(i) => i,
            Num::F(f) if f.is_finite() => f.trunc().clamp(-1e38, 1e38) as i128,
            Num::F(_) => 0,
        }
    };
    let as_f = |v: Num| -> f64 {
        match v {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    };
    match dtype {
        DType::Bool => out.push(match v {
            Num::I(i) => (i != 0) as u8,
            Num::F(f) => (f != 0.0) as u8,
        }),
        DType::U8 => out.push(as_int(v) as u8),
        DType::I8 => out.push(as_int(v) as i8 as u8),
        DType::U16 => (as_int(v) as u16).write_le(out),
        DType::I16 => (as_int(v) as i16).write_le(out),
        DType::U32 => (as_int(v) as u32).write_le(out),
        DType::I32 => (as_int(v) as i32).write_le(out),
        DType::U64 => (as_int(v) as u64).write_le(out),
        DType::I64 => (as_int(v) as i64).write_le(out),
        DType::F16 => f32_to_f16(as_f(v) as f32).write_le(out),
        DType::F32 => (as_f(v) as f32).write_le(out),
        DType::F64 => as_f(v).write_le(out),
    }
}

pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if mant == 0 {
            sign
        } else {
            // subnormal: normalise
            let mut e = 127 - 15 + 1;
            let mut m = mant;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
        }
    } else if exp == 31 {
        sign | 0x7f80_0000 | (mant << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (mant << 13)
    };
    f32::from_bits(bits)
}

pub(crate) fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let mant = x & 0x7f_ffff;
    if exp == 255 {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let rounded = if rem > mid || (rem == mid && half & 1 == 1) {
            half + 1
        } else {
            half
        };
        return sign | rounded as u16;
    }
    let half = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    let rounded = if rem > 0x1000 || (rem == 0x1000 && half & 1 == 1) {
        half + 1
    } else {
        half
    };
    sign | rounded as u16
}

/// A value: what observations, actions, info entries and metadata are made of.
///
/// Observations and actions follow their space: `Tensor` for `Box` /
/// `MultiBinary` / `MultiDiscrete` (a scalar number is accepted for a rank-0 box),
/// `Int` for `Discrete`, `Text` for `Text`, `Dict` in the space's declared key
/// order, `Tuple` by index. Info dicts and metadata may hold any variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer above `i64::MAX`.
    UInt(u64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
    Tensor(Tensor),
    /// A sequence (what msgpack arrays decode to in info and metadata).
    List(Vec<Value>),
    /// A `Tuple` space's value.
    Tuple(Vec<Value>),
    /// A `Dict` space's value, or a nested mapping in info/metadata.
    Dict(InfoDict),
}

impl Value {
    /// A tensor value from typed elements (panics on a shape/length mismatch: use
    /// [`Tensor::from_slice`] to handle that case).
    pub fn tensor<T: Element>(shape: &[usize], values: &[T]) -> Value {
        Value::Tensor(
            Tensor::from_slice(shape, values)
                .expect("tensor shape must match the number of values"),
        )
    }

    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::UInt(u) => i64::try_from(*u).ok(),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::UInt(u) => Some(*u as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_dict(&self) -> Option<&InfoDict> {
        match self {
            Value::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// The elements of a `List` or `Tuple`.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "Bool",
            Value::Int(_) => "Int",
            Value::UInt(_) => "UInt",
            Value::Float(_) => "Float",
            Value::Text(_) => "Text",
            Value::Bytes(_) => "Bytes",
            Value::Tensor(_) => "Tensor",
            Value::List(_) => "List",
            Value::Tuple(_) => "Tuple",
            Value::Dict(_) => "Dict",
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<InfoDict> for Value {
    fn from(v: InfoDict) -> Value {
        Value::Dict(v)
    }
}

/// A string-keyed mapping that keeps insertion order: info dicts, reset options,
/// metadata, and `Dict` values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InfoDict {
    entries: Vec<(String, Value)>,
}

/// The env metadata dictionary (`metadata()["autoreset_mode"]` sets the served
/// autoreset mode).
pub type Metadata = InfoDict;

impl InfoDict {
    pub fn new() -> InfoDict {
        InfoDict::default()
    }

    /// Set `key` (replacing its value in place if present, else appending).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Builder form of [`insert`](InfoDict::insert).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> InfoDict {
        self.insert(key, value);
        self
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }
}

impl std::ops::Index<&str> for InfoDict {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        self.get(key)
            .unwrap_or_else(|| panic!("no key {key:?} in the dict"))
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for InfoDict {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> InfoDict {
        let mut d = InfoDict::new();
        for (k, v) in iter {
            d.insert(k, v);
        }
        d
    }
}

// -- metadata codec (§7) ------------------------------------------------------------------

/// Extension type of an ndarray inside metadata values.
pub const EXT_NDARRAY: i8 = 1;

/// A value as msgpack (tensors become ext type 1, tuples arrays).
pub fn to_mp(v: &Value) -> Mp {
    match v {
        Value::None => Mp::Nil,
        Value::Bool(b) => Mp::Bool(*b),
        Value::Int(i) => Mp::Int(*i),
        Value::UInt(u) => Mp::UInt(*u),
        Value::Float(f) => Mp::Float(*f),
        Value::Text(s) => Mp::Str(s.clone()),
        Value::Bytes(b) => Mp::Bin(b.clone()),
        Value::Tensor(t) => {
            let mut data = Vec::with_capacity(2 + 8 * t.shape.len() + t.data.len());
            data.push(t.dtype.code());
            data.push(t.shape.len() as u8);
            for d in &t.shape {
                data.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            data.extend_from_slice(&t.data);
            Mp::Ext(EXT_NDARRAY, data)
        }
        Value::List(items) | Value::Tuple(items) => Mp::Array(items.iter().map(to_mp).collect()),
        Value::Dict(d) => dict_to_mp(d),
    }
}

pub fn dict_to_mp(d: &InfoDict) -> Mp {
    Mp::Map(
        d.entries
            .iter()
            .map(|(k, v)| (Mp::Str(k.clone()), to_mp(v)))
            .collect(),
    )
}

/// A msgpack metadata value back to a [`Value`] (maps need str keys; ext 1 is an ndarray).
pub fn from_mp(m: &Mp) -> Result<Value> {
    Ok(match m {
        Mp::Nil => Value::None,
        Mp::Bool(b) => Value::Bool(*b),
        Mp::Int(i) => Value::Int(*i),
        Mp::UInt(u) => Value::UInt(*u),
        Mp::Float(f) => Value::Float(*f),
        Mp::Str(s) => Value::Text(s.clone()),
        Mp::Bin(b) => Value::Bytes(b.clone()),
        Mp::Array(items) => Value::List(items.iter().map(from_mp).collect::<Result<_>>()?),
        Mp::Map(_) => Value::Dict(dict_from_mp(m)?),
        Mp::Ext(t, data) => {
            if *t != EXT_NDARRAY {
                return Err(Error::protocol(format!(
                    "unknown msgpack extension type {t} in metadata"
                )));
            }
            Value::Tensor(ndarray_from_ext(data)?)
        }
    })
}

/// A msgpack map with str keys as an [`InfoDict`] (`nil` is an empty dict).
pub fn dict_from_mp(m: &Mp) -> Result<InfoDict> {
    match m {
        Mp::Nil => Ok(InfoDict::new()),
        Mp::Map(entries) => {
            let mut d = InfoDict {
                entries: Vec::with_capacity(entries.len()),
            };
            for (k, v) in entries {
                let Mp::Str(key) = k else {
                    return Err(Error::protocol("metadata map keys must be strings"));
                };
                d.insert(key.clone(), from_mp(v)?);
            }
            Ok(d)
        }
        _ => Err(Error::protocol("expected a metadata map")),
    }
}

fn ndarray_from_ext(data: &[u8]) -> Result<Tensor> {
    if data.len() < 2 {
        return Err(Error::protocol("truncated ndarray extension in metadata"));
    }
    let dtype = DType::from_code(data[0]).ok_or_else(|| {
        Error::protocol(format!(
            "unknown dtype code {} in an ndarray extension",
            data[0]
        ))
    })?;
    let ndim = data[1] as usize;
    let end = 2 + 8 * ndim;
    if data.len() < end {
        return Err(Error::protocol(
            "truncated ndarray extension shape in metadata",
        ));
    }
    let mut shape = Vec::with_capacity(ndim);
    for i in 0..ndim {
        let d = u64::read_le(&data[2 + 8 * i..]);
        shape.push(
            usize::try_from(d)
                .map_err(|_| Error::protocol("ndarray extension dimension too large"))?,
        );
    }
    let need = checked_numel(&shape).and_then(|n| n.checked_mul(dtype.itemsize()));
    if need != Some(data.len() - end) {
        return Err(Error::protocol(format!(
            "ndarray extension carries {} bytes; shape {shape:?} of {} needs {need:?}",
            data.len() - end,
            dtype.name()
        )));
    }
    Ok(Tensor {
        dtype,
        shape,
        data: data[end..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_match_the_protocol() {
        assert_eq!(DType::Bool.code(), 1);
        assert_eq!(DType::F32.code(), 11);
        assert_eq!(DType::F64.code(), 12);
        for d in ALL_DTYPES {
            assert_eq!(DType::from_code(d.code()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_code(13), None);
    }

    #[test]
    fn casts_truncate_and_wrap_like_astype() {
        let t = Tensor::from_slice(&[4], &[1.9f64, -1.9, 300.0, 255.5]).unwrap();
        assert_eq!(t.cast(DType::U8).data(), &[1, 255, 44, 255]);
        assert_eq!(
            t.cast(DType::F32).to_vec::<f32>().unwrap(),
            vec![1.9, -1.9, 300.0, 255.5]
        );
        let h = Tensor::from_slice(&[3], &[1.0f32, -0.5, 65504.0])
            .unwrap()
            .cast(DType::F16);
        assert_eq!(h.data(), &[0x00, 0x3c, 0x00, 0xb8, 0xff, 0x7b]);
        assert_eq!(h.get_f64(2), 65504.0);
    }

    #[test]
    fn tensors_check_their_byte_count() {
        assert!(Tensor::new(DType::F32, vec![2, 2], vec![0; 15]).is_err());
        assert!(Tensor::new(DType::F32, vec![usize::MAX, 4], vec![]).is_err());
        assert!(Tensor::new(DType::F32, vec![0, 4], vec![]).is_ok());
    }

    #[test]
    fn metadata_values_round_trip_with_ndarrays() {
        let d = InfoDict::new()
            .with("a", 1i64)
            .with("b", Value::tensor(&[2, 2], &[1i32, 2, 3, 4]))
            .with(
                "c",
                Value::List(vec![Value::None, Value::Float(2.0), Value::Bytes(vec![1])]),
            )
            .with("d", InfoDict::new().with("x", "y"));
        let mp = dict_to_mp(&d);
        let back = dict_from_mp(&crate::msgpack::decode(&mp.to_bytes()).unwrap()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.keys().collect::<Vec<_>>(), vec!["a", "b", "c", "d"]);
    }

    #[test]
    fn bad_ndarray_extensions_are_protocol_errors() {
        for data in [
            vec![],
            vec![99, 0],
            vec![11, 1, 2],
            vec![11, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1],
        ] {
            assert!(from_mp(&Mp::Ext(1, data)).is_err());
        }
        assert!(from_mp(&Mp::Ext(5, vec![])).is_err());
        assert!(from_mp(&Mp::Map(vec![(Mp::Int(1), Mp::Nil)])).is_err());
    }
}
