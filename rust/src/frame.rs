//! Frames (docs/protocol.md §2): a 24-byte little-endian prefix, a msgpack header,
//! then raw segments, each starting 64-byte aligned within the body.

use crate::error::{Error, Result};

pub const MAGIC: &[u8; 2] = b"RM";
pub const VERSION: u8 = 1;
pub const PREFIX_SIZE: usize = 24;
pub const SEGMENT_ALIGN: usize = 64;

/// Bounds checked on the prefix alone, before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    pub max_frame_bytes: u64,
    pub max_header_bytes: u32,
    pub max_segments: u32,
}

impl FrameLimits {
    /// 256 MiB body, 16 MiB header, 4096 segments (the Python reference's defaults).
    pub const DEFAULT: FrameLimits = FrameLimits {
        max_frame_bytes: 256 << 20,
        max_header_bytes: 16 << 20,
        max_segments: 4096,
    };
    /// Before `Welcome` (server side): 1 MiB, no segments.
    pub const PRE_HANDSHAKE: FrameLimits = FrameLimits {
        max_frame_bytes: 1 << 20,
        max_header_bytes: 1 << 20,
        max_segments: 0,
    };
}

impl Default for FrameLimits {
    fn default() -> FrameLimits {
        FrameLimits::DEFAULT
    }
}

/// What a validated prefix announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub kind: u8,
    pub request_id: u32,
    pub header_len: u32,
    pub segment_count: u32,
    pub body_len: u64,
}

fn pad(pos: usize, align: usize) -> usize {
    (align - pos % align) % align
}

/// Where the header and segment table end for a header of `hlen` and `count` segments.
fn table_end(hlen: u64, count: u64) -> u64 {
    if count == 0 {
        hlen
    } else {
        hlen + (8 - hlen % 8) % 8 + 8 * count
    }
}

/// Validate a 24-byte prefix against `limits`.
pub fn decode_prefix(prefix: &[u8], limits: &FrameLimits) -> Result<Plan> {
    if prefix.len() != PREFIX_SIZE {
        return Err(Error::protocol(format!(
            "frame prefix must be {PREFIX_SIZE} bytes, got {}",
            prefix.len()
        )));
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([prefix[i], prefix[i + 1], prefix[i + 2], prefix[i + 3]]);
    if &prefix[..2] != MAGIC {
        return Err(Error::protocol(format!(
            "not an rlmesh frame: magic {:?}, expected b\"RM\"",
            &prefix[..2]
        )));
    }
    if prefix[2] != VERSION {
        return Err(Error::protocol(format!(
            "unsupported frame version {}; this build speaks version {VERSION}",
            prefix[2]
        )));
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&prefix[16..24]);
    let plan = Plan {
        kind: prefix[3],
        request_id: u32_at(4),
        header_len: u32_at(8),
        segment_count: u32_at(12),
        body_len: u64::from_le_bytes(b),
    };
    if plan.header_len > limits.max_header_bytes {
        return Err(Error::protocol(format!(
            "frame header of {} bytes exceeds the limit of {}",
            plan.header_len, limits.max_header_bytes
        )));
    }
    if plan.segment_count > limits.max_segments {
        return Err(Error::protocol(format!(
            "frame has {} segments; the limit is {}",
            plan.segment_count, limits.max_segments
        )));
    }
    if plan.body_len > limits.max_frame_bytes {
        return Err(Error::protocol(format!(
            "frame body of {} bytes exceeds the limit of {}",
            plan.body_len, limits.max_frame_bytes
        )));
    }
    if plan.body_len < table_end(plan.header_len as u64, plan.segment_count as u64) {
        return Err(Error::protocol(format!(
            "frame body of {} bytes is shorter than its header and table",
            plan.body_len
        )));
    }
    Ok(plan)
}

/// A received frame: the body plus where its header and segments lie in it.
#[derive(Clone, Debug)]
pub struct Frame {
    pub kind: u8,
    pub request_id: u32,
    body: Vec<u8>,
    header_len: usize,
    segments: Vec<(usize, usize)>,
}

impl Frame {
    pub fn header(&self) -> &[u8] {
        &self.body[..self.header_len]
    }

    pub fn segments(&self) -> Vec<&[u8]> {
        self.segments
            .iter()
            .map(|&(s, n)| &self.body[s..s + n])
            .collect()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

/// Cut a filled body into header and segments, checking the layout exactly.
pub fn split_body(plan: &Plan, body: Vec<u8>) -> Result<Frame> {
    if body.len() as u64 != plan.body_len {
        return Err(Error::protocol(
            "frame body length does not match its prefix",
        ));
    }
    let hlen = plan.header_len as usize;
    let end = body.len();
    let mut segments = Vec::with_capacity(plan.segment_count as usize);
    let pos = if plan.segment_count > 0 {
        let start = hlen + pad(hlen, 8);
        let count = plan.segment_count as usize;
        let mut pos = start + 8 * count; // checked against body_len by decode_prefix
        for i in 0..count {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[start + 8 * i..start + 8 * i + 8]);
            let n = u64::from_le_bytes(b);
            pos += pad(pos, SEGMENT_ALIGN);
            if pos > end || n > (end - pos) as u64 {
                return Err(Error::protocol(format!(
                    "segment of {n} bytes at offset {pos} runs past the frame body ({end} bytes)"
                )));
            }
            segments.push((pos, n as usize));
            pos += n as usize;
        }
        pos
    } else {
        hlen
    };
    if pos != end {
        return Err(Error::protocol(format!(
            "frame body is {end} bytes but its layout ends at {pos}"
        )));
    }
    Ok(Frame {
        kind: plan.kind,
        request_id: plan.request_id,
        body,
        header_len: hlen,
        segments,
    })
}

/// Append one whole frame (prefix, header, table, padded segments) to `out`.
pub fn encode_frame<S: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    kind: u8,
    request_id: u32,
    header: &[u8],
    segments: &[S],
) {
    let hlen = header.len();
    let count = segments.len();
    let mut body = table_end(hlen as u64, count as u64) as usize;
    for s in segments {
        body += pad(body, SEGMENT_ALIGN) + s.as_ref().len();
    }
    out.reserve(PREFIX_SIZE + body);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&(hlen as u32).to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
    out.extend_from_slice(&(body as u64).to_le_bytes());
    let base = out.len();
    out.extend_from_slice(header);
    if count == 0 {
        return;
    }
    out.resize(out.len() + pad(hlen, 8), 0);
    for s in segments {
        out.extend_from_slice(&(s.as_ref().len() as u64).to_le_bytes());
    }
    for s in segments {
        let at = out.len() - base;
        out.resize(out.len() + pad(at, SEGMENT_ALIGN), 0);
        out.extend_from_slice(s.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(header: &[u8], segments: &[Vec<u8>]) {
        let mut out = Vec::new();
        encode_frame(&mut out, 0x85, 7, header, segments);
        let plan = decode_prefix(&out[..PREFIX_SIZE], &FrameLimits::DEFAULT).unwrap();
        assert_eq!(plan.body_len as usize, out.len() - PREFIX_SIZE);
        let frame = split_body(&plan, out[PREFIX_SIZE..].to_vec()).unwrap();
        assert_eq!(frame.header(), header);
        let segs: Vec<Vec<u8>> = frame.segments().iter().map(|s| s.to_vec()).collect();
        assert_eq!(&segs, segments);
        for &(start, _) in &frame.segments {
            assert_eq!(start % SEGMENT_ALIGN, 0);
        }
    }

    #[test]
    fn frames_round_trip_with_aligned_segments() {
        roundtrip(&[0x90], &[]);
        roundtrip(&[0x91, 0x01, 0x02], &[vec![1; 3], vec![], vec![2; 100]]);
        roundtrip(&[0u8; 64], &[vec![9; 64]]);
    }

    #[test]
    fn bad_prefixes_are_refused() {
        let mut out = Vec::new();
        encode_frame(&mut out, 1, 1, &[0x90], &[] as &[&[u8]]);
        let lim = FrameLimits::DEFAULT;
        let mut p = out[..24].to_vec();
        p[0] = b'X';
        assert!(decode_prefix(&p, &lim).is_err());
        let mut p = out[..24].to_vec();
        p[2] = 2;
        assert!(decode_prefix(&p, &lim).is_err());
        let mut p = out[..24].to_vec();
        p[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode_prefix(&p, &lim)
            .unwrap_err()
            .to_string()
            .contains("exceeds the limit"));
        let mut p = out[..24].to_vec();
        p[12..16].copy_from_slice(&1u32.to_le_bytes());
        assert!(decode_prefix(&p, &FrameLimits::PRE_HANDSHAKE).is_err());
        assert!(
            decode_prefix(&p, &lim).is_err(),
            "body shorter than its table"
        );
    }

    #[test]
    fn segment_tables_that_overrun_the_body_are_refused() {
        let mut out = Vec::new();
        encode_frame(&mut out, 1, 1, &[0x90], &[vec![1u8; 8]]);
        let plan = decode_prefix(&out[..24], &FrameLimits::DEFAULT).unwrap();
        let mut body = out[24..].to_vec();
        body[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(split_body(&plan, body).is_err());
        let mut body = out[24..].to_vec();
        body[8..16].copy_from_slice(&4u64.to_le_bytes());
        assert!(split_body(&plan, body)
            .unwrap_err()
            .to_string()
            .contains("layout ends"));
    }
}
