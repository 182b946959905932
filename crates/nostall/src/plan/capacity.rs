//! How much a cache may hold: bytes, or a share of the dataset's. The plan places a
//! partitioned cache's samples by it, and every cache is bounded by it.

use crate::error::{Error, Result};

/// How much a cache may hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    /// A number of bytes of sample data.
    Bytes(u64),
    /// A fraction (0 to 1) of the dataset's bytes.
    Fraction(f64),
}

impl Capacity {
    /// The capacity in bytes for a dataset of `dataset_bytes`.
    pub fn bytes(self, dataset_bytes: u64) -> u64 {
        match self {
            Capacity::Bytes(bytes) => bytes,
            Capacity::Fraction(f) => (f.clamp(0.0, 1.0) * dataset_bytes as f64) as u64,
        }
    }
}

impl std::fmt::Display for Capacity {
    /// The form [`str::parse`] reads back: a fraction (`0.35`) or bytes (`1000B`: with
    /// its unit, as `0` alone reads as a fraction).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capacity::Bytes(bytes) => write!(f, "{bytes}B"),
            // As a fraction, which reads back to the same bits (a percentage would not),
            // with its point: `1.0` is the whole dataset, `1` a byte.
            Capacity::Fraction(share) if share.fract() == 0.0 => write!(f, "{share:.1}"),
            Capacity::Fraction(share) => write!(f, "{share}"),
        }
    }
}

impl std::str::FromStr for Capacity {
    type Err = Error;

    /// `35%`, `0.35` (a fraction of the dataset), or `512MiB`, `2GB`, `1000000` (bytes).
    fn from_str(s: &str) -> Result<Capacity> {
        let bad = || {
            Error::Config(format!(
                "cannot read cache size {s:?}: give a percentage (35%), a fraction (0.35) \
                 or bytes (512MiB, 2GB, 1000000)"
            ))
        };
        let s = s.trim();
        if let Some(pct) = s.strip_suffix('%') {
            let pct: f64 = pct.trim().parse().map_err(|_| bad())?;
            return (0.0..=100.0)
                .contains(&pct)
                .then_some(Capacity::Fraction(pct / 100.0))
                .ok_or_else(bad);
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, unit) = s.split_at(split);
        let number: f64 = number.parse().map_err(|_| bad())?;
        let scale = match unit.trim().to_ascii_lowercase().as_str() {
            "" if number < 1.0 || number == 1.0 && s.contains('.') => {
                return Ok(Capacity::Fraction(number));
            }
            "" | "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            _ => return Err(bad()),
        };
        Ok(Capacity::Bytes((number * scale) as u64))
    }
}
