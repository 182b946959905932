//! The values a prepared sample's `f32` elements take when each was computed from one
//! byte: an image's `ToTensor` and `Normalize`, `(v / 255 − mean[c]) / std[c]` for the
//! byte `v` of channel `c`.
//!
//! A float32 image batch is four times the bytes of the pixels it was computed from, and
//! a sender that knows the 256 values each channel can take may send the bytes instead
//! and let the receiver compute the values again (remote prep does, `nostall-remote`).
//! Such a coding must stay exact whatever ran after the conversion (an erased rectangle of
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
    /// The statistics the tables were made from, where they are an image's `ToTensor`
    /// and `Normalize`: [`ByteValues::write`] then computes the values as the image
    /// pipeline's output pass does (a lookup per element does not vectorise).
    normalize: Option<Statistics>,
}

/// An image's `Normalize`, and whether its vector form gives its exact bits.
#[derive(Debug, Clone, PartialEq)]
struct Statistics {
    mean: [f32; 3],
    std: [f32; 3],
    fused_exact: bool,
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
        Some(ByteValues {
            tables,
            plane,
            normalize: None,
        })
    }

    /// The values of an image's `ToTensor` then `Normalize(mean, std)` over three
    /// channels, laid out as [`ByteValues::new`] says.
    pub fn normalizing(mean: [f32; 3], std: [f32; 3], plane: Option<usize>) -> Option<ByteValues> {
        let values = ByteValues::new(output::values_of_bytes(mean, std), plane)?;
        Some(ByteValues {
            normalize: Some(Statistics {
                mean,
                std,
                fused_exact: output::fused_is_exact(mean, std),
            }),
            ..values
        })
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

    /// Writes the values of `bytes`, all of channel `c`, into `out` as native-endian
    /// `f32`s: [`ByteValues::table`]'s bits, computed where the image pipeline's vector
    /// pass gives them.
    ///
    /// # Panics
    ///
    /// If `out` is not four bytes for each of `bytes`, or `c` is not a channel.
    pub fn write(&self, c: usize, bytes: &[u8], out: &mut [u8]) {
        assert_eq!(bytes.len() * 4, out.len(), "four bytes out a byte in");
        let table = self.table(c);
        if let Some(s) = &self.normalize {
            let statistics = (s.mean, s.std);
            if output::write_values(statistics, s.fused_exact, c, bytes, out).is_some() {
                return;
            }
        }
        for (o, &b) in out.chunks_exact_mut(4).zip(bytes) {
            o.copy_from_slice(&table[b as usize].to_ne_bytes());
        }
    }
}

use super::image::output;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::{IMAGENET_MEAN, IMAGENET_STD};

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

    #[test]
    fn writing_gives_the_tables_bits_on_every_path_and_alignment() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 37 % 256) as u8).collect();
        for (mean, std) in [
            (IMAGENET_MEAN, IMAGENET_STD),
            ([0.5; 3], [0.5; 3]),
            ([0.1; 3], [3.0; 3]),
        ] {
            let values = ByteValues::normalizing(mean, std, Some(bytes.len())).unwrap();
            // Aligned for non-temporal stores, and not; runs of every length mod 8.
            let mut buffer = vec![0u8; 4 * bytes.len() + 64];
            let aligned = buffer.as_ptr().align_offset(32);
            for (skip, len) in [
                (aligned, 1000),
                (aligned + 4, 999),
                (aligned + 1, 7),
                (aligned, 0),
            ] {
                for c in 0..3 {
                    let out = &mut buffer[skip..skip + 4 * len];
                    values.write(c, &bytes[..len], out);
                    let table = values.table(c);
                    for (o, &b) in out.chunks_exact(4).zip(&bytes) {
                        assert_eq!(o, table[b as usize].to_ne_bytes(), "{mean:?} {std:?} {c}");
                    }
                }
            }
        }
    }
}
