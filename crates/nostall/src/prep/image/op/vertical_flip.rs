//! `RandomVerticalFlip`: the image upside down, with a probability.
//!
//! It runs on the output's pixels, after the geometry: flipping rows commutes with the
//! resize (torchvision's filters are symmetric about the pixel centres), so flipping the
//! resized crop is flipping the crop, as a recipe that writes it after its crop has it.
//! Written before every geometric operator, it flips the whole decoded image before the
//! geometry, as every operator on pixels written there runs (torchvision's order).

use super::{moving_with_probability, Declaration, Motion, Op, Planes};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param};
use crate::prep::translation::{Conv, Translation};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomVerticalFlip",
    doc: "Flips the image upside down with probability `p` (torchvision.transforms.v2's \
          `RandomVerticalFlip`), after the geometric operators.",
    params: &[Param::with_default(
        "p",
        Kind::Float,
        "0.5",
        "probability of flipping",
    )],
    translates: &[Translation::torchvision(
        "RandomVerticalFlip",
        &[("p", "p", Conv::Float)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    moving_with_probability(args, &DECLARATION, flip_rows, Motion::FlipRows)
}

/// Each plane's rows in the reverse order.
fn flip_rows(image: &mut Planes<'_>) {
    let width = image.width;
    for plane in image.data.chunks_exact_mut(image.area()) {
        let mut rows = plane.chunks_exact_mut(width);
        while let (Some(top), Some(bottom)) = (rows.next(), rows.next_back()) {
            top.swap_with_slice(bottom);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_reversed_in_each_plane_and_twice_is_the_image() {
        // 3 planes of 3 rows of 2: each value names its plane, row and column.
        let original: Vec<u8> = (0..3u8)
            .flat_map(|c| (0..3u8).flat_map(move |y| (0..2u8).map(move |x| c * 100 + y * 10 + x)))
            .collect();
        let mut data = original.clone();
        let mut planes = Planes {
            data: &mut data,
            width: 2,
            height: 3,
        };
        flip_rows(&mut planes);
        let expected: Vec<u8> = (0..3u8)
            .flat_map(|c| {
                (0..3u8)
                    .rev()
                    .flat_map(move |y| (0..2u8).map(move |x| c * 100 + y * 10 + x))
            })
            .collect();
        assert_eq!(data, expected);
        let mut planes = Planes {
            data: &mut data,
            width: 2,
            height: 3,
        };
        flip_rows(&mut planes);
        assert_eq!(data, original);
    }
}
