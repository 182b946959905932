//! `Python` ([`crate::prep::python`]) among the image operators: on pixels or on the
//! sample as delivered.

use super::{Declaration, Op, Operator, Stage};
use crate::prep::args::Value;
use crate::prep::python::Python;
use crate::user_code::function::UserOp;

pub(super) static DECLARATION: Declaration = Python::declaration(
    "The caller's own function on each sample: the 8-bit pixels as 3 planes when an \
     operator on pixels or `Normalize` follows it, else the sample as delivered.",
);

impl Operator for Python {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        self.values()
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
