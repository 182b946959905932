//! `nostall.ops.Python(fn)`: the user's function as an operator of the engine's pipeline
//! ([`nostall::prep::user_fn::UserFn`]), called in the loader's prep threads on the part
//! of the sample's slot the engine gives it (`nostall._python_ops.Python._apply` makes the
//! tensor or array).

use std::sync::Arc;

use nostall::prep::user_fn::{UserFn, UserOp, UserSample};
use nostall::Cause;
use pyo3::prelude::*;

use crate::user::call_on_slot;

/// One `ops.Python` of a pipeline, giving its function torch tensors or NumPy arrays.
struct PythonFn {
    op: Py<PyAny>,
    name: String,
    torch: bool,
}

impl UserFn for PythonFn {
    fn name(&self) -> &str {
        &self.name
    }

    fn apply(&self, sample: UserSample<'_>, seed: u64) -> Result<(), Cause> {
        let code = format!("ops.Python({})", self.name);
        let dtype = sample.dtype.to_string();
        call_on_slot(sample.data, &code, |view| {
            let args = (seed, view, sample.shape.to_vec(), &dtype, self.torch);
            self.op
                .bind(view.py())
                .call_method1("_apply", args)
                .map(drop)
        })
    }
}

/// `item` as an engine operator when it is an `ops.Python`, its function given torch
/// tensors when `torch`, else NumPy arrays.
pub(crate) fn user_op(item: &Bound<'_, PyAny>, torch: bool) -> PyResult<Option<UserOp>> {
    let class = item.py().import("nostall._python_ops")?.getattr("Python")?;
    if !item.is_instance(&class)? {
        return Ok(None);
    }
    let name = item.getattr("name")?.extract()?;
    let op = item.clone().unbind();
    Ok(Some(UserOp::new(Arc::new(PythonFn { op, name, torch }))))
}
