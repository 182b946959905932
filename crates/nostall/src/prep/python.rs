//! `Python`: the caller's own function ([`UserFn`](crate::user_code::function::UserFn))
//! among a modality's operators, the same in each but for where it runs (each modality's
//! `python` module). Made by the bindings from `ops.Python(fn)`, never from the text
//! form: it is not among a modality's declarations.

use crate::error::{Error, Result};
use crate::prep::args::{Args, Declaration, Kind, Param, Value};
use crate::user_code::function::UserOp;

/// The caller's function as an operator.
pub(crate) struct Python(pub(crate) UserOp);

impl Python {
    /// Its declaration among operators `O`, `doc` saying what the function is given.
    pub(crate) const fn declaration<O: 'static>(doc: &'static str) -> Declaration<O> {
        Declaration {
            name: "Python",
            doc,
            params: PARAMS,
            translates: &[],
            build: build::<O>,
        }
    }

    /// Its arguments: the function's name.
    pub(crate) fn values(&self) -> Vec<Value> {
        vec![Value::Str(self.0.name().to_string())]
    }
}

const PARAMS: &[Param] = &[Param::required("fn", Kind::Choice, "the function's name")];

fn build<O>(_: &Args) -> Result<O> {
    Err(Error::Config(
        "Python(...) is made from a function, with nostall.ops.Python(fn), not from text".into(),
    ))
}
