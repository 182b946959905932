//! `RandomChoice`: one operator of a list, drawn by weight.

use super::composed::{apply_one, motions_of_one, plan_one, targets_follow, Composed};
use super::{
    Declaration, Geometric, Motion, Op, Operator, OutputSize, Photometric, Planes, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomChoice",
    doc: "Applies one of `transforms`, drawn with the weights `p` (all alike when `None`) \
          (torchvision.transforms.v2's `RandomChoice`; DETR's `RandomSelect(t1, t2, p)` \
          is `RandomChoice([t1, t2], p=[p, 1 - p])`). They are all operators on pixels, \
          or all geometric operators; those may each size the image (a `Compose` each), \
          where every one ends on a batch canvas (the largest holds any) or an operator \
          after them fixes the output's size.",
    params: &[
        Param::required("transforms", Kind::Ops, "the operators, at least one"),
        Param::with_default(
            "p",
            Kind::Weights,
            "None",
            "a weight for each operator, or `None` for equal weights",
        ),
    ],
    translates: &[Translation::torchvision(
        "RandomChoice",
        &[
            ("transforms", "transforms", Conv::Choices),
            ("p", "p", Conv::OptionalFloats),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let ops = args.ops("transforms")?.to_vec();
    if ops.is_empty() {
        return Err(args.error("transforms", "is empty: give at least one operator"));
    }
    let on = Composed::choice(args, "transforms", &ops)?;
    let weights = match args.is_none("p") {
        true => None,
        false => Some(args.weights("p")?),
    };
    if let Some(weights) = &weights {
        if weights.len() != ops.len() {
            return Err(args.error(
                "p",
                format!("has {} weights for {} operators", weights.len(), ops.len()),
            ));
        }
        // The draw scales a uniform value by the sum: it must be finite too.
        let total: f64 = weights.iter().sum();
        let each = weights.iter().all(|w| w.is_finite() && *w >= 0.0);
        if !(each && total > 0.0 && total.is_finite()) {
            return Err(args.error(
                "p",
                format!(
                    "{weights:?}: weights are finite, at least 0, not all 0, and of a finite sum"
                ),
            ));
        }
    }
    Ok(Op::new(RandomChoice { ops, on, weights }))
}

struct RandomChoice {
    ops: Vec<Op>,
    on: Composed,
    weights: Option<Vec<f64>>,
}

impl RandomChoice {
    /// The operator drawn: each with its weight's share of the total.
    fn draw(&self, rng: &mut Rng) -> usize {
        let Some(weights) = &self.weights else {
            return rng.below(self.ops.len() as u64) as usize;
        };
        let mut at = rng.next_f64() * weights.iter().sum::<f64>();
        for (i, w) in weights.iter().enumerate() {
            if at < *w {
                return i;
            }
            at -= w;
        }
        // Rounding left `at` past the last weight: the last with any.
        weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)
    }
}

impl Operator for RandomChoice {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let weights = self.weights.as_ref().map_or(Value::None, |w| {
            Value::Tuple(w.iter().map(|v| Value::Float(*v)).collect())
        });
        vec![Value::Ops(self.ops.clone()), weights]
    }

    fn stage(&self) -> Stage<'_> {
        self.on.stage_of(self)
    }

    fn moves_pixels(&self) -> bool {
        self.ops.iter().any(Op::moves_pixels)
    }

    fn moves_targets(&self) -> bool {
        targets_follow(&self.ops)
    }

    fn needs_targets(&self) -> bool {
        self.ops.iter().any(Op::needs_targets)
    }
}

impl Photometric for RandomChoice {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let chosen = self.draw(rng);
        apply_one(&self.ops[chosen], chosen, image, rng);
    }

    fn motions(&self, width: usize, height: usize, rng: &mut Rng, out: &mut Vec<Motion>) {
        let chosen = self.draw(rng);
        motions_of_one(&self.ops[chosen], chosen, (width, height), rng, out);
    }
}

impl Geometric for RandomChoice {
    fn output_size(&self) -> OutputSize {
        self.on.output_size()
    }

    fn batch_canvas(&self) -> bool {
        self.on.batch_canvas()
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        self.plan_targeted(view, &[], rng);
    }

    /// The choice drawn plans on the sample's view with the sample's draws; its batch
    /// canvas widened to the one that holds every choice.
    fn plan_targeted(&self, view: &mut View, targets: &[[f64; 4]], rng: &mut Rng) {
        let chosen = self.draw(rng);
        plan_one(&self.ops[chosen], view, targets, rng);
        self.on.fit_canvas(view);
    }

    fn holds_operators(&self) -> bool {
        true
    }
}
