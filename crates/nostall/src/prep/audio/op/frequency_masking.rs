//! `FrequencyMasking`: SpecAugment's mask of a band of mel bands.

use super::masking::{Axis, Mask};
use super::{int, AudioOp, Declaration, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "FrequencyMasking",
    doc: "Sets a random band of mel bands of the spectrogram to 0 (SpecAugment, as \
          torchaudio's `FrequencyMasking`): its width drawn uniformly below \
          `freq_mask_param`, its start uniformly where it fits. It runs on the spectrogram as \
          delivered, so after `MelSpectrogram` and `Log`.",
    params: &[
        Param::required(
            "freq_mask_param",
            Kind::Int,
            "the widest mask (widths are drawn below it), at most `n_mels`",
        ),
        Param::with_default(
            "iid_masks",
            Kind::Bool,
            "False",
            "a band drawn for each channel, rather than one for all of them",
        ),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    let mask = Mask::new(
        &DECLARATION,
        Axis::Mels,
        args.int("freq_mask_param")?,
        args.bool("iid_masks")?,
        1.0,
    );
    Ok(AudioOp::new(FrequencyMasking(mask)))
}

struct FrequencyMasking(Mask);

impl Operator for FrequencyMasking {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![int(self.0.widest), self.0.iid.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Spectrogram(&self.0)
    }
}
