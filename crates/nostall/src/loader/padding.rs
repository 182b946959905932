//! `pad_to_largest`: a detection batch delivered at its largest image's size, as DETR's
//! `nested_tensor_from_tensor_list` and torchvision's `GeneralizedRCNNTransform.batch_images`
//! make it, instead of on the `max_size` square every image of a multi-scale recipe is
//! placed on (`RandomShortestSize`, `DetrRandomResize`).
//!
//! Each image lies at the top left of its canvas, the rest `fill`, and the record's boxes
//! field says its height and width. The batch's extent is the largest height and the
//! largest width among its samples (separately), each rounded up to a multiple (1 for
//! DETR, 32 for torchvision's `size_divisible`) but never past the canvas. A binding
//! delivers the image tensor, and the boxes' instance masks, cut to it ([`Cut`]): a view of
//! the batch's buffer, which stays `max_size` square a sample, so memory is what it was and
//! a copy of the view (to a device, say) moves only the extent.

use crate::error::{Error, Result};
use crate::prep::image::Layout;
use crate::sample::{PartForm, SampleLayout};

/// The key of the padding mask (bool, True on the padding) in a batch cut to its
/// largest image.
pub const PADDING_MASK: &str = "padding_mask";

/// Where a batch of records finds its images' sizes and how to cut it to its largest
/// (`pad_to_largest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadToLargest {
    /// What the extent is rounded up to.
    multiple: usize,
    /// Where a slot holds its image's height (then its width), `i64` each: the first
    /// boxes field's.
    size_at: usize,
    /// The canvas's height and width.
    canvas: (usize, usize),
    /// The image tensor's dimensions' order.
    layout: Layout,
    /// Whether a boxes field's instance masks are a bit a pixel (their rows then cut to
    /// whole bytes).
    packed_masks: bool,
}

/// How one batch is cut: the image tensor's dimensions (a sample's) and the instance
/// masks' rows and bytes a row, and the extent itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The batch's height and width.
    pub extent: (usize, usize),
    /// A sample's image dimensions cut to the extent, in the tensor's order.
    pub image: [usize; 3],
    /// A mask's rows and bytes a row cut to the extent.
    pub mask: (usize, usize),
}

impl PadToLargest {
    /// For records of `layout` whose image tensor is in `image_layout`, the extent rounded
    /// up to `multiple`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a `multiple` of 0, and for records without an image tensor
    /// or a boxes field (whose sizes the extent is found from).
    pub fn new(layout: &SampleLayout, image_layout: Layout, multiple: u32) -> Result<PadToLargest> {
        if multiple == 0 {
            return Err(Error::Config(
                "pad_to_largest=0: give the multiple each batch's height and width are \
                 rounded up to, at least 1 (1 as DETR, 32 as torchvision's detection models)"
                    .into(),
            ));
        }
        let canvas = layout.parts().iter().find_map(|p| match &p.form {
            PartForm::Tensor { shape, .. } if shape.len() == 3 => Some(match image_layout {
                Layout::Chw => (shape[1], shape[2]),
                Layout::Hwc => (shape[0], shape[1]),
            }),
            _ => None,
        });
        let boxes = layout.parts().iter().find_map(|p| match &p.form {
            PartForm::Boxes { masks, .. } => Some((p.offset, masks.is_some_and(|m| m.packed))),
            _ => None,
        });
        let (Some(canvas), Some((offset, packed_masks))) = (canvas, boxes) else {
            return Err(Error::Config(
                "pad_to_largest cuts each batch to its largest image, whose size a boxes \
                 field gives: read the images with one (fields={\"image\": \"image\", \
                 \"target\": Field(\"coco\", kind=\"boxes\")})"
                    .into(),
            ));
        };
        Ok(PadToLargest {
            multiple: multiple as usize,
            size_at: offset + 8,
            canvas,
            layout: image_layout,
            packed_masks,
        })
    }

    /// The cut of the batch whose `len` slots of `slot_bytes` are `data`.
    ///
    /// # Errors
    ///
    /// [`Error::Internal`] naming the sample whose size is not on the canvas (a batch
    /// another process wrote into shared memory, damaged).
    pub fn cut(&self, data: &[u8], slot_bytes: usize, len: usize) -> Result<Cut> {
        let (mut height, mut width) = (0, 0);
        for (i, slot) in data.chunks_exact(slot_bytes).take(len).enumerate() {
            let side = |at: usize| {
                let bytes = slot.get(at..at + 8).and_then(|b| b.try_into().ok());
                bytes.map(i64::from_ne_bytes)
            };
            let (h, w) = (side(self.size_at), side(self.size_at + 8));
            let on_canvas = |side: Option<i64>, most: usize| {
                side.and_then(|s| usize::try_from(s).ok())
                    .filter(|&s| (1..=most).contains(&s))
            };
            match (on_canvas(h, self.canvas.0), on_canvas(w, self.canvas.1)) {
                (Some(h), Some(w)) => (height, width) = (height.max(h), width.max(w)),
                _ => {
                    return Err(Error::Internal(format!(
                        "sample {i} of the batch has an image size of {h:?} × {w:?}, not on \
                         its {} × {} canvas: the batch's buffer was damaged",
                        self.canvas.0, self.canvas.1
                    )))
                }
            }
        }
        // torchvision's `size_divisible` rounds past the largest image; the canvas holds
        // no more, and beyond it there is only more padding.
        let round = |side: usize, most: usize| side.next_multiple_of(self.multiple).min(most);
        let extent = (round(height, self.canvas.0), round(width, self.canvas.1));
        let image = match self.layout {
            Layout::Chw => [3, extent.0, extent.1],
            Layout::Hwc => [extent.0, extent.1, 3],
        };
        let row_bytes = match self.packed_masks {
            true => extent.1.div_ceil(8),
            false => extent.1,
        };
        Ok(Cut {
            extent,
            image,
            mask: (extent.0, row_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::DType;
    use crate::sample::MaskForm;

    /// Records of an image on a `side` square canvas and a boxes field, with masks.
    fn layout(side: usize, layout: Layout, packed: bool) -> SampleLayout {
        let shape = match layout {
            Layout::Chw => vec![3, side, side],
            Layout::Hwc => vec![side, side, 3],
        };
        let masks = MaskForm {
            height: side,
            width: side,
            packed,
        };
        SampleLayout::of_record(vec![
            (
                "image".into(),
                PartForm::Tensor {
                    shape,
                    dtype: DType::U8,
                },
            ),
            (
                "target".into(),
                PartForm::Boxes {
                    capacity: 1,
                    keypoints: 0,
                    anchors: 0,
                    masks: Some(masks),
                },
            ),
        ])
    }

    /// A batch of `layout`'s records whose images are `sizes` (height, width).
    fn batch(layout: &SampleLayout, sizes: &[(i64, i64)]) -> Vec<u8> {
        let slot = layout.bytes();
        let at = layout.parts()[1].offset + 8;
        let mut data = vec![0; slot * sizes.len()];
        for (i, &(h, w)) in sizes.iter().enumerate() {
            data[i * slot + at..][..8].copy_from_slice(&h.to_ne_bytes());
            data[i * slot + at + 8..][..8].copy_from_slice(&w.to_ne_bytes());
        }
        data
    }

    #[test]
    fn the_extent_is_the_largest_height_and_width_apart_rounded_up_within_the_canvas() {
        let records = layout(100, Layout::Chw, false);
        let data = batch(&records, &[(60, 90), (75, 40), (20, 20)]);
        let cut = |multiple| {
            let pad = PadToLargest::new(&records, Layout::Chw, multiple).unwrap();
            pad.cut(&data, records.bytes(), 3).unwrap()
        };
        assert_eq!(
            cut(1),
            Cut {
                extent: (75, 90),
                image: [3, 75, 90],
                mask: (75, 90)
            }
        );
        // 90 rounds to 96, 75 to 96: both within the canvas.
        assert_eq!(cut(32).extent, (96, 96));
        // 75 and 90 round to 128, past the 100-pixel canvas: the canvas.
        assert_eq!(cut(64).extent, (100, 100));
    }

    #[test]
    fn channels_last_and_packed_masks_cut_their_own_dimensions() {
        let records = layout(64, Layout::Hwc, true);
        let data = batch(&records, &[(30, 17)]);
        let pad = PadToLargest::new(&records, Layout::Hwc, 1).unwrap();
        let cut = pad.cut(&data, records.bytes(), 1).unwrap();
        assert_eq!(cut.image, [30, 17, 3]);
        // 17 pixels a row are 3 bytes of bits.
        assert_eq!(cut.mask, (30, 3));
    }

    #[test]
    fn a_size_off_the_canvas_is_an_error_naming_the_sample() {
        let records = layout(50, Layout::Chw, false);
        let pad = PadToLargest::new(&records, Layout::Chw, 1).unwrap();
        for bad in [(51, 10), (10, 0), (-1, 10)] {
            let data = batch(&records, &[(10, 10), bad]);
            let err = pad.cut(&data, records.bytes(), 2).unwrap_err().to_string();
            assert!(err.contains("sample 1 of the batch"), "{err}");
        }
    }

    #[test]
    fn records_without_boxes_and_a_multiple_of_0_are_refused() {
        let image = SampleLayout::of_record(vec![(
            "image".into(),
            PartForm::Tensor {
                shape: vec![3, 8, 8],
                dtype: DType::U8,
            },
        )]);
        let err = PadToLargest::new(&image, Layout::Chw, 1).unwrap_err();
        assert!(err.to_string().contains("boxes field"), "{err}");
        let err = PadToLargest::new(&layout(8, Layout::Chw, false), Layout::Chw, 0).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}
