//! `RandomApply`: a list of operators, all applied or none, with a probability.

use super::{
    Declaration, Geometric, Op, Operator, OutputSize, Photometric, Planes, Stage, View, MAX_NESTING,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomApply",
    doc: "Applies `transforms`, in order, with probability `p`, or none of them \
          (torchvision.transforms.v2's `RandomApply`). They are all operators on pixels, or \
          all geometric operators that keep the image's size (flips).",
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
    let on = Composed::of(args, "transforms", &ops)?;
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
        match self.on {
            Composed::Pixels => Stage::Pixels(self),
            Composed::Geometry => Stage::Geometry(self),
        }
    }

    fn moves_pixels(&self) -> bool {
        self.ops.iter().any(Op::moves_pixels)
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
}

impl Geometric for RandomApply {
    fn output_size(&self) -> OutputSize {
        OutputSize::Keeps
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            self.ops.iter().for_each(|op| plan_one(op, view, rng));
        }
    }
}

/// Where a list of operators runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Composed {
    /// All on pixels.
    Pixels,
    /// All geometric, keeping the size.
    Geometry,
}

impl Composed {
    /// Where `ops`, the list `param` of `args`, runs: all on pixels, or all geometric
    /// and keeping the size (so that the output's size does not depend on a draw).
    pub(super) fn of(args: &Args, param: &str, ops: &[Op]) -> Result<Composed> {
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
                Stage::Pixels(_) => Composed::Pixels,
                Stage::Geometry(g) if g.output_size() == OutputSize::Keeps => Composed::Geometry,
                Stage::Geometry(_) => {
                    return Err(args.error(
                        param,
                        format!(
                            "holds {}, which sizes the image: the output's size would depend \
                             on a draw",
                            op.name()
                        ),
                    ))
                }
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
        Ok(on.unwrap_or(Composed::Pixels))
    }
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

/// Plans the geometric operator `op`.
pub(super) fn plan_one(op: &Op, view: &mut View, rng: &mut Rng) {
    if let Stage::Geometry(geometric) = op.stage() {
        geometric.plan(view, rng);
    }
}
