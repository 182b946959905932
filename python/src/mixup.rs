//! `nostall.Mixup`: MixUp and CutMix of a loader's batches, timm's `Mixup` arguments.

use nostall::prep::mixup::{MixupArgs, MixupMode};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::Text;

/// MixUp and CutMix of each batch, in the engine, as timm's ``Mixup`` (the same
/// arguments and defaults): give it to ``Loader(mix=...)``, and each batch comes with
/// soft labels, float32 ``[batch, num_classes]``, instead of class indices.
///
/// - ``mixup_alpha`` (``1.0``): MixUp's Beta(α, α); 0 turns MixUp off.
/// - ``cutmix_alpha`` (``0.0``): CutMix's Beta(α, α); 0 turns CutMix off.
/// - ``cutmix_minmax`` (``None``): CutMix's box sides as a range of the image's, instead
///   of from λ.
/// - ``prob`` (``1.0``): probability of mixing a batch (pair, sample).
/// - ``switch_prob`` (``0.5``): probability of CutMix rather than MixUp when both are on.
/// - ``mode`` (``"batch"``): one draw a batch, ``"pair"`` one a pair, ``"elem"`` one a
///   sample; sample ``i`` is mixed with sample ``len - 1 - i``.
/// - ``correct_lam`` (``True``): λ corrected to the clipped box's area.
/// - ``label_smoothing`` (``0.1``): smoothing of the soft labels.
/// - ``num_classes`` (``1000``): the soft labels' width (at least the dataset's classes).
///
/// Draws are keyed by the seed, the epoch and the batch: the same mixing for any number
/// of threads and after a resume. MixUp needs ``dtype="float32"``. A batch of video clips
/// mixes each clip whole: one λ, or one box on every frame.
#[pyclass(module = "nostall", name = "Mixup", frozen)]
pub(crate) struct Mixup(pub MixupArgs);

#[pymethods]
impl Mixup {
    #[new]
    #[pyo3(signature = (
        mixup_alpha=1.0, cutmix_alpha=0.0, cutmix_minmax=None, prob=1.0, switch_prob=0.5,
        mode=Text(MixupMode::Batch), correct_lam=true, label_smoothing=0.1, num_classes=1000
    ), text_signature = "(mixup_alpha=1.0, cutmix_alpha=0.0, cutmix_minmax=None, prob=1.0, \
        switch_prob=0.5, mode='batch', correct_lam=True, label_smoothing=0.1, num_classes=1000)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        mixup_alpha: f64,
        cutmix_alpha: f64,
        cutmix_minmax: Option<(f64, f64)>,
        prob: f64,
        switch_prob: f64,
        mode: Text<MixupMode>,
        correct_lam: bool,
        label_smoothing: f64,
        num_classes: usize,
    ) -> Mixup {
        Mixup(MixupArgs {
            mixup_alpha,
            cutmix_alpha,
            cutmix_minmax,
            prob,
            switch_prob,
            mode: mode.0,
            correct_lam,
            label_smoothing,
            num_classes,
        })
    }

    /// Its arguments, for pickling (Ray sends a loader's settings to its actors so).
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let a = &self.0;
        let kwargs = PyDict::new(py);
        kwargs.set_item("mixup_alpha", a.mixup_alpha)?;
        kwargs.set_item("cutmix_alpha", a.cutmix_alpha)?;
        kwargs.set_item("cutmix_minmax", a.cutmix_minmax)?;
        kwargs.set_item("prob", a.prob)?;
        kwargs.set_item("switch_prob", a.switch_prob)?;
        kwargs.set_item("mode", mode_name(a.mode))?;
        kwargs.set_item("correct_lam", a.correct_lam)?;
        kwargs.set_item("label_smoothing", a.label_smoothing)?;
        kwargs.set_item("num_classes", a.num_classes)?;
        Ok((PyTuple::empty(py), kwargs))
    }

    fn __repr__(&self) -> String {
        let a = &self.0;
        let mode = mode_name(a.mode);
        format!(
            "Mixup(mixup_alpha={:?}, cutmix_alpha={:?}, cutmix_minmax={}, prob={:?}, \
             switch_prob={:?}, mode='{mode}', correct_lam={}, label_smoothing={:?}, \
             num_classes={})",
            a.mixup_alpha,
            a.cutmix_alpha,
            a.cutmix_minmax
                .map_or("None".into(), |(lo, hi)| format!("({lo:?}, {hi:?})")),
            a.prob,
            a.switch_prob,
            if a.correct_lam { "True" } else { "False" },
            a.label_smoothing,
            a.num_classes
        )
    }
}

/// A mode as `Mixup(mode=...)` takes it.
fn mode_name(mode: MixupMode) -> &'static str {
    match mode {
        MixupMode::Pair => "pair",
        MixupMode::Elem => "elem",
        _ => "batch",
    }
}
