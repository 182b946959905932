//! `Channels`: every file mixed to mono, or its channels kept.

use super::{int, AudioOp, Declaration, Operator, Stage};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Channels",
    doc: "Keeps `count` channels: 1 mixes every file to mono (the mean of its channels, as \
          `waveform.mean(dim=0)`); more keeps that many and refuses files with another count.",
    params: &[Param::with_default(
        "count",
        Kind::Int,
        "1",
        "channels kept, 1 (mono) to 64",
    )],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    let count = args.int("count")?;
    if !(1..=64).contains(&count) {
        return Err(Error::Config(format!(
            "Channels({count}): keep between 1 (mono) and 64 channels"
        )));
    }
    Ok(AudioOp::new(Channels(count)))
}

struct Channels(usize);

impl Operator for Channels {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![int(self.0)]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Channels(self.0)
    }
}

impl AudioOp {
    /// `Channels(count)`: 1 mixes every file to mono, more keeps that many channels.
    ///
    /// # Panics
    ///
    /// When `count` is not between 1 and 64.
    pub fn channels(count: usize) -> AudioOp {
        AudioOp::known("Channels", vec![int(count)])
    }
}
