//! The msgpack subset the wire protocol uses (docs/protocol.md §3, §7): nil, bool,
//! int (i64 / u64), float64 (float32 is read), str, bin, array, map and ext.
//!
//! The encoder writes the smallest form of every value, as msgspec does, so a frame
//! built here is byte-identical to the Python reference (the shared golden vectors in
//! `tests/vectors/` pin this). The decoder is bounded: nesting depth is capped, every
//! declared length is checked against the bytes that remain *before* anything is
//! allocated, and no input makes it panic (see `tests/fuzz.rs`).

use std::fmt;

/// Deepest nesting of arrays/maps the decoder accepts: a header may nest 128 levels
/// (docs/serving.md "Limits"), so metadata nested the documented 64 levels fits inside
/// any message that carries it.
pub const MAX_DEPTH: usize = 128;

/// A decoded msgpack value.
#[derive(Clone, Debug, PartialEq)]
pub enum Mp {
    Nil,
    Bool(bool),
    /// Any integer that fits i64 (negative or not).
    Int(i64),
    /// A non-negative integer above `i64::MAX`.
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Mp>),
    /// Entries in wire order.
    Map(Vec<(Mp, Mp)>),
    Ext(i8, Vec<u8>),
}

/// Why bytes are not an acceptable msgpack value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError(msg.into()))
}

impl Mp {
    /// A `str` value.
    pub fn str(s: impl Into<String>) -> Mp {
        Mp::Str(s.into())
    }

    /// Field lookup in a map with string keys.
    pub fn get(&self, key: &str) -> Option<&Mp> {
        match self {
            Mp::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(k, Mp::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Mp::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Mp::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Mp::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A number as f64 (ints convert).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Mp::Float(f) => Some(*f),
            Mp::Int(i) => Some(*i as f64),
            Mp::UInt(u) => Some(*u as f64),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Mp]> {
        match self {
            Mp::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Mp::Nil)
    }

    /// Encode to a fresh buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        encode(self, &mut out);
        out
    }
}

// -- encoding -----------------------------------------------------------------------------

/// Append the msgpack encoding of `v` to `out` (smallest forms, like msgspec).
pub fn encode(v: &Mp, out: &mut Vec<u8>) {
    match v {
        Mp::Nil => out.push(0xc0),
        Mp::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Mp::Int(i) => write_int(out, *i),
        Mp::UInt(u) => write_uint(out, *u),
        Mp::Float(f) => write_f64(out, *f),
        Mp::Str(s) => write_str(out, s),
        Mp::Bin(b) => write_bin(out, b),
        Mp::Array(items) => {
            write_array_len(out, items.len());
            for item in items {
                encode(item, out);
            }
        }
        Mp::Map(entries) => {
            write_map_len(out, entries.len());
            for (k, val) in entries {
                encode(k, out);
                encode(val, out);
            }
        }
        Mp::Ext(t, data) => write_ext(out, *t, data),
    }
}

pub fn write_nil(out: &mut Vec<u8>) {
    out.push(0xc0);
}

pub fn write_bool(out: &mut Vec<u8>, b: bool) {
    out.push(if b { 0xc3 } else { 0xc2 });
}

pub fn write_uint(out: &mut Vec<u8>, u: u64) {
    if u < 128 {
        out.push(u as u8);
    } else if u <= u8::MAX as u64 {
        out.extend_from_slice(&[0xcc, u as u8]);
    } else if u <= u16::MAX as u64 {
        out.push(0xcd);
        out.extend_from_slice(&(u as u16).to_be_bytes());
    } else if u <= u32::MAX as u64 {
        out.push(0xce);
        out.extend_from_slice(&(u as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&u.to_be_bytes());
    }
}

pub fn write_int(out: &mut Vec<u8>, i: i64) {
    if i >= 0 {
        write_uint(out, i as u64);
    } else if i >= -32 {
        out.push(i as i8 as u8);
    } else if i >= i8::MIN as i64 {
        out.extend_from_slice(&[0xd0, i as i8 as u8]);
    } else if i >= i16::MIN as i64 {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= i32::MIN as i64 {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

pub fn write_f64(out: &mut Vec<u8>, f: f64) {
    out.push(0xcb);
    out.extend_from_slice(&f.to_be_bytes());
}

pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= u8::MAX as usize {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= u16::MAX as usize {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

pub fn write_bin(out: &mut Vec<u8>, b: &[u8]) {
    let n = b.len();
    if n <= u8::MAX as usize {
        out.extend_from_slice(&[0xc4, n as u8]);
    } else if n <= u16::MAX as usize {
        out.push(0xc5);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(b);
}

pub fn write_array_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

pub fn write_map_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x80 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xde);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

pub fn write_ext(out: &mut Vec<u8>, t: i8, data: &[u8]) {
    let n = data.len();
    match n {
        1 => out.push(0xd4),
        2 => out.push(0xd5),
        4 => out.push(0xd6),
        8 => out.push(0xd7),
        16 => out.push(0xd8),
        _ if n <= u8::MAX as usize => out.extend_from_slice(&[0xc7, n as u8]),
        _ if n <= u16::MAX as usize => {
            out.push(0xc8);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        _ => {
            out.push(0xc9);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
    }
    out.push(t as u8);
    out.extend_from_slice(data);
}

// -- decoding -----------------------------------------------------------------------------

/// Decode exactly one value filling all of `buf`.
pub fn decode(buf: &[u8]) -> Result<Mp, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let v = r.value(0)?;
    if r.pos != buf.len() {
        return err(format!(
            "{} trailing bytes after the msgpack value",
            buf.len() - r.pos
        ));
    }
    Ok(v)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() - self.pos {
            return err(format!(
                "truncated msgpack: {n} bytes needed at offset {}, {} left",
                self.pos,
                self.buf.len() - self.pos
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for &b in self.take(n)? {
            v = (v << 8) | b as u64;
        }
        Ok(v)
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn value(&mut self, depth: usize) -> Result<Mp, DecodeError> {
        let b = self.byte()?;
        Ok(match b {
            0x00..=0x7f => Mp::Int(b as i64),
            0x80..=0x8f => self.map((b & 0x0f) as usize, depth)?,
            0x90..=0x9f => self.array((b & 0x0f) as usize, depth)?,
            0xa0..=0xbf => self.string((b & 0x1f) as usize)?,
            0xc0 => Mp::Nil,
            0xc2 => Mp::Bool(false),
            0xc3 => Mp::Bool(true),
            0xc4..=0xc6 => {
                let n = self.be(1 << (b - 0xc4))? as usize;
                Mp::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.be(1 << (b - 0xc7))? as usize;
                let t = self.byte()? as i8;
                Mp::Ext(t, self.take(n)?.to_vec())
            }
            0xca => Mp::Float(f32::from_bits(self.be(4)? as u32) as f64),
            0xcb => Mp::Float(f64::from_bits(self.be(8)?)),
            0xcc..=0xcf => {
                let u = self.be(1 << (b - 0xcc))?;
                if u <= i64::MAX as u64 {
                    Mp::Int(u as i64)
                } else {
                    Mp::UInt(u)
                }
            }
            0xd0 => Mp::Int(self.be(1)? as u8 as i8 as i64),
            0xd1 => Mp::Int(self.be(2)? as u16 as i16 as i64),
            0xd2 => Mp::Int(self.be(4)? as u32 as i32 as i64),
            0xd3 => Mp::Int(self.be(8)? as i64),
            0xd4..=0xd8 => {
                let n = 1usize << (b - 0xd4);
                let t = self.byte()? as i8;
                Mp::Ext(t, self.take(n)?.to_vec())
            }
            0xd9..=0xdb => {
                let n = self.be(1 << (b - 0xd9))? as usize;
                self.string(n)?
            }
            0xdc | 0xdd => {
                let n = self.be(2 << (b - 0xdc))? as usize;
                self.array(n, depth)?
            }
            0xde | 0xdf => {
                let n = self.be(2 << (b - 0xde))? as usize;
                self.map(n, depth)?
            }
            0xe0..=0xff => Mp::Int(b as i8 as i64),
            0xc1 => return err("invalid msgpack byte 0xc1"),
        })
    }

    fn string(&mut self, n: usize) -> Result<Mp, DecodeError> {
        let raw = self.take(n)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(Mp::Str(s.to_owned())),
            Err(_) => err("msgpack str is not valid UTF-8"),
        }
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Mp, DecodeError> {
        if depth >= MAX_DEPTH {
            return err(format!("msgpack nesting deeper than {MAX_DEPTH} levels"));
        }
        if n > self.remaining() {
            // every element takes at least one byte: refuse before allocating
            return err(format!(
                "msgpack array of {n} elements in {} bytes",
                self.remaining()
            ));
        }
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Mp::Array(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Mp, DecodeError> {
        if depth >= MAX_DEPTH {
            return err(format!("msgpack nesting deeper than {MAX_DEPTH} levels"));
        }
        if n > self.remaining() / 2 {
            return err(format!(
                "msgpack map of {n} entries in {} bytes",
                self.remaining()
            ));
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            entries.push((k, v));
        }
        Ok(Mp::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(v: Mp) {
        let bytes = v.to_bytes();
        assert_eq!(decode(&bytes).unwrap(), v, "{bytes:02x?}");
    }

    #[test]
    fn ints_use_the_smallest_form() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0xcc, 0x80]),
            (256, &[0xcd, 0x01, 0x00]),
            (70000, &[0xce, 0x00, 0x01, 0x11, 0x70]),
            (-1, &[0xff]),
            (-32, &[0xe0]),
            (-33, &[0xd0, 0xdf]),
            (-129, &[0xd1, 0xff, 0x7f]),
        ];
        for (i, want) in cases {
            assert_eq!(Mp::Int(*i).to_bytes(), *want, "{i}");
            rt(Mp::Int(*i));
        }
        rt(Mp::Int(i64::MIN));
        rt(Mp::Int(i64::MAX));
        rt(Mp::UInt(u64::MAX));
    }

    #[test]
    fn containers_and_strings_round_trip() {
        rt(Mp::Array(vec![
            Mp::Nil,
            Mp::Bool(true),
            Mp::Float(-0.5),
            Mp::str("x".repeat(40)),
            Mp::Bin(vec![1; 300]),
        ]));
        rt(Mp::Map(vec![
            (Mp::str("a"), Mp::Array((0..20).map(Mp::Int).collect())),
            (Mp::Int(3), Mp::Ext(1, vec![9; 5])),
        ]));
        rt(Mp::Ext(1, vec![0; 8]));
        rt(Mp::str("é".repeat(40000)));
    }

    #[test]
    fn hostile_lengths_are_refused_before_allocating() {
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(decode(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(decode(&[0xc6, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(decode(&[0xdb, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[0x91]).is_err());
        assert!(decode(&[0x90, 0x90]).is_err(), "trailing bytes");
        assert!(decode(&[0xa1, 0xff]).is_err(), "bad utf-8");
    }

    #[test]
    fn nesting_is_capped() {
        let mut deep = vec![0x91u8; MAX_DEPTH + 1];
        deep.push(0xc0);
        assert!(decode(&deep).unwrap_err().0.contains("nesting"));
        let mut ok = vec![0x91u8; MAX_DEPTH];
        ok.push(0xc0);
        assert!(decode(&ok).is_ok());
    }
}
