//! `RandomOrder`: every operator of a list, in an order drawn per sample.

use super::composed::{apply_one, motions_of_one, plan_one, targets_follow, Composed};
use super::{
    Declaration, Geometric, Motion, Op, Operator, OutputSize, Photometric, Planes, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomOrder",
    doc: "Applies every one of `transforms` in a random order (torchvision.transforms.v2's \
          `RandomOrder`). They are all operators on pixels, or all geometric operators that \
          keep the image's size.",
    params: &[Param::required("transforms", Kind::Ops, "the operators")],
    translates: &[Translation::torchvision(
        "RandomOrder",
        &[("transforms", "transforms", Conv::Transforms)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let ops = args.ops("transforms")?.to_vec();
    let on = Composed::keeping(args, "transforms", &ops)?;
    Ok(Op::new(RandomOrder { ops, on }))
}

struct RandomOrder {
    ops: Vec<Op>,
    on: Composed,
}

impl RandomOrder {
    fn order(&self, rng: &mut Rng) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.ops.len()).collect();
        rng.shuffle(&mut order);
        order
    }
}

impl Operator for RandomOrder {
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

impl Photometric for RandomOrder {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        for i in self.order(rng) {
            apply_one(&self.ops[i], i, image, rng);
        }
    }

    fn motions(&self, width: usize, height: usize, rng: &mut Rng, out: &mut Vec<Motion>) {
        for i in self.order(rng) {
            motions_of_one(&self.ops[i], i, (width, height), rng, out);
        }
    }
}

impl Geometric for RandomOrder {
    fn output_size(&self) -> OutputSize {
        OutputSize::Keeps
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        self.plan_targeted(view, &[], rng);
    }

    fn plan_targeted(&self, view: &mut View, targets: &[[f64; 4]], rng: &mut Rng) {
        for i in self.order(rng) {
            plan_one(&self.ops[i], view, targets, rng);
        }
    }

    fn holds_operators(&self) -> bool {
        true
    }
}
