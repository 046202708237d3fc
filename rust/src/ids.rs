//! Identifiers: UUIDv7 episode ids (AR-3) and random session ids, from a small
//! PRNG seeded once per process (uniqueness, not secrecy, is what ids need).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static STATE: AtomicU64 = AtomicU64::new(0);

fn seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(now_ns() as u128);
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// SplitMix64 over a shared atomic counter.
pub(crate) fn random_u64() -> u64 {
    let mut cur = STATE.load(Ordering::Relaxed);
    if cur == 0 {
        let _ = STATE.compare_exchange(0, seed(), Ordering::Relaxed, Ordering::Relaxed);
        cur = STATE.load(Ordering::Relaxed);
    }
    let _ = cur;
    let mut z = STATE
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Unix time in nanoseconds.
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn format(v: u128) -> String {
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A time-ordered UUIDv7 string (RFC 9562).
pub fn uuid7() -> String {
    let ms = (now_ns() / 1_000_000) as u128 & 0xFFFF_FFFF_FFFF;
    let rand = ((random_u64() as u128) << 64 | random_u64() as u128) & ((1u128 << 80) - 1);
    let rand = rand & !(0xF << 76) & !(0b11 << 62);
    format(ms << 80 | rand | 0x7 << 76 | 0b10 << 62)
}

/// A random UUIDv4 string.
pub fn uuid4() -> String {
    let r = (random_u64() as u128) << 64 | random_u64() as u128;
    format((r & !(0xF << 76) & !(0b11 << 62)) | 0x4 << 76 | 0b10 << 62)
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid7_is_versioned_and_unique() {
        let a = super::uuid7();
        let b = super::uuid7();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "7");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(&super::uuid4()[14..15], "4");
    }
}
