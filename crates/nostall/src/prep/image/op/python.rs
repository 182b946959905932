//! `Python`: the caller's own function ([`UserFn`](crate::user_code::function::UserFn)) between
//! the operators. Made by the bindings from `ops.Python(fn)`, never from the text form:
//! it is not among [`DECLARATIONS`](super::DECLARATIONS).

use super::{Declaration, Op, Operator, Stage};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};
use crate::user_code::function::UserOp;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Python",
    doc: "The caller's own function on each sample: the 8-bit pixels as 3 planes when an \
          operator on pixels or `Normalize` follows it, else the sample as delivered.",
    params: &[Param::required("fn", Kind::Choice, "the function's name")],
    translates: &[],
    build,
};

fn build(_: &Args) -> Result<Op> {
    Err(Error::Config(
        "Python(...) is made from a function, with nostall.ops.Python(fn), not from text".into(),
    ))
}

struct Python(UserOp);

impl Operator for Python {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![Value::Str(self.0.name().to_string())]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::User(&self.0)
    }
}

impl Op {
    /// The caller's function `f` as an operator (see [`crate::user_code::function`]).
    pub fn user(f: UserOp) -> Op {
        Op::new(Python(f))
    }
}
