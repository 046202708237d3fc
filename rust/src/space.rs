//! Spaces (spec §1) and the space-directed leaf codec (docs/protocol.md §5, §6).
//!
//! A [`Space`] publishes itself in the contract as a `SpaceSpec` map and lays values
//! out on the wire: walking the tree in pre-order (dict children in declared order,
//! tuple children by index), `Box` / `MultiBinary` / `MultiDiscrete` leaves become raw
//! segments, `Discrete` leaves msgpack ints and `Text` leaves msgpack strings.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::msgpack::Mp;
use crate::value::{checked_numel, read_num, write_num, DType, InfoDict, Num, Tensor, Value};

/// A value split for the wire: header scalars and raw segments (borrowed when no
/// conversion was needed).
pub type Split<'v> = (Vec<Mp>, Vec<Cow<'v, [u8]>>);

/// Bounds of a `Box` space (the contract's `bounds_kind`).
#[derive(Clone, Debug, PartialEq)]
pub enum Bounds {
    /// No bounds (float dtypes; also an unbounded integer box).
    Unbounded,
    /// One float bound for every element.
    Uniform(f64, f64),
    /// Per-element float bounds, row-major.
    Elementwise(Vec<f64>, Vec<f64>),
    /// One exact integer bound for every element (integer and bool boxes).
    TypedUniform(i128, i128),
    /// Per-element exact integer bounds.
    TypedElementwise(Vec<i128>, Vec<i128>),
}

/// A space: what observations or actions look like.
#[derive(Clone, Debug, PartialEq)]
pub enum Space {
    Box {
        shape: Vec<usize>,
        dtype: DType,
        bounds: Bounds,
    },
    Discrete {
        n: i64,
        start: i64,
        dtype: DType,
    },
    MultiBinary {
        shape: Vec<usize>,
        dtype: DType,
    },
    MultiDiscrete {
        shape: Vec<usize>,
        nvec: Vec<i64>,
        start: Vec<i64>,
        dtype: DType,
    },
    Text {
        min_length: usize,
        max_length: usize,
        charset: String,
    },
    /// Children in declared order.
    Dict(Vec<(String, Space)>),
    Tuple(Vec<Space>),
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_argument(msg)
}

impl Space {
    /// A float `Box` with the same `low`/`high` everywhere (`f64::INFINITY` for none).
    ///
    /// ```
    /// use rlmesh::{DType, Space};
    /// let s = Space::box_uniform(&[4], DType::F32, f64::NEG_INFINITY, f64::INFINITY).unwrap();
    /// assert_eq!(s.shape(), &[4]);
    /// ```
    pub fn box_uniform(shape: &[usize], dtype: DType, low: f64, high: f64) -> Result<Space> {
        Space::box_elementwise(shape, dtype, &[low], &[high])
    }

    /// A `Box` with per-element bounds (row-major; one element means uniform). Integer
    /// and bool dtypes keep exact typed bounds (finite bounds required, truncated).
    pub fn box_elementwise(
        shape: &[usize],
        dtype: DType,
        low: &[f64],
        high: &[f64],
    ) -> Result<Space> {
        let n = checked_numel(shape).ok_or_else(|| bad("Box shape is too large"))?;
        for (side, b) in [("low", low), ("high", high)] {
            if b.len() != 1 && b.len() != n {
                return Err(bad(format!(
                    "Box {side} has {} elements but the shape {shape:?} has {n}",
                    b.len()
                )));
            }
            if b.iter().any(|v| v.is_nan()) {
                return Err(bad(format!("Box {side} bound must not be NaN")));
            }
        }
        let at = |b: &[f64], i: usize| if b.len() == 1 { b[0] } else { b[i] };
        for i in 0..n {
            if at(low, i) > at(high, i) {
                return Err(bad(format!(
                    "Box low must be <= high everywhere; element {i} has low > high"
                )));
            }
        }
        let bounds = if dtype.is_float() {
            Bounds::Elementwise(
                (0..n).map(|i| at(low, i)).collect(),
                (0..n).map(|i| at(high, i)).collect(),
            )
        } else {
            let all_inf =
                low.iter().all(|v| v.is_infinite()) && high.iter().all(|v| v.is_infinite());
            if all_inf {
                Bounds::Unbounded
            } else {
                if low.iter().chain(high).any(|v| v.is_infinite()) {
                    return Err(bad(format!(
                        "Box with integer dtype {} cannot have an infinite bound",
                        dtype.name()
                    )));
                }
                let (lo_min, hi_max) = dtype.int_range();
                let conv = |v: f64| -> Result<i128> {
                    let iv = v.trunc() as i128;
                    if iv < lo_min || iv > hi_max {
                        return Err(bad(format!(
                            "Box bound {iv} is out of range for {}",
                            dtype.name()
                        )));
                    }
                    Ok(iv)
                };
                Bounds::TypedElementwise(
                    (0..n).map(|i| conv(at(low, i))).collect::<Result<_>>()?,
                    (0..n).map(|i| conv(at(high, i))).collect::<Result<_>>()?,
                )
            }
        };
        Ok(Space::Box {
            shape: shape.to_vec(),
            dtype,
            bounds,
        }
        .canonical())
    }

    /// An integer (or bool) `Box` with exact bounds.
    pub fn box_int(shape: &[usize], dtype: DType, low: i128, high: i128) -> Result<Space> {
        if dtype.is_float() {
            return Err(bad("box_int needs an integer or bool dtype"));
        }
        let (lo_min, hi_max) = dtype.int_range();
        if low > high || low < lo_min || high > hi_max {
            return Err(bad(format!(
                "Box bounds [{low}, {high}] do not fit {}",
                dtype.name()
            )));
        }
        Ok(Space::Box {
            shape: shape.to_vec(),
            dtype,
            bounds: Bounds::TypedUniform(low, high),
        })
    }

    /// `Discrete(n)` starting at 0, int64.
    pub fn discrete(n: i64) -> Space {
        Space::Discrete {
            n: n.max(1),
            start: 0,
            dtype: DType::I64,
        }
    }

    /// `Discrete(n, start)` with an integer dtype.
    pub fn discrete_with(n: i64, start: i64, dtype: DType) -> Result<Space> {
        if !dtype.is_integer() || n <= 0 {
            return Err(bad("Discrete needs a positive n and an integer dtype"));
        }
        let (lo, hi) = dtype.int_range();
        if (start as i128) < lo || start as i128 + n as i128 - 1 > hi {
            return Err(bad(format!("Discrete range does not fit {}", dtype.name())));
        }
        Ok(Space::Discrete { n, start, dtype })
    }

    /// `MultiBinary(shape)` of uint8.
    pub fn multi_binary(shape: &[usize]) -> Space {
        Space::MultiBinary {
            shape: shape.to_vec(),
            dtype: DType::U8,
        }
    }

    /// `MultiDiscrete(nvec)` (rank 1, int64, starts at 0).
    pub fn multi_discrete(nvec: &[i64]) -> Result<Space> {
        if nvec.is_empty() || nvec.iter().any(|n| *n <= 0) {
            return Err(bad("MultiDiscrete nvec entries must be positive"));
        }
        Ok(Space::MultiDiscrete {
            shape: vec![nvec.len()],
            nvec: nvec.to_vec(),
            start: vec![0; nvec.len()],
            dtype: DType::I64,
        })
    }

    /// `Text(max_length)` with `min_length` 1 and any character.
    pub fn text(max_length: usize) -> Space {
        Space::Text {
            min_length: 1,
            max_length: max_length.max(1),
            charset: String::new(),
        }
    }

    /// A `Dict` space; children keep the order given.
    pub fn dict<K: Into<String>>(children: impl IntoIterator<Item = (K, Space)>) -> Space {
        Space::Dict(children.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn tuple(children: impl IntoIterator<Item = Space>) -> Space {
        Space::Tuple(children.into_iter().collect())
    }

    fn canonical(self) -> Space {
        match self {
            Space::Box {
                shape,
                dtype,
                bounds,
            } => {
                let bounds = match bounds {
                    Bounds::Elementwise(lo, hi) => {
                        if lo.iter().all(|v| *v == f64::NEG_INFINITY)
                            && hi.iter().all(|v| *v == f64::INFINITY)
                        {
                            Bounds::Unbounded
                        } else if !lo.is_empty()
                            && lo.iter().all(|v| *v == lo[0])
                            && hi.iter().all(|v| *v == hi[0])
                        {
                            Bounds::Uniform(lo[0], hi[0])
                        } else {
                            Bounds::Elementwise(lo, hi)
                        }
                    }
                    Bounds::TypedElementwise(lo, hi) => {
                        if !lo.is_empty()
                            && lo.iter().all(|v| *v == lo[0])
                            && hi.iter().all(|v| *v == hi[0])
                        {
                            Bounds::TypedUniform(lo[0], hi[0])
                        } else {
                            Bounds::TypedElementwise(lo, hi)
                        }
                    }
                    other => other,
                };
                Space::Box {
                    shape,
                    dtype,
                    bounds,
                }
            }
            other => other,
        }
    }

    /// The kind name used on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Space::Box { .. } => "box",
            Space::Discrete { .. } => "discrete",
            Space::MultiBinary { .. } => "multi_binary",
            Space::MultiDiscrete { .. } => "multi_discrete",
            Space::Text { .. } => "text",
            Space::Dict(_) => "dict",
            Space::Tuple(_) => "tuple",
        }
    }

    /// Shape of a leaf (`[]` for discrete, text and composites).
    pub fn shape(&self) -> &[usize] {
        match self {
            Space::Box { shape, .. }
            | Space::MultiBinary { shape, .. }
            | Space::MultiDiscrete { shape, .. } => shape,
            _ => &[],
        }
    }

    /// The dtype the wire declares (`float32` for composites, `uint8` for text).
    pub fn dtype(&self) -> DType {
        match self {
            Space::Box { dtype, .. }
            | Space::Discrete { dtype, .. }
            | Space::MultiBinary { dtype, .. }
            | Space::MultiDiscrete { dtype, .. } => *dtype,
            Space::Text { .. } => DType::U8,
            Space::Dict(_) | Space::Tuple(_) => DType::F32,
        }
    }

    // -- the contract form (docs/protocol.md §6) ------------------------------------------

    /// The `SpaceSpec` map published in the contract.
    pub fn to_spec(&self) -> Mp {
        let shape = Mp::Array(self.shape().iter().map(|d| Mp::Int(*d as i64)).collect());
        let details = match self {
            Space::Box { dtype, bounds, .. } => {
                let f = |v: &[f64]| Mp::Array(v.iter().map(|x| Mp::Float(*x)).collect());
                let int = |v: i128| -> Mp {
                    if *dtype == DType::Bool {
                        Mp::Bool(v != 0)
                    } else if v > i64::MAX as i128 {
                        Mp::UInt(v as u64)
                    } else {
                        Mp::Int(v as i64)
                    }
                };
                let (kind, lo, hi) = match bounds {
                    Bounds::Unbounded => ("unbounded", Mp::Nil, Mp::Nil),
                    Bounds::Uniform(lo, hi) => ("uniform", Mp::Float(*lo), Mp::Float(*hi)),
                    Bounds::Elementwise(lo, hi) => ("elementwise", f(lo), f(hi)),
                    Bounds::TypedUniform(lo, hi) => (
                        "typed_uniform",
                        Mp::Array(vec![int(*lo)]),
                        Mp::Array(vec![int(*hi)]),
                    ),
                    Bounds::TypedElementwise(lo, hi) => (
                        "typed_elementwise",
                        Mp::Array(lo.iter().map(|v| int(*v)).collect()),
                        Mp::Array(hi.iter().map(|v| int(*v)).collect()),
                    ),
                };
                vec![("bounds_kind", Mp::str(kind)), ("low", lo), ("high", hi)]
            }
            Space::Discrete { n, start, .. } => {
                vec![("n", Mp::Int(*n)), ("start", Mp::Int(*start))]
            }
            Space::MultiBinary { shape, .. } => {
                if shape.len() == 1 {
                    vec![("size", Mp::Int(shape[0] as i64))]
                } else {
                    vec![(
                        "dims",
                        Mp::Array(shape.iter().map(|d| Mp::Int(*d as i64)).collect()),
                    )]
                }
            }
            Space::MultiDiscrete {
                shape, nvec, start, ..
            } => {
                let mut d = vec![("nvec", nest(nvec, shape))];
                if start.iter().any(|s| *s != 0) {
                    d.push(("start", nest(start, shape)));
                }
                d
            }
            Space::Text {
                min_length,
                max_length,
                charset,
            } => vec![
                ("min_length", Mp::Int(*min_length as i64)),
                ("max_length", Mp::Int(*max_length as i64)),
                ("charset", Mp::str(charset.as_str())),
            ],
            Space::Dict(children) => {
                vec![(
                    "spaces",
                    Mp::Map(
                        children
                            .iter()
                            .map(|(k, s)| (Mp::str(k.as_str()), s.to_spec()))
                            .collect(),
                    ),
                )]
            }
            Space::Tuple(children) => vec![(
                "spaces",
                Mp::Array(children.iter().map(Space::to_spec).collect()),
            )],
        };
        Mp::Map(vec![
            (Mp::str("kind"), Mp::str(self.kind())),
            (Mp::str("shape"), shape),
            (Mp::str("dtype"), Mp::str(self.dtype().name())),
            (
                Mp::str("details"),
                Mp::Map(details.into_iter().map(|(k, v)| (Mp::str(k), v)).collect()),
            ),
        ])
    }

    /// Rebuild a space from its `SpaceSpec` map (what a client reads from `Welcome`).
    pub fn from_spec(spec: &Mp) -> Result<Space> {
        Space::from_spec_depth(spec, 0)
    }

    fn from_spec_depth(spec: &Mp, depth: usize) -> Result<Space> {
        let p = |m: String| Error::protocol(format!("invalid space spec: {m}"));
        if depth > 32 {
            return Err(p("nested deeper than 32 levels".into()));
        }
        let kind = spec
            .get("kind")
            .and_then(Mp::as_str)
            .ok_or_else(|| p("missing kind".into()))?;
        let dtype_name = spec.get("dtype").and_then(Mp::as_str).unwrap_or("float32");
        let dtype = DType::from_name(dtype_name)
            .ok_or_else(|| p(format!("unknown dtype {dtype_name:?}")))?;
        let shape: Vec<usize> = match spec.get("shape") {
            Some(Mp::Array(dims)) => dims
                .iter()
                .map(|d| {
                    d.as_i64()
                        .filter(|v| *v >= 0)
                        .map(|v| v as usize)
                        .ok_or_else(|| p("bad shape".into()))
                })
                .collect::<Result<_>>()?,
            _ => vec![],
        };
        let empty = Mp::Map(vec![]);
        let det = spec
            .get("details")
            .filter(|d| !d.is_nil())
            .unwrap_or(&empty);
        let int = |key: &str| det.get(key).and_then(Mp::as_i64);
        let ints = |m: &Mp| -> Result<Vec<i128>> {
            m.as_array()
                .ok_or_else(|| p("typed bounds must be lists".into()))?
                .iter()
                .map(|v| match v {
                    Mp::Int(i) => Ok(*i as i128),
                    Mp::UInt(u) => Ok(*u as i128),
                    Mp::Bool(b) => Ok(*b as i128),
                    _ => Err(p("typed bounds must be integers".into())),
                })
                .collect()
        };
        let floats = |m: &Mp| -> Result<Vec<f64>> {
            match m {
                Mp::Array(a) => a
                    .iter()
                    .map(|v| v.as_f64().ok_or_else(|| p("bounds must be numbers".into())))
                    .collect(),
                v => Ok(vec![v
                    .as_f64()
                    .ok_or_else(|| p("bounds must be numbers".into()))?]),
            }
        };
        let numel = checked_numel(&shape).ok_or_else(|| p("shape too large".into()))?;
        Ok(match kind {
            "box" => {
                let nil = Mp::Nil;
                let lo = det.get("low").unwrap_or(&nil);
                let hi = det.get("high").unwrap_or(&nil);
                let bounds = match det.get("bounds_kind").and_then(Mp::as_str) {
                    Some("unbounded") => Bounds::Unbounded,
                    Some("uniform") => Bounds::Uniform(
                        lo.as_f64().ok_or_else(|| p("uniform low".into()))?,
                        hi.as_f64().ok_or_else(|| p("uniform high".into()))?,
                    ),
                    Some("elementwise") => {
                        let (l, h) = (floats(lo)?, floats(hi)?);
                        if l.len() != numel || h.len() != numel {
                            return Err(p("elementwise bounds do not match the shape".into()));
                        }
                        Bounds::Elementwise(l, h)
                    }
                    Some("typed_uniform") => {
                        let (l, h) = (ints(lo)?, ints(hi)?);
                        if l.len() != 1 || h.len() != 1 {
                            return Err(p("typed_uniform bounds must be one-element lists".into()));
                        }
                        Bounds::TypedUniform(l[0], h[0])
                    }
                    Some("typed_elementwise") => {
                        let (l, h) = (ints(lo)?, ints(hi)?);
                        if l.len() != numel || h.len() != numel {
                            return Err(
                                p("typed_elementwise bounds do not match the shape".into()),
                            );
                        }
                        Bounds::TypedElementwise(l, h)
                    }
                    other => return Err(p(format!("unknown Box bounds_kind {other:?}"))),
                };
                Space::Box {
                    shape,
                    dtype,
                    bounds,
                }
            }
            "discrete" => Space::Discrete {
                n: int("n").ok_or_else(|| p("Discrete n".into()))?,
                start: int("start").unwrap_or(0),
                dtype,
            },
            "multi_binary" => Space::MultiBinary { shape, dtype },
            "multi_discrete" => {
                let mut nvec = Vec::new();
                flatten_ints(
                    det.get("nvec")
                        .ok_or_else(|| p("MultiDiscrete nvec".into()))?,
                    &mut nvec,
                    0,
                )
                .map_err(p)?;
                let mut start = Vec::new();
                match det.get("start") {
                    Some(s) if !s.is_nil() => flatten_ints(s, &mut start, 0).map_err(p)?,
                    _ => start = vec![0; nvec.len()],
                }
                if nvec.len() != numel || start.len() != numel {
                    return Err(p("MultiDiscrete nvec does not match its shape".into()));
                }
                Space::MultiDiscrete {
                    shape,
                    nvec,
                    start,
                    dtype,
                }
            }
            "text" => Space::Text {
                min_length: int("min_length").unwrap_or(1).max(0) as usize,
                max_length: int("max_length")
                    .ok_or_else(|| p("Text max_length".into()))?
                    .max(0) as usize,
                charset: det
                    .get("charset")
                    .and_then(Mp::as_str)
                    .unwrap_or("")
                    .to_owned(),
            },
            "dict" => match det.get("spaces") {
                Some(Mp::Map(entries)) => Space::Dict(
                    entries
                        .iter()
                        .map(|(k, v)| {
                            let key = k
                                .as_str()
                                .ok_or_else(|| p("Dict keys must be strings".into()))?;
                            Ok((key.to_owned(), Space::from_spec_depth(v, depth + 1)?))
                        })
                        .collect::<Result<_>>()?,
                ),
                _ => return Err(p("Dict spec needs a 'spaces' mapping".into())),
            },
            "tuple" => match det.get("spaces") {
                Some(Mp::Array(items)) => Space::Tuple(
                    items
                        .iter()
                        .map(|v| Space::from_spec_depth(v, depth + 1))
                        .collect::<Result<_>>()?,
                ),
                _ => return Err(p("Tuple spec needs a 'spaces' list".into())),
            },
            other => return Err(p(format!("unsupported space kind {other:?}"))),
        })
    }

    // -- the leaf codec (docs/protocol.md §5) -----------------------------------------------

    /// Split `value` into header scalars and raw segments, checking it against this
    /// space and coercing numeric dtypes (VAL-11). Segments borrow the value's bytes
    /// when no conversion is needed. Errors name the path (`$.key[1]`).
    pub fn split<'v>(&self, value: &'v Value) -> std::result::Result<Split<'v>, String> {
        let mut scalars = Vec::new();
        let mut segments = Vec::new();
        self.split_into(value, "$", &mut scalars, &mut segments)?;
        Ok((scalars, segments))
    }

    fn split_into<'v>(
        &self,
        value: &'v Value,
        path: &str,
        scalars: &mut Vec<Mp>,
        segments: &mut Vec<Cow<'v, [u8]>>,
    ) -> std::result::Result<(), String> {
        match self {
            Space::Box { .. } | Space::MultiBinary { .. } | Space::MultiDiscrete { .. } => {
                let seg = self.leaf_bytes(value, path)?;
                self.check_leaf(&seg, path)?;
                segments.push(seg);
            }
            Space::Discrete { n, start, .. } => {
                let v = discrete_of(value).ok_or_else(|| {
                    format!(
                        "{path}: Discrete value must be an integer, got {}",
                        value.type_name()
                    )
                })?;
                if v < *start as i128 || v >= *start as i128 + *n as i128 {
                    return Err(format!(
                        "{path}: Discrete value {v} not in range [{start}, {})",
                        *start as i128 + *n as i128
                    ));
                }
                scalars.push(Mp::Int(v as i64));
            }
            Space::Text { .. } => match value {
                Value::Text(s) => scalars.push(Mp::Str(s.clone())),
                other => {
                    return Err(format!(
                        "{path}: Text value must be a string, got {}",
                        other.type_name()
                    ))
                }
            },
            Space::Dict(children) => {
                let Value::Dict(d) = value else {
                    return Err(format!(
                        "{path}: Dict value must be a Dict, got {}",
                        value.type_name()
                    ));
                };
                for (k, child) in children {
                    let v = d
                        .get(k)
                        .ok_or_else(|| format!("{path}: Dict value is missing key {k:?}"))?;
                    child.split_into(v, &format!("{path}.{k}"), scalars, segments)?;
                }
            }
            Space::Tuple(children) => {
                let items = value.as_seq().ok_or_else(|| {
                    format!(
                        "{path}: Tuple value must be a Tuple, got {}",
                        value.type_name()
                    )
                })?;
                if items.len() != children.len() {
                    return Err(format!(
                        "{path}: Tuple value has {} elements, expected {}",
                        items.len(),
                        children.len()
                    ));
                }
                for (i, (child, v)) in children.iter().zip(items).enumerate() {
                    child.split_into(v, &format!("{path}[{i}]"), scalars, segments)?;
                }
            }
        }
        Ok(())
    }

    /// The C-order bytes of an array leaf in the space's dtype and shape.
    fn leaf_bytes<'v>(
        &self,
        value: &'v Value,
        path: &str,
    ) -> std::result::Result<Cow<'v, [u8]>, String> {
        let (shape, dtype) = (self.shape(), self.dtype());
        let label = match self {
            Space::Box { .. } => "Box",
            Space::MultiBinary { .. } => "MultiBinary",
            _ => "MultiDiscrete",
        };
        let numel: usize = shape.iter().product();
        match value {
            Value::Tensor(t) => {
                let same_shape = t.shape() == shape
                    || (!matches!(self, Space::Box { .. }) && t.numel() == numel);
                if !same_shape {
                    return Err(format!(
                        "{path}: {label} value has shape {:?}, expected {shape:?}",
                        t.shape()
                    ));
                }
                if t.dtype() == dtype {
                    return Ok(Cow::Borrowed(t.data()));
                }
                coerce(t.dtype(), t.data(), numel, dtype, path).map(Cow::Owned)
            }
            Value::Float(_) | Value::Int(_) | Value::UInt(_) | Value::Bool(_)
                if numel == 1 && (shape.is_empty() || label != "Box") =>
            {
                let mut one = Vec::with_capacity(8);
                let num = match value {
                    Value::Float(f) => (Num::F(*f), DType::F64),
                    Value::Int(i) => (Num::I(*i as i128), DType::I64),
                    Value::UInt(u) => (Num::I(*u as i128), DType::U64),
                    Value::Bool(b) => (Num::I(*b as i128), DType::Bool),
                    _ => unreachable!(),
                };
                write_num(num.1, num.0, &mut one);
                coerce(num.1, &one, 1, dtype, path).map(Cow::Owned)
            }
            Value::List(items) | Value::Tuple(items)
                if shape.len() == 1 || (label != "Box" && items.len() == numel) =>
            {
                if items.len() != numel {
                    return Err(format!(
                        "{path}: {label} value has {} elements, expected {numel}",
                        items.len()
                    ));
                }
                let mut out = Vec::with_capacity(numel * dtype.itemsize());
                for item in items {
                    let (num, src) = match item {
                        Value::Float(f) => (Num::F(*f), DType::F64),
                        Value::Int(i) => (Num::I(*i as i128), DType::I64),
                        Value::UInt(u) => (Num::I(*u as i128), DType::U64),
                        Value::Bool(b) => (Num::I(*b as i128), DType::Bool),
                        other => {
                            return Err(format!(
                                "{path}: {label} elements must be numbers, got {}",
                                other.type_name()
                            ))
                        }
                    };
                    let mut one = Vec::with_capacity(8);
                    write_num(src, num, &mut one);
                    out.extend(coerce(src, &one, 1, dtype, path)?);
                }
                Ok(Cow::Owned(out))
            }
            other => Err(format!(
                "{path}: {label} value must be a Tensor, got {}",
                other.type_name()
            )),
        }
    }

    /// Structural checks of an array leaf (CNF-2): no NaN in float boxes, 0/1 in
    /// multi-binary, nvec ranges in multi-discrete.
    fn check_leaf(&self, bytes: &[u8], path: &str) -> std::result::Result<(), String> {
        match self {
            Space::Box { dtype, .. } if dtype.is_float() => {
                let n = bytes.len() / dtype.itemsize();
                for i in 0..n {
                    if let Num::F(f) = read_num(*dtype, bytes, i) {
                        if f.is_nan() {
                            return Err(format!("{path}: Box value contains NaN at element {i}"));
                        }
                    }
                }
            }
            Space::MultiBinary { dtype, .. } => {
                for (i, b) in bytes.iter().enumerate() {
                    if *b > 1 {
                        let v = if *dtype == DType::I8 {
                            *b as i8 as i64
                        } else {
                            *b as i64
                        };
                        return Err(format!(
                            "{path}: MultiBinary value at element {i} is {v}; expected 0 or 1"
                        ));
                    }
                }
            }
            Space::MultiDiscrete {
                nvec, start, dtype, ..
            } => {
                for i in 0..nvec.len() {
                    if let Num::I(v) = read_num(*dtype, bytes, i) {
                        let (lo, hi) = (start[i] as i128, start[i] as i128 + nvec[i] as i128);
                        if v < lo || v >= hi {
                            return Err(format!("{path}: MultiDiscrete value at element {i}: value {v} not in range [{lo}, {hi})"));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Range deviations (CNF-3) of a value already split by [`split`](Space::split)
    /// (or accepted by [`join`](Space::join)): Box elements outside their bounds
    /// (compared in the Box dtype, float bounds rounded to it) and Text length or
    /// charset. Returns `(path, detail)` pairs, empty when the value is in range.
    pub fn range_deviations<S: AsRef<[u8]>>(
        &self,
        scalars: &[Mp],
        segments: &[S],
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut cur = (0usize, 0usize);
        self.range_at(scalars, segments, &mut cur, "$", &mut out);
        out
    }

    fn range_at<S: AsRef<[u8]>>(
        &self,
        scalars: &[Mp],
        segments: &[S],
        cur: &mut (usize, usize),
        path: &str,
        out: &mut Vec<(String, String)>,
    ) {
        match self {
            Space::Box { dtype, bounds, .. } => {
                let Some(seg) = segments.get(cur.1) else {
                    return;
                };
                cur.1 += 1;
                let bytes = seg.as_ref();
                let n = bytes.len() / dtype.itemsize();
                let round = |b: f64| -> f64 {
                    match dtype {
                        DType::F32 => b as f32 as f64,
                        DType::F16 => {
                            crate::value::f16_to_f32(crate::value::f32_to_f16(b as f32)) as f64
                        }
                        _ => b,
                    }
                };
                for i in 0..n {
                    let (below, above) = match (bounds, read_num(*dtype, bytes, i)) {
                        (Bounds::Unbounded, _) => return,
                        (Bounds::Uniform(lo, hi), Num::F(v)) => (v < round(*lo), v > round(*hi)),
                        (Bounds::Elementwise(lo, hi), Num::F(v)) => {
                            (v < round(lo[i]), v > round(hi[i]))
                        }
                        (Bounds::TypedUniform(lo, hi), Num::I(v)) => (v < *lo, v > *hi),
                        (Bounds::TypedElementwise(lo, hi), Num::I(v)) => (v < lo[i], v > hi[i]),
                        _ => (false, false),
                    };
                    if below || above {
                        let side = if below {
                            "below low bound"
                        } else {
                            "above high bound"
                        };
                        out.push((
                            path.to_owned(),
                            format!("Box value at element {i} out of bounds: {side}"),
                        ));
                        return;
                    }
                }
            }
            Space::MultiBinary { .. } | Space::MultiDiscrete { .. } => cur.1 += 1,
            Space::Discrete { .. } => cur.0 += 1,
            Space::Text {
                min_length,
                max_length,
                charset,
            } => {
                let Some(Mp::Str(text)) = scalars.get(cur.0) else {
                    return;
                };
                cur.0 += 1;
                let len = text.chars().count();
                if len < *min_length || len > *max_length {
                    out.push((
                        path.to_owned(),
                        format!("Text value length {len} outside [{min_length}, {max_length}]"),
                    ));
                }
                if !charset.is_empty() {
                    if let Some((i, c)) = text
                        .chars()
                        .enumerate()
                        .find(|(_, c)| !charset.contains(*c))
                    {
                        out.push((
                            path.to_owned(),
                            format!("Text value character '{c}' at index {i} not in charset"),
                        ));
                    }
                }
            }
            Space::Dict(children) => {
                for (k, child) in children {
                    child.range_at(scalars, segments, cur, &format!("{path}.{k}"), out);
                }
            }
            Space::Tuple(children) => {
                for (i, child) in children.iter().enumerate() {
                    child.range_at(scalars, segments, cur, &format!("{path}[{i}]"), out);
                }
            }
        }
    }

    /// Whether any value of this space can be out of range (skips the check on hot paths).
    pub fn has_range(&self) -> bool {
        match self {
            Space::Box { bounds, dtype, .. } => match bounds {
                Bounds::Unbounded => false,
                Bounds::TypedUniform(lo, hi) => {
                    let (a, b) = dtype.int_range();
                    *lo > a || *hi < b
                }
                _ => true,
            },
            Space::Text { .. } => true,
            Space::Dict(c) => c.iter().any(|(_, s)| s.has_range()),
            Space::Tuple(c) => c.iter().any(Space::has_range),
            _ => false,
        }
    }

    /// Leaf counts: (header scalars, segments) every value of this space produces.
    pub fn leaf_counts(&self) -> (usize, usize) {
        match self {
            Space::Box { .. } | Space::MultiBinary { .. } | Space::MultiDiscrete { .. } => (0, 1),
            Space::Discrete { .. } | Space::Text { .. } => (1, 0),
            Space::Dict(c) => c.iter().fold((0, 0), |(a, b), (_, s)| {
                let (x, y) = s.leaf_counts();
                (a + x, b + y)
            }),
            Space::Tuple(c) => c.iter().fold((0, 0), |(a, b), s| {
                let (x, y) = s.leaf_counts();
                (a + x, b + y)
            }),
        }
    }

    /// Join header scalars and raw segments back into a value, checking every count,
    /// length and type exactly and running the structural checks.
    pub fn join(&self, scalars: &[Mp], segments: &[&[u8]]) -> std::result::Result<Value, String> {
        let (ns, ng) = self.leaf_counts();
        if scalars.len() != ns || segments.len() != ng {
            return Err(format!(
                "value for a {} space needs {ns} scalars and {ng} segments, got {} and {}",
                self.kind(),
                scalars.len(),
                segments.len()
            ));
        }
        let mut cur = (0usize, 0usize);
        self.join_at(scalars, segments, &mut cur, "$")
    }

    fn join_at(
        &self,
        scalars: &[Mp],
        segments: &[&[u8]],
        cur: &mut (usize, usize),
        path: &str,
    ) -> std::result::Result<Value, String> {
        Ok(match self {
            Space::Box { .. } | Space::MultiBinary { .. } | Space::MultiDiscrete { .. } => {
                let raw = segments[cur.1];
                cur.1 += 1;
                let need = self.shape().iter().product::<usize>() * self.dtype().itemsize();
                if raw.len() != need {
                    return Err(format!(
                        "{path}: segment carries {} bytes; {}{:?} needs {need}",
                        raw.len(),
                        self.dtype().name(),
                        self.shape()
                    ));
                }
                if self.dtype() == DType::Bool && raw.iter().any(|b| *b > 1) {
                    return Err(format!(
                        "{path}: bool segment holds bytes other than 0 and 1"
                    ));
                }
                self.check_leaf(raw, path)?;
                Value::Tensor(
                    Tensor::new(self.dtype(), self.shape().to_vec(), raw.to_vec())
                        .map_err(|e| e.to_string())?,
                )
            }
            Space::Discrete { n, start, .. } => {
                let m = &scalars[cur.0];
                cur.0 += 1;
                let v = match m {
                    Mp::Int(i) => *i as i128,
                    Mp::UInt(u) => *u as i128,
                    _ => return Err(format!("{path}: expected an integer")),
                };
                if v < *start as i128 || v >= *start as i128 + *n as i128 {
                    return Err(format!(
                        "{path}: Discrete value {v} not in range [{start}, {})",
                        *start as i128 + *n as i128
                    ));
                }
                Value::Int(v as i64)
            }
            Space::Text { .. } => {
                let m = &scalars[cur.0];
                cur.0 += 1;
                match m {
                    Mp::Str(s) => Value::Text(s.clone()),
                    _ => return Err(format!("{path}: expected a string")),
                }
            }
            Space::Dict(children) => {
                let mut d = InfoDict::new();
                for (k, child) in children {
                    d.insert(
                        k.clone(),
                        child.join_at(scalars, segments, cur, &format!("{path}.{k}"))?,
                    );
                }
                Value::Dict(d)
            }
            Space::Tuple(children) => Value::Tuple(
                children
                    .iter()
                    .enumerate()
                    .map(|(i, c)| c.join_at(scalars, segments, cur, &format!("{path}[{i}]")))
                    .collect::<std::result::Result<_, _>>()?,
            ),
        })
    }
}

fn discrete_of(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(*i as i128),
        Value::UInt(u) => Some(*u as i128),
        Value::Bool(b) => Some(*b as i128),
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 => Some(*f as i128),
        Value::Tensor(t) if t.numel() == 1 && !t.dtype().is_float() => {
            match read_num(t.dtype(), t.data(), 0) {
                Num::I(i) => Some(i),
                Num::F(_) => None,
            }
        }
        _ => None,
    }
}

/// VAL-11 coercion: floats convert freely to float dtypes; to integer dtypes only when
/// finite and integral; integers only when representable (no wraparound).
fn coerce(
    src: DType,
    data: &[u8],
    numel: usize,
    dst: DType,
    path: &str,
) -> std::result::Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(numel * dst.itemsize());
    let (lo, hi) = dst.int_range();
    for i in 0..numel {
        let v = read_num(src, data, i);
        if !dst.is_float() {
            let iv = match v {
                Num::F(f) => {
                    if !(f.is_finite() && f.fract() == 0.0) {
                        return Err(format!(
                            "{path}: float value supplied for integer dtype {} is not integral",
                            dst.name()
                        ));
                    }
                    f as i128
                }
                Num::I(i) => i,
            };
            if iv < lo || iv > hi {
                return Err(format!(
                    "{path}: value supplied for dtype {} is not representable in its range",
                    dst.name()
                ));
            }
            write_num(dst, Num::I(iv), &mut out);
        } else {
            write_num(dst, v, &mut out);
        }
    }
    Ok(out)
}

fn nest(flat: &[i64], shape: &[usize]) -> Mp {
    if shape.len() <= 1 {
        return Mp::Array(flat.iter().map(|v| Mp::Int(*v)).collect());
    }
    let inner: usize = shape[1..].iter().product();
    Mp::Array(
        flat.chunks(inner.max(1))
            .map(|c| nest(c, &shape[1..]))
            .collect(),
    )
}

fn flatten_ints(m: &Mp, out: &mut Vec<i64>, depth: usize) -> std::result::Result<(), String> {
    if depth > 32 {
        return Err("nvec nested too deep".into());
    }
    match m {
        Mp::Int(i) => out.push(*i),
        Mp::Array(items) => {
            for item in items {
                flatten_ints(item, out, depth + 1)?;
            }
        }
        _ => return Err("nvec entries must be integers".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack;

    fn roundtrip(space: &Space) {
        let bytes = space.to_spec().to_bytes();
        let back = Space::from_spec(&msgpack::decode(&bytes).unwrap()).unwrap();
        assert_eq!(&back, space);
    }

    #[test]
    fn specs_round_trip() {
        roundtrip(&Space::box_uniform(&[4], DType::F32, f64::NEG_INFINITY, f64::INFINITY).unwrap());
        roundtrip(&Space::box_uniform(&[2, 3], DType::F64, -1.0, 1.0).unwrap());
        roundtrip(&Space::box_elementwise(&[2], DType::F32, &[-1.0, 0.0], &[1.0, 2.0]).unwrap());
        roundtrip(&Space::box_int(&[2], DType::U8, 0, 255).unwrap());
        roundtrip(&Space::box_int(&[2], DType::U64, 0, u64::MAX as i128).unwrap());
        roundtrip(&Space::box_int(&[], DType::Bool, 0, 1).unwrap());
        roundtrip(&Space::discrete(3));
        roundtrip(&Space::multi_binary(&[5]));
        roundtrip(&Space::MultiBinary {
            shape: vec![2, 2],
            dtype: DType::Bool,
        });
        roundtrip(&Space::MultiDiscrete {
            shape: vec![2, 2],
            nvec: vec![2, 3, 4, 5],
            start: vec![0, 1, 0, 0],
            dtype: DType::I64,
        });
        roundtrip(&Space::text(8));
        roundtrip(&Space::dict([
            ("z", Space::discrete(2)),
            (
                "a",
                Space::tuple([Space::text(3), Space::multi_binary(&[2])]),
            ),
        ]));
    }

    #[test]
    fn canonical_bounds_follow_the_python_forms() {
        let s = Space::box_elementwise(&[2], DType::F32, &[-1.0, -1.0], &[1.0, 1.0]).unwrap();
        assert!(matches!(
            s,
            Space::Box {
                bounds: Bounds::Uniform(..),
                ..
            }
        ));
        let s = Space::box_uniform(&[2], DType::F32, f64::NEG_INFINITY, f64::INFINITY).unwrap();
        assert!(matches!(
            s,
            Space::Box {
                bounds: Bounds::Unbounded,
                ..
            }
        ));
        let s = Space::box_elementwise(&[2], DType::I32, &[0.0, 1.0], &[5.0, 5.0]).unwrap();
        assert!(matches!(
            s,
            Space::Box {
                bounds: Bounds::TypedElementwise(..),
                ..
            }
        ));
        assert!(Space::box_elementwise(&[2], DType::F32, &[f64::NAN], &[1.0]).is_err());
        assert!(Space::box_elementwise(&[2], DType::F32, &[2.0], &[1.0]).is_err());
    }

    #[test]
    fn split_and_join_follow_the_declared_order() {
        let space = Space::dict([
            ("image", Space::box_int(&[2, 2], DType::U8, 0, 255).unwrap()),
            ("mode", Space::discrete(3)),
            (
                "state",
                Space::box_uniform(&[2], DType::F32, -1.0, 1.0).unwrap(),
            ),
        ]);
        let value = Value::Dict(
            InfoDict::new()
                .with("state", Value::tensor(&[2], &[0.5f64, -0.5])) // float64 coerced to float32
                .with("mode", 2i64)
                .with("image", Value::tensor(&[2, 2], &[1u8, 2, 3, 4])),
        );
        let (scalars, segments) = space.split(&value).unwrap();
        assert_eq!(scalars, vec![Mp::Int(2)]);
        assert_eq!(segments[0].as_ref(), &[1, 2, 3, 4]);
        assert_eq!(
            segments[1].as_ref(),
            [0.5f32.to_le_bytes(), (-0.5f32).to_le_bytes()].concat()
        );
        let segs: Vec<&[u8]> = segments.iter().map(|s| s.as_ref()).collect();
        let back = space.join(&scalars, &segs).unwrap();
        assert_eq!(
            back.as_dict().unwrap().keys().collect::<Vec<_>>(),
            vec!["image", "mode", "state"]
        );
        assert_eq!(
            back.as_dict().unwrap()["state"],
            Value::tensor(&[2], &[0.5f32, -0.5])
        );
    }

    #[test]
    fn structural_violations_name_the_path() {
        let space = Space::dict([(
            "a",
            Space::tuple([
                Space::discrete(2),
                Space::box_uniform(&[1], DType::F32, -1.0, 1.0).unwrap(),
            ]),
        )]);
        let bad_discrete = Value::Dict(InfoDict::new().with(
            "a",
            Value::Tuple(vec![Value::Int(5), Value::tensor(&[1], &[0.0f32])]),
        ));
        assert!(space
            .split(&bad_discrete)
            .unwrap_err()
            .starts_with("$.a[0]: Discrete value 5 not in range"));
        let nan = Value::Dict(InfoDict::new().with(
            "a",
            Value::Tuple(vec![Value::Int(1), Value::tensor(&[1], &[f32::NAN])]),
        ));
        assert!(space.split(&nan).unwrap_err().contains("NaN"));
        let wrong_shape = Value::Dict(InfoDict::new().with(
            "a",
            Value::Tuple(vec![Value::Int(1), Value::tensor(&[2], &[0.0f32, 1.0])]),
        ));
        assert!(space.split(&wrong_shape).unwrap_err().contains("shape"));
        assert!(space.split(&Value::Int(1)).is_err());
        assert!(Space::multi_binary(&[2])
            .split(&Value::tensor(&[2], &[0u8, 2]))
            .is_err());
        assert!(Space::box_int(&[1], DType::U8, 0, 9)
            .unwrap()
            .split(&Value::tensor(&[1], &[300i64]))
            .is_err());
        assert!(Space::box_int(&[1], DType::U8, 0, 9)
            .unwrap()
            .split(&Value::tensor(&[1], &[1.5f64]))
            .is_err());
    }

    #[test]
    fn range_deviations_follow_the_python_checks() {
        let space = Space::dict([
            (
                "b",
                Space::box_uniform(&[2], DType::F32, -1.0, 1.0).unwrap(),
            ),
            (
                "t",
                Space::Text {
                    min_length: 2,
                    max_length: 3,
                    charset: "ab".into(),
                },
            ),
            ("u", Space::box_int(&[1], DType::U8, 0, 255).unwrap()),
        ]);
        let ok = Value::Dict(
            InfoDict::new()
                .with("b", Value::tensor(&[2], &[0.5f32, 1.0]))
                .with("t", "ab")
                .with("u", Value::tensor(&[1], &[9u8])),
        );
        let (sc, sg) = space.split(&ok).unwrap();
        assert!(space.range_deviations(&sc, &sg).is_empty());
        let bad = Value::Dict(
            InfoDict::new()
                .with("b", Value::tensor(&[2], &[0.5f32, 1.5]))
                .with("t", "abca")
                .with("u", Value::tensor(&[1], &[9u8])),
        );
        let (sc, sg) = space.split(&bad).unwrap();
        assert_eq!(
            space.range_deviations(&sc, &sg),
            vec![
                (
                    "$.b".to_owned(),
                    "Box value at element 1 out of bounds: above high bound".to_owned()
                ),
                (
                    "$.t".to_owned(),
                    "Text value length 4 outside [2, 3]".to_owned()
                ),
                (
                    "$.t".to_owned(),
                    "Text value character 'c' at index 2 not in charset".to_owned()
                ),
            ]
        );
        assert!(space.has_range());
        assert!(!Space::box_int(&[1], DType::U8, 0, 255).unwrap().has_range());
        assert!(!Space::discrete(3).has_range());
    }

    #[test]
    fn join_checks_counts_and_lengths() {
        let space = Space::box_uniform(&[2], DType::F32, -1.0, 1.0).unwrap();
        assert!(space.join(&[], &[&[0u8; 7]]).is_err());
        assert!(space.join(&[Mp::Int(1)], &[&[0u8; 8]]).is_err());
        assert!(space.join(&[], &[&[0u8; 8]]).is_ok());
        assert!(Space::discrete(2).join(&[Mp::str("x")], &[]).is_err());
        assert!(Space::box_int(&[1], DType::Bool, 0, 1)
            .unwrap()
            .join(&[], &[&[2u8]])
            .is_err());
    }
}
