//! `RandomApply`: a list of operators, all applied or none, with a probability.

use super::composed::{apply_one, motions_of_one, plan_one, targets_follow, Composed};
use super::{
    Declaration, Geometric, Motion, Op, Operator, OutputSize, Photometric, Planes, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomApply",
    doc: "Applies `transforms`, in order, with probability `p`, or none of them \
          (torchvision.transforms.v2's `RandomApply`). They are all operators on pixels, or \
          all geometric operators; those may size the image where an operator after them \
          fixes the output's size (none may place it on a canvas).",
    params: &[
        Param::required("transforms", Kind::Ops, "the operators"),
        Param::with_default("p", Kind::Float, "0.5", "probability of applying them"),
    ],
    translates: &[Translation::torchvision(
        "RandomApply",
        &[
            ("transforms", "transforms", Conv::Transforms),
            ("p", "p", Conv::Float),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let ops = args.ops("transforms")?.to_vec();
    let on = Composed::sequence(args, "transforms", &ops)?;
    // Not applied, the list leaves the size as it was.
    let on = on.or(
        Composed::Geometry(OutputSize::Keeps, false),
        args,
        "transforms",
    )?;
    Ok(Op::new(RandomApply {
        ops,
        on,
        p: args.probability("p")?,
    }))
}

struct RandomApply {
    ops: Vec<Op>,
    on: Composed,
    p: f64,
}

impl Operator for RandomApply {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![Value::Ops(self.ops.clone()), self.p.into()]
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

impl Photometric for RandomApply {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            for (place, op) in self.ops.iter().enumerate() {
                apply_one(op, place, image, rng);
            }
        }
    }

    fn motions(&self, width: usize, height: usize, rng: &mut Rng, out: &mut Vec<Motion>) {
        if rng.next_f64() < self.p {
            for (place, op) in self.ops.iter().enumerate() {
                motions_of_one(op, place, (width, height), rng, out);
            }
        }
    }
}

impl Geometric for RandomApply {
    fn output_size(&self) -> OutputSize {
        self.on.output_size()
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        self.plan_targeted(view, &[], rng);
    }

    fn plan_targeted(&self, view: &mut View, targets: &[[f64; 4]], rng: &mut Rng) {
        if rng.next_f64() < self.p {
            for op in &self.ops {
                plan_one(op, view, targets, rng);
            }
        }
    }

    fn holds_operators(&self) -> bool {
        true
    }
}
