//! Lists of operators inside one (`Compose`, `RandomApply`, `RandomChoice`,
//! `RandomOrder`): where they run, what they do to the output's size, and how each of
//! them runs.

use super::{
    plan_step, Geometric, Motion, Op, OutputSize, Photometric, Planes, Stage, View, MAX_NESTING,
};
use crate::error::Result;
use crate::prep::args::{Args, Value};
use crate::rng::Rng;

/// Where a list of operators runs, and what it does to the output's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Composed {
    /// All on pixels.
    Pixels,
    /// All geometric: what they do to the output's size, and whether the canvas they
    /// place the image on only holds the batch ([`super::Inset::for_batching`]).
    Geometry(OutputSize, bool),
}

impl Composed {
    /// `ops`, the list `param` of `args`, run one after the other: all on pixels, or all
    /// geometric, where only a mirror may follow a canvas (as in a pipeline).
    pub(super) fn sequence(args: &Args, param: &str, ops: &[Op]) -> Result<Composed> {
        if !geometric(args, param, ops)? {
            return Ok(Composed::Pixels);
        }
        let (mut size, mut batch) = (OutputSize::Keeps, false);
        let mut canvas: Option<&Op> = None;
        for op in ops {
            let Stage::Geometry(g) = op.stage() else {
                continue;
            };
            if let (Some(padded), false) = (canvas, g.mirrors()) {
                return Err(args.error(
                    param,
                    format!(
                        "holds {} after {}, which places the image on a canvas: only \
                         RandomHorizontalFlip may follow it",
                        op.name(),
                        padded.name()
                    ),
                ));
            }
            match g.output_size() {
                OutputSize::Keeps => {}
                OutputSize::Canvas(..) => {
                    (size, batch, canvas) = (g.output_size(), g.batch_canvas(), Some(op));
                }
                other => size = other,
            }
        }
        Ok(Composed::Geometry(size, batch))
    }

    /// One of `ops`, the list `param` of `args`, drawn: all on pixels, or all geometric,
    /// whatever each does to the size as long as a batch can hold any of them
    /// ([`Composed::or`]).
    pub(super) fn choice(args: &Args, param: &str, ops: &[Op]) -> Result<Composed> {
        if !geometric(args, param, ops)? {
            return Ok(Composed::Pixels);
        }
        let mut on: Option<Composed> = None;
        for op in ops {
            let Stage::Geometry(g) = op.stage() else {
                continue;
            };
            let this = Composed::Geometry(g.output_size(), g.batch_canvas());
            on = Some(match on {
                None => this,
                Some(before) => before.or(this, args, param)?,
            });
        }
        Ok(on.unwrap_or(Composed::Pixels))
    }

    /// `ops`, the list `param` of `args`, as [`Composed::sequence`], where each keeps the
    /// image's size (their order is drawn, so the output's size would depend on it).
    pub(super) fn keeping(args: &Args, param: &str, ops: &[Op]) -> Result<Composed> {
        let on = Composed::sequence(args, param, ops)?;
        for op in ops {
            if matches!(op.stage(), Stage::Geometry(g) if g.output_size() != OutputSize::Keeps) {
                return Err(args.error(
                    param,
                    format!(
                        "holds {}, which sizes the image: the output's size would depend \
                         on the order drawn",
                        op.name()
                    ),
                ));
            }
        }
        Ok(on)
    }

    /// What `self` or `other`, drawn, does: the same where they agree; the larger of two
    /// batch canvases (each image sits at its top left either way); a size that varies
    /// where neither places the image on a canvas (an operator after must fix it). A
    /// canvas in one draw and not the other is refused: the output would be the canvas
    /// only sometimes.
    pub(super) fn or(self, other: Composed, args: &Args, param: &str) -> Result<Composed> {
        let (Composed::Geometry(a, a_batch), Composed::Geometry(b, b_batch)) = (self, other) else {
            return Ok(self);
        };
        if self == other {
            return Ok(self);
        }
        match (a, b) {
            (OutputSize::Canvas(ah, aw), OutputSize::Canvas(bh, bw)) if a_batch && b_batch => Ok(
                Composed::Geometry(OutputSize::Canvas(ah.max(bh), aw.max(bw)), true),
            ),
            (OutputSize::Canvas(..), _) | (_, OutputSize::Canvas(..)) => Err(args.error(
                param,
                "places the image on a canvas in some draws and not in others (or on \
                 canvases of different sizes that are not only the batch's): the output's \
                 size would depend on the draw; end every choice with the same canvas (a \
                 resize with the same max_size)",
            )),
            _ => Ok(Composed::Geometry(OutputSize::Varies, false)),
        }
    }

    /// The stage of `holder`, an operator whose list runs where `self` says.
    pub(super) fn stage_of<'a, T: Photometric + Geometric>(self, holder: &'a T) -> Stage<'a> {
        match self {
            Composed::Pixels => Stage::Pixels(holder),
            Composed::Geometry(..) => Stage::Geometry(holder),
        }
    }

    /// What it does to the output's size (`Keeps` for operators on pixels).
    pub(super) fn output_size(self) -> OutputSize {
        match self {
            Composed::Pixels => OutputSize::Keeps,
            Composed::Geometry(size, _) => size,
        }
    }

    /// Whether its canvas only holds the batch.
    pub(super) fn batch_canvas(self) -> bool {
        matches!(self, Composed::Geometry(OutputSize::Canvas(..), true))
    }

    /// Widens the batch canvas `view` was placed on by the one drawn to its own: the
    /// larger one every draw ends on.
    pub(super) fn fit_canvas(self, view: &mut View) {
        if let (Composed::Geometry(OutputSize::Canvas(h, w), true), Some(inset)) =
            (self, view.inset.as_mut())
        {
            (inset.width, inset.height) = (f64::from(w), f64::from(h));
        }
    }
}

/// Whether `ops`, the list `param` of `args`, is all geometric operators (else all on
/// pixels): refuses lists nested too deep, operators on the sample as delivered, and
/// lists that mix both kinds.
fn geometric(args: &Args, param: &str, ops: &[Op]) -> Result<bool> {
    let depth = 1 + ops.iter().map(nesting).max().unwrap_or(0);
    if depth > MAX_NESTING {
        return Err(args.error(
            param,
            format!(
                "nests lists of operators {depth} deep: at most {MAX_NESTING} (running \
                 them recurses into each); flatten the lists"
            ),
        ));
    }
    let mut on = None;
    for op in ops {
        let here = match op.stage() {
            // A list runs on the image as it is handed: none grows it.
            Stage::Pixels(p) if p.grows(1, 1).is_some() => {
                return Err(args.error(
                    param,
                    format!(
                        "holds {} with expand=True, which grows each image onto a canvas: \
                         write it in the pipeline itself, after the geometric operators",
                        op.name()
                    ),
                ))
            }
            Stage::Pixels(_) => false,
            Stage::Geometry(_) => true,
            Stage::Normalize { .. } | Stage::Tensor(_) | Stage::User(_) => {
                return Err(args.error(
                    param,
                    format!("holds {}: write it after the others, alone", op.name()),
                ))
            }
        };
        if on.is_some_and(|on| on != here) {
            return Err(args.error(
                param,
                "mixes geometric operators with operators on pixels: nostall plans the \
                 geometry before decoding, so give each kind its own",
            ));
        }
        on = Some(here);
    }
    Ok(on.unwrap_or(false))
}

/// How deep the lists of operators `op` holds nest: 0 where it holds none (each was
/// checked when made, so this recurses at most [`MAX_NESTING`] deep).
fn nesting(op: &Op) -> usize {
    op.args()
        .iter()
        .filter_map(|(_, value)| match value {
            Value::Ops(ops) => Some(1 + ops.iter().map(nesting).max().unwrap_or(0)),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Runs the operator on pixels `op`, the `place`-th of a list, with a generator of its
/// own.
pub(super) fn apply_one(op: &Op, place: usize, image: &mut Planes<'_>, rng: &Rng) {
    if let Stage::Pixels(kernel) = op.stage() {
        kernel.apply(image, &mut rng.fork(place as u64));
    }
}

/// The motions of the operator on pixels `op` at `place` in a list, drawn as [`apply_one`]
/// applies it to a `width` × `height` image.
pub(super) fn motions_of_one(
    op: &Op,
    place: usize,
    (width, height): (usize, usize),
    rng: &Rng,
    out: &mut Vec<Motion>,
) {
    if let Stage::Pixels(kernel) = op.stage() {
        kernel.motions(width, height, &mut rng.fork(place as u64), out);
    }
}

/// Whether the targets follow a list of operators: some move pixels, and the targets
/// follow each that does (the list's [`Photometric::motions`] gives theirs).
pub(super) fn targets_follow(ops: &[Op]) -> bool {
    ops.iter().any(Op::moves_pixels)
        && ops
            .iter()
            .all(|op| !op.moves_pixels() || op.moves_targets())
}

/// Plans the geometric operator `op` for a sample with boxes `targets`.
pub(super) fn plan_one(op: &Op, view: &mut View, targets: &[[f64; 4]], rng: &mut Rng) {
    if let Stage::Geometry(geometric) = op.stage() {
        plan_step(geometric, view, targets, rng);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometric(text: &str) -> Op {
        let op: Op = text.parse().unwrap();
        assert!(matches!(op.stage(), Stage::Geometry(_)), "{text}");
        op
    }

    fn planned(op: &Op, seed: u64) -> View {
        let Stage::Geometry(g) = op.stage() else {
            unreachable!()
        };
        let mut view = View::whole(640, 480);
        g.plan(&mut view, &mut Rng::new(seed));
        view
    }

    #[test]
    fn a_choice_of_batch_canvases_is_held_by_the_largest() {
        let choice = geometric(
            "RandomChoice([DetrRandomResize([200], max_size=300), Compose([RandomSizeCrop(50, \
             60), DetrRandomResize([400], max_size=500)])], p=[1.0, 0.0])",
        );
        let Stage::Geometry(g) = choice.stage() else {
            unreachable!()
        };
        assert_eq!(g.output_size(), OutputSize::Canvas(500, 500));
        assert!(g.batch_canvas());
        let view = planned(&choice, 1);
        // The first choice: int(200 * 640 / 480) x 200, on the second's canvas.
        assert_eq!((view.w, view.h), (266.0, 200.0));
        let inset = view.inset.unwrap();
        assert_eq!((inset.width, inset.height), (500.0, 500.0));
    }

    #[test]
    fn the_choice_drawn_plans_with_the_samples_draws() {
        let crop = geometric(
            "RandomChoice([Resize(100), Compose([DetrRandomResize([240]), RandomSizeCrop(50, 60)])], \
             p=[0.0, 1.0])",
        );
        for seed in 0..50 {
            let view = planned(&crop, seed);
            // 320 x 240, then a window of 50 to 60 pixels a side, at the source's scale 2.
            assert!((50.0..=60.0).contains(&view.w) && (50.0..=60.0).contains(&view.h));
            assert_eq!(view.source.w, view.w * 2.0);
            assert_eq!(view.resize_bound, None);
        }
    }

    #[test]
    fn sizes_that_differ_vary_and_a_canvas_in_some_draws_only_is_refused() {
        let varies = geometric("RandomChoice([Resize((30, 30)), RandomSizeCrop(10, 20)])");
        let Stage::Geometry(g) = varies.stage() else {
            unreachable!()
        };
        assert_eq!(g.output_size(), OutputSize::Varies);
        for text in [
            "RandomChoice([DetrRandomResize([200], max_size=300), Resize((30, 30))])",
            "RandomApply([DetrRandomResize([200], max_size=300)])",
            "Compose([DetrRandomResize([200], max_size=300), RandomSizeCrop(10, 20)])",
            "RandomOrder([RandomSizeCrop(10, 20)])",
        ] {
            let err = text.parse::<Op>().err().unwrap().to_string();
            assert!(err.contains("transforms"), "{text}: {err}");
        }
    }
}
