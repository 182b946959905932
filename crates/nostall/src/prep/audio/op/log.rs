//! `Log`: the logarithm of the spectrogram, folded into it.

use super::{AudioOp, Declaration, Operator, Stage};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Log",
    doc: "`ln(x + offset)` of every value of a `MelSpectrogram` before it (`offset` keeps \
          silence finite; torchaudio users commonly take 1e-6).",
    params: &[Param::with_default(
        "offset",
        Kind::Float,
        "1e-06",
        "added before the logarithm, above 0 (as a float32)",
    )],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    let offset = args.float("offset")? as f32;
    if !(offset.is_finite() && offset > 0.0) {
        return Err(Error::Config(format!(
            "Log offset {offset} must be a finite number above 0 (it keeps the log of silence \
             finite)"
        )));
    }
    Ok(AudioOp::new(Log(offset)))
}

struct Log(f32);

impl Operator for Log {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        // The float32 as its shortest decimal (`1e-6`, not the 9.99999997e-7 it widens to),
        // as it has always been written: that decimal reads back to the same float32.
        let written: f64 = self.0.to_string().parse().expect("a float's own text");
        vec![written.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Log { offset: self.0 }
    }
}

impl AudioOp {
    /// `Log(offset)`.
    ///
    /// # Panics
    ///
    /// When `offset` is not a finite number above 0.
    pub fn log(offset: f32) -> AudioOp {
        AudioOp::known("Log", vec![f64::from(offset).into()])
    }
}
