//! The values a prepared sample's `f32` elements take when each was computed from one
//! byte: an image's `ToTensor` and `Normalize`, `(v / 255 − mean[c]) / std[c]` for the
//! byte `v` of channel `c`.
//!
//! A float32 image batch is four times the bytes of the pixels it was computed from, and
//! a sender that knows the 256 values each channel can take may send the bytes instead
//! and let the receiver look the values up (remote prep does, `nostall-remote`). Such a
//! coding must stay exact whatever ran after the conversion (an erased rectangle of
//! noise, two images mixed): it takes an element's byte only where the table gives back
//! the element's exact bits.

/// The 256 values of each channel, and how channels are laid out in a sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ByteValues {
    /// Per channel, the value of each byte (each table strictly monotonic).
    tables: Vec<[f32; 256]>,
    /// Elements a channel's plane holds, in a planar layout (CHW); `None` where the
    /// channels are interleaved (HWC).
    plane: Option<usize>,
}

impl ByteValues {
    /// `tables` (one per channel) laid out as planes of `plane` elements each (`Some`), or
    /// interleaved (`None`). `None` unless every table is finite and strictly monotonic
    /// (each value names one byte), and there is at least one channel.
    pub fn new(tables: Vec<[f32; 256]>, plane: Option<usize>) -> Option<ByteValues> {
        let monotonic = |t: &[f32; 256]| {
            t.iter().all(|v| v.is_finite())
                && (t.windows(2).all(|w| w[0] < w[1]) || t.windows(2).all(|w| w[0] > w[1]))
        };
        if tables.is_empty() || plane == Some(0) || !tables.iter().all(monotonic) {
            return None;
        }
        Some(ByteValues { tables, plane })
    }

    /// Channels.
    pub fn channels(&self) -> usize {
        self.tables.len()
    }

    /// Elements of each channel's plane, in a planar layout; `None` where interleaved.
    pub fn plane(&self) -> Option<usize> {
        self.plane
    }

    /// Channel `c`'s value of each byte.
    pub fn table(&self, c: usize) -> &[f32; 256] {
        &self.tables[c]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(mean: f32, std: f32) -> [f32; 256] {
        std::array::from_fn(|v| (v as f32 / 255.0 - mean) / std)
    }

    #[test]
    fn normalising_tables_are_kept_as_given() {
        let tables = vec![normalized(0.485, 0.229), normalized(0.0, -1.0)];
        let values = ByteValues::new(tables.clone(), None).unwrap();
        assert_eq!((values.channels(), values.plane()), (2, None));
        assert_eq!(values.table(1), &tables[1]);
    }

    #[test]
    fn tables_that_do_not_name_one_byte_a_value_are_refused() {
        assert!(ByteValues::new(vec![[0.0; 256]], None).is_none());
        let mut nan = normalized(0.5, 0.5);
        nan[7] = f32::NAN;
        assert!(ByteValues::new(vec![nan], None).is_none());
        assert!(ByteValues::new(Vec::new(), None).is_none());
        assert!(ByteValues::new(vec![normalized(0.5, 0.5)], Some(0)).is_none());
    }
}
