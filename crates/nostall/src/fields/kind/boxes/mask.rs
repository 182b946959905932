//! A boxes field's instance masks: each kept box's mask made at the source image's size
//! as pycocotools' `annToMask` makes it (polygons rasterised, an RLE decoded), then read
//! nearest through the sample's placement, as torchvision.transforms.v2 moves a `Mask`.

use crate::prep::image::{follow_motions, read_nearest, OUTSIDE};
use crate::sample::MaskForm;
use crate::storage::Shape;

/// The mask of `shape` at the source image's size (`width` × `height`), row-major bytes
/// of 0 or 1; `None` for an annotation without one (its mask is all 0).
///
/// # Errors
///
/// An RLE made for another size, in words.
pub(super) fn source_mask(
    shape: &Shape,
    (width, height): (u32, u32),
) -> Result<Option<Vec<u8>>, String> {
    match shape {
        Shape::None => Ok(None),
        Shape::Polygons(polygons) => Ok(Some(nostall_coco::polygons_to_mask(
            polygons, height, width,
        ))),
        Shape::Rle(rle) if (rle.width(), rle.height()) == (width, height) => Ok(Some(rle.decode())),
        Shape::Rle(rle) => Err(format!(
            "an RLE of {}x{} for an image of {width}x{height}",
            rle.width(),
            rle.height()
        )),
    }
}

/// Writes `source` (row-major 0 and 1, `width` pixels a row; `None`: all 0) read at `rows`
/// and `columns` ([`Placement::nearest`](crate::prep::image::Placement::nearest)), then
/// moved as `moved` says where operators moved the pixels after the geometry
/// ([`Placement::moved_pixels`](crate::prep::image::Placement::moved_pixels), 0 where
/// nothing shows), into `out`, one mask of `form`.
pub(super) fn place_mask(
    source: Option<&[u8]>,
    width: usize,
    (rows, columns): (&[u32], &[u32]),
    moved: Option<&[u32]>,
    form: MaskForm,
    out: &mut [u8],
) {
    out.fill(0);
    let Some(source) = source else { return };
    if let Some(moved) = moved {
        // Moved as bytes, then packed where asked; the motions may grow the image onto
        // the form's canvas (`RandomRotation(expand=True)`).
        let mut bytes = vec![0; moved.len().max(rows.len() * columns.len())];
        read_nearest(source, width, (rows, columns), 0, &mut bytes);
        follow_motions(moved, 0, &mut bytes);
        if !form.packed {
            out.copy_from_slice(&bytes);
            return;
        }
        for (line, row) in out
            .chunks_exact_mut(form.row_bytes())
            .zip(bytes.chunks_exact(form.width))
        {
            for (x, &v) in row.iter().enumerate() {
                line[x / 8] |= u8::from(v != 0) << (7 - x % 8);
            }
        }
        return;
    }
    if !form.packed {
        return read_nearest(source, width, (rows, columns), 0, out);
    }
    for (&row, line) in rows.iter().zip(out.chunks_exact_mut(form.row_bytes())) {
        if row == OUTSIDE {
            continue;
        }
        let from = &source[row as usize * width..][..width];
        for (x, &c) in columns.iter().enumerate() {
            let set = c != OUTSIDE && from[c as usize] != 0;
            line[x / 8] |= u8::from(set) << (7 - x % 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostall_coco::Rle;

    #[test]
    fn a_mask_is_read_at_the_rows_and_columns_given_bytes_or_bits() {
        // A 10x2 source: columns 2..9 of row 1 set.
        let mut source = vec![0u8; 20];
        source[12..19].fill(1);
        let rows = [1, OUTSIDE, 0];
        let columns = [OUTSIDE, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let bytes = MaskForm {
            height: 3,
            width: 10,
            packed: false,
        };
        let mut out = vec![7; bytes.bytes()];
        place_mask(Some(&source), 10, (&rows, &columns), None, bytes, &mut out);
        assert_eq!(&out[..10], &[0, 0, 1, 1, 1, 1, 1, 1, 1, 0]);
        assert!(out[10..].iter().all(|v| *v == 0));
        let bits = MaskForm {
            packed: true,
            ..bytes
        };
        let mut packed = vec![7; bits.bytes()];
        place_mask(
            Some(&source),
            10,
            (&rows, &columns),
            None,
            bits,
            &mut packed,
        );
        // NumPy's packbits of the first row: 0b0011_1111, 0b10.
        assert_eq!(packed, [0b0011_1111, 0b1000_0000, 0, 0, 0, 0]);
        place_mask(None, 10, (&rows, &columns), None, bits, &mut packed);
        assert!(packed.iter().all(|v| *v == 0));
    }

    #[test]
    fn a_moved_mask_is_moved_before_it_is_packed() {
        // A 10x1 source, columns 0..3 set; moved: each pixel shows the one mirrored.
        let mut source = vec![0u8; 10];
        source[..3].fill(1);
        let (rows, columns): (Vec<u32>, Vec<u32>) = (vec![0], (0..10).collect());
        let moved: Vec<u32> = (0..10).rev().collect();
        let bytes = MaskForm {
            height: 1,
            width: 10,
            packed: false,
        };
        let mut out = vec![7; bytes.bytes()];
        let read = (&rows[..], &columns[..]);
        place_mask(Some(&source), 10, read, Some(&moved), bytes, &mut out);
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
        let bits = MaskForm {
            packed: true,
            ..bytes
        };
        let mut packed = vec![7; bits.bytes()];
        place_mask(Some(&source), 10, read, Some(&moved), bits, &mut packed);
        assert_eq!(packed, [0b0000_0001, 0b1100_0000]);
    }

    #[test]
    fn an_rle_of_another_size_is_refused() {
        let rle = Rle::new(2, 3, vec![1, 5]).unwrap();
        assert_eq!(
            source_mask(&Shape::Rle(rle.clone()), (3, 2))
                .unwrap()
                .unwrap(),
            [0, 1, 1, 1, 1, 1]
        );
        assert!(source_mask(&Shape::Rle(rle), (2, 3))
            .unwrap_err()
            .contains("3x2"));
    }
}
