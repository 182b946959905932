//! A mask field: a semantic segmentation's label map (one class a pixel, a PNG of the
//! image's size: VOC's palette PNGs, ADE20K's and Cityscapes' grey ones), moved with the
//! image's pixels as torchvision.transforms.v2 moves a `Mask`: read nearest through the
//! sample's [`Placement`] (the instance masks' reading, [`Placement::nearest`]), `fill`
//! where no pixel of the image shows (a zoom-out's canvas, `FixedSizeCrop`'s padding, the
//! corners a rotation or an affine warp brings in).
//!
//! A COCO panoptic image's member ([`crate::storage::Panoptic`]: its RGB PNG of segment
//! ids and the table that labels them) is read as the one-channel map it stands for:
//! each pixel its segment's label, [`UNLABELLED`] where the table lists no segment; from
//! there it moves as any label map.
//!
//! In its slot: the map at the output's size, uint8 `[height, width]`.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{
    prepared_unplaced, targets_of_another_kind, Declaration, FieldKind, Kind, Role, Settings,
    TargetKind, Targets,
};
use crate::error::Cause;
use crate::prep::image::codec::{decode_label_map, decode_segment_ids, DEFAULT_MAX_PIXELS};
use crate::prep::image::{follow_motions, read_nearest, Placement};
use crate::sample::{DType, PartForm, SampleLayout};
use crate::storage::{decode_panoptic_member, UNLABELLED};

pub(super) const DECLARATION: Declaration = Declaration {
    name: "mask",
    extensions: &[],
    settings: &["max_bytes", "fill"],
    make,
};

/// `max_bytes` unless set: a label map compresses well (VOC's average 2 KB, Cityscapes'
/// 2048 × 1024 maps 30–60 KB).
const DEFAULT_MASK_BYTES: usize = 16 << 20;

/// The most a member's `max_bytes` may be.
const MAX_MASK_BYTES: usize = 256 << 20;

#[derive(Debug)]
struct Mask {
    max_bytes: usize,
    /// The label where no pixel of the image shows.
    fill: u8,
}

/// A label map as its member gives it.
#[derive(Debug)]
pub(crate) struct LabelMap {
    width: u32,
    height: u32,
    /// Row-major, a byte a pixel.
    values: Vec<u8>,
}

impl FieldKind {
    /// A semantic segmentation's label map (a one-channel PNG of the image's size, of at
    /// most `max_bytes`) that follows the sample's geometry, `fill` where the image does
    /// not show.
    pub fn mask(max_bytes: usize, fill: u8) -> FieldKind {
        FieldKind::of(Mask { max_bytes, fill })
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    let fill = match settings.value("fill") {
        None => 0,
        Some(v) => v
            .as_u64()
            .and_then(|v| u8::try_from(v).ok())
            .ok_or_else(|| format!("fill={v} is not a label from 0 to 255"))?,
    };
    Ok(FieldKind::mask(
        settings.number("max_bytes")?.unwrap_or(DEFAULT_MASK_BYTES),
        fill,
    ))
}

impl Kind for Mask {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn role(&self) -> Role {
        Role::Target
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        if self.max_bytes == 0 || self.max_bytes > MAX_MASK_BYTES {
            return Err(format!(
                "max_bytes={} is out of bounds for a mask: use 1 to {MAX_MASK_BYTES}",
                self.max_bytes
            ));
        }
        Ok(())
    }

    fn form(&self, sample: &SampleLayout) -> PartForm {
        // A sample that is no image has no placement: refused by `RecordPrep::new`.
        let (height, width) = sample.image().unwrap_or((0, 0));
        PartForm::Tensor {
            shape: vec![height, width],
            dtype: DType::U8,
        }
    }

    fn fingerprint(&self) -> String {
        format!("mask max_bytes={} fill={}", self.max_bytes, self.fill)
    }

    fn prepare(&self, field: &str, _: &[u8], _: &mut [u8]) -> Result<(), Cause> {
        Err(prepared_unplaced(field))
    }

    fn targets(&self) -> Option<&dyn TargetKind> {
        Some(self)
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::from_iter([
            ("max_bytes".into(), json!(self.max_bytes)),
            ("fill".into(), json!(self.fill)),
        ])
    }
}

impl TargetKind for Mask {
    fn read(&self, field: &str, member: &[u8]) -> Result<Targets, Cause> {
        if member.len() > self.max_bytes {
            return Err(Cause::TooLarge {
                bytes: member.len() as u64,
                limit: self.max_bytes as u64,
                field: Some(field.to_string()),
            });
        }
        let bad = |reason: String| Cause::BadTargets {
            field: field.to_string(),
            reason,
        };
        let (width, height, values) = match decode_panoptic_member(member) {
            None => decode_label_map(member, DEFAULT_MAX_PIXELS)
                .map_err(|cause| bad(cause.to_string()))?,
            Some(panoptic) => {
                let panoptic = panoptic.map_err(bad)?;
                let path = panoptic.png_path;
                let label = |id| panoptic.label(id, UNLABELLED);
                let map = decode_segment_ids(panoptic.png, DEFAULT_MAX_PIXELS, label)
                    .map_err(|cause| bad(format!("its PNG of segment ids {path}: {cause}")))?;
                if (map.0, map.1) != panoptic.size {
                    return Err(bad(format!(
                        "its PNG of segment ids {path} is {}x{}, its image {}x{} (width x \
                         height)",
                        map.0, map.1, panoptic.size.0, panoptic.size.1
                    )));
                }
                map
            }
        };
        Ok(Targets::Map(LabelMap {
            width,
            height,
            values,
        }))
    }

    fn write(
        &self,
        field: &str,
        targets: &Targets,
        placement: &Placement,
        slot: &mut [u8],
    ) -> Result<(), Cause> {
        let Targets::Map(map) = targets else {
            return Err(targets_of_another_kind(field));
        };
        let image = placement.image_size();
        if (map.width, map.height) != image {
            return Err(Cause::BadTargets {
                field: field.to_string(),
                reason: format!(
                    "a label map of {}x{} for an image of {}x{}",
                    map.width, map.height, image.0, image.1
                ),
            });
        }
        let (rows, columns) = placement.nearest();
        let width = map.width as usize;
        read_nearest(&map.values, width, (&rows, &columns), self.fill, slot);
        // What a rotation or a warp brings in from outside the image is `fill` too: v2's
        // fill for a `Mask` (`fill={tv_tensors.Mask: ...}`).
        if let Some(moved) = placement.moved_pixels() {
            follow_motions(&moved, self.fill, slot);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::op::View;

    /// A grey PNG of `width` × `height` at `depth` bits of `values`.
    fn png(
        width: u32,
        height: u32,
        depth: png::BitDepth,
        color: png::ColorType,
        rows: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(color);
        encoder.set_depth(depth);
        if color == png::ColorType::Indexed {
            encoder.set_palette(vec![0u8; 3 * 256]);
        }
        encoder
            .write_header()
            .unwrap()
            .write_image_data(rows)
            .unwrap();
        out
    }

    fn prepare(
        kind: &FieldKind,
        member: &[u8],
        placement: &Placement,
        out: &mut [u8],
    ) -> Result<(), Cause> {
        let targets = kind.0.targets().unwrap();
        let read = targets.read("seg", member)?;
        targets.write("seg", &read, placement, out)
    }

    #[test]
    fn a_label_map_is_read_nearest_through_the_placement_fill_outside() {
        // 4x2, palette indices 0..8, then a crop of columns 1..3 mirrored, and a zoom-out.
        let member = png(
            4,
            2,
            png::BitDepth::Eight,
            png::ColorType::Indexed,
            &[0, 1, 2, 3, 4, 5, 6, 255],
        );
        let kind = FieldKind::mask(1 << 10, 9);
        let mut view = View::whole(4, 2);
        view.crop(1.0, 0.0, 2.0, 2.0);
        view.mirror();
        let mut out = [0u8; 4];
        prepare(
            &kind,
            &member,
            &Placement::new(&view, (4, 2), (2, 2)),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [2, 1, 6, 5]);
        // On a canvas twice the image's width, the image at its left: fill at the right.
        let mut view = View::whole(4, 2);
        view.pad(0.0, 0.0, 8.0, 2.0, [0; 3]);
        let mut out = [0u8; 16];
        prepare(
            &kind,
            &member,
            &Placement::new(&view, (4, 2), (8, 2)),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [0, 1, 2, 3, 9, 9, 9, 9, 4, 5, 6, 255, 9, 9, 9, 9]);
    }

    #[test]
    fn low_bit_depths_unpack_and_other_forms_are_refused_naming_the_field() {
        // 3x1 at 2 bits: values 3, 0, 2 packed as 0b11_00_10_00.
        let member = png(
            3,
            1,
            png::BitDepth::Two,
            png::ColorType::Grayscale,
            &[0b1100_1000],
        );
        let (w, h, values) = decode_label_map(&member, 100).unwrap();
        assert_eq!((w, h, values), (3, 1, vec![3, 0, 2]));
        let kind = FieldKind::mask(1 << 10, 0);
        let place = Placement::new(&View::whole(3, 1), (3, 1), (3, 1));
        let mut out = [0u8; 3];
        let why = |member: &[u8], place: &Placement| {
            prepare(&kind, member, place, &mut [0u8; 3])
                .unwrap_err()
                .to_string()
        };
        prepare(&kind, &member, &place, &mut out).unwrap();
        assert_eq!(out, [3, 0, 2]);
        let rgb = png(3, 1, png::BitDepth::Eight, png::ColorType::Rgb, &[0; 9]);
        assert!(
            why(&rgb, &place).contains("mode \"L\" or \"P\""),
            "{}",
            why(&rgb, &place)
        );
        let wide = png(
            3,
            1,
            png::BitDepth::Sixteen,
            png::ColorType::Grayscale,
            &[0; 6],
        );
        assert!(why(&wide, &place).contains("16 bits"));
        // Another size than the image's, a cut file, a file over max_bytes.
        let other = Placement::new(&View::whole(1, 3), (1, 3), (1, 3));
        assert!(why(&member, &other).contains("3x1 for an image of 1x3"));
        // A cut file is the sample's error, or (cut after its pixels) the map itself.
        for end in 0..member.len() {
            match prepare(&kind, &member[..end], &place, &mut out) {
                Ok(()) => assert_eq!(out, [3, 0, 2]),
                Err(why) => assert!(why.to_string().contains("field \"seg\""), "{why}"),
            }
        }
        // Every byte bent: an error or a map of the header's size, never a panic.
        let grey = png(
            5,
            4,
            png::BitDepth::Four,
            png::ColorType::Grayscale,
            &[0x5A; 12],
        );
        for at in 0..grey.len() {
            for v in [0, 1, 0x7F, 0xFF] {
                let mut bent = grey.clone();
                bent[at] = v;
                if let Ok((w, h, values)) = decode_label_map(&bent, 1 << 20) {
                    assert_eq!(values.len(), w as usize * h as usize);
                }
            }
        }
        let small = FieldKind::mask(8, 0);
        assert!(matches!(
            prepare(&small, &member, &place, &mut out),
            Err(Cause::TooLarge { limit: 8, .. })
        ));
    }

    #[test]
    fn a_panoptic_member_is_its_segments_labels_and_bad_pngs_name_the_file() {
        use crate::storage::encode_panoptic_member;
        // 3x2: segment 5, 65536 + 2 (B=1, R=2), an unlisted one, and 0 (unlabelled).
        let ids: [u32; 6] = [5, 5, 65538, 9, 0, 65538];
        let rgb: Vec<u8> = ids
            .iter()
            .flat_map(|&id| [id as u8, (id >> 8) as u8, (id >> 16) as u8])
            .collect();
        let png_bytes = png(3, 2, png::BitDepth::Eight, png::ColorType::Rgb, &rgb);
        let member = |size, png_bytes: &[u8]| {
            let mut out = Vec::new();
            encode_panoptic_member(
                size,
                "p/a.png",
                &[(65538, 200), (5, 7)],
                png_bytes,
                &mut out,
            );
            out
        };
        let kind = FieldKind::mask(1 << 10, 0);
        let place = Placement::new(&View::whole(3, 2), (3, 2), (3, 2));
        let mut out = [9u8; 6];
        prepare(&kind, &member((3, 2), &png_bytes), &place, &mut out).unwrap();
        assert_eq!(out, [7, 7, 200, UNLABELLED, UNLABELLED, 200]);
        let why = |member: &[u8]| {
            prepare(&kind, member, &place, &mut [0u8; 6])
                .unwrap_err()
                .to_string()
        };
        let other = why(&member((2, 3), &png_bytes));
        assert!(other.contains("p/a.png is 3x2, its image 2x3"), "{other}");
        let grey = png(
            3,
            2,
            png::BitDepth::Eight,
            png::ColorType::Grayscale,
            &[0; 6],
        );
        let grey = why(&member((3, 2), &grey));
        assert!(grey.contains("p/a.png") && grey.contains("RGB"), "{grey}");
        let whole = member((3, 2), &png_bytes);
        for end in 0..whole.len() {
            if let Err(why) = prepare(&kind, &whole[..end], &place, &mut out) {
                assert!(why.to_string().contains("field \"seg\""), "{why}");
            }
        }
    }
}
