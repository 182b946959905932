//! `Compose`: a list of operators as one, where a list takes operators (a choice of
//! `RandomChoice` made of several steps).

use super::composed::{apply_one, motions_of_one, plan_one, targets_follow, Composed};
use super::{
    Declaration, Geometric, Motion, Op, Operator, OutputSize, Photometric, Planes, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Compose",
    doc: "Applies `transforms` in order, as one operator (torchvision.transforms.v2's \
          `Compose`, where it is one choice of a `RandomChoice`: DETR's \
          `RandomSelect(..., Compose([RandomResize, RandomSizeCrop, RandomResize]))`). They \
          are all operators on pixels, or all geometric operators. A pipeline's own list \
          needs none.",
    params: &[Param::required(
        "transforms",
        Kind::Ops,
        "the operators, at least one",
    )],
    // A recipe's `Compose` inside a `RandomChoice` becomes one (`nostall/_translate.py`).
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let ops = args.ops("transforms")?.to_vec();
    if ops.is_empty() {
        return Err(args.error("transforms", "is empty: give at least one operator"));
    }
    let on = Composed::sequence(args, "transforms", &ops)?;
    Ok(Op::new(Compose { ops, on }))
}

struct Compose {
    ops: Vec<Op>,
    on: Composed,
}

impl Operator for Compose {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![Value::Ops(self.ops.clone())]
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

impl Photometric for Compose {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        for (place, op) in self.ops.iter().enumerate() {
            apply_one(op, place, image, rng);
        }
    }

    fn motions(&self, width: usize, height: usize, rng: &mut Rng, out: &mut Vec<Motion>) {
        for (place, op) in self.ops.iter().enumerate() {
            motions_of_one(op, place, (width, height), rng, out);
        }
    }
}

impl Geometric for Compose {
    fn output_size(&self) -> OutputSize {
        self.on.output_size()
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        self.plan_targeted(view, &[], rng);
    }

    fn plan_targeted(&self, view: &mut View, targets: &[[f64; 4]], rng: &mut Rng) {
        for op in &self.ops {
            plan_one(op, view, targets, rng);
        }
    }

    fn mirrors(&self) -> bool {
        self.ops
            .iter()
            .all(|op| matches!(op.stage(), Stage::Geometry(g) if g.mirrors()))
    }

    fn batch_canvas(&self) -> bool {
        self.on.batch_canvas()
    }

    fn holds_operators(&self) -> bool {
        true
    }
}
