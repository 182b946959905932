//! `TimeMasking`: SpecAugment's mask of a band of frames.

use super::masking::{Axis, Mask};
use super::{int, AudioOp, Declaration, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "TimeMasking",
    doc: "Sets a random band of frames of the spectrogram to 0 (SpecAugment, as torchaudio's \
          `TimeMasking`): its width drawn uniformly below `time_mask_param` (and below \
          `p` × frames), its start uniformly where it fits. It runs on the spectrogram as \
          delivered, so after `MelSpectrogram` and `Log`.",
    params: &[
        Param::required(
            "time_mask_param",
            Kind::Int,
            "the widest mask (widths are drawn below it), at most the frames",
        ),
        Param::with_default(
            "iid_masks",
            Kind::Bool,
            "False",
            "a band drawn for each channel, rather than one for all of them",
        ),
        Param::with_default(
            "p",
            Kind::Float,
            "1.0",
            "the widest mask as a fraction of the frames, in [0, 1]",
        ),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    let mask = Mask::new(
        &DECLARATION,
        Axis::Frames,
        args.int("time_mask_param")?,
        args.bool("iid_masks")?,
        args.probability("p")?,
    );
    Ok(AudioOp::new(TimeMasking(mask)))
}

struct TimeMasking(Mask);

impl Operator for TimeMasking {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![int(self.0.widest), self.0.iid.into(), self.0.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Spectrogram(&self.0)
    }
}
