//! Python's objects as the engine's types, each conversion once, for the signatures that
//! take them. A loader's settings come in their text forms instead ([`crate::spec`]):
//! the engine reads those by their declarations.

use std::fmt::Display;
use std::str::FromStr;
use std::sync::Arc;

use nostall::loader::PipelineSetting;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::{config_error, raise};
use crate::ops;
use crate::python_ops::PythonOps;

/// A setting Python gives as text the engine reads (`dtype="uint8"`, `read="cold"`): a
/// `ConfigError` with the engine's words when it cannot.
pub(crate) struct Text<T>(pub T);

impl<'py, T: FromStr> FromPyObject<'_, 'py> for Text<T>
where
    T::Err: Display,
{
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Text<T>> {
        let text: String = obj.extract()?;
        text.parse()
            .map(Text)
            .map_err(|e: T::Err| config_error(obj.py(), e.to_string()))
    }
}

/// A setting that is a switch or a named choice (`masks=True`, `masks="bits"`), as the
/// JSON value the engine's declarations read.
pub(crate) struct SwitchOrChoice(pub serde_json::Value);

impl<'py> FromPyObject<'_, 'py> for SwitchOrChoice {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<SwitchOrChoice> {
        if let Ok(switch) = obj.extract::<bool>() {
            return Ok(SwitchOrChoice(serde_json::Value::Bool(switch)));
        }
        match obj.extract::<String>() {
            Ok(choice) => Ok(SwitchOrChoice(serde_json::Value::String(choice))),
            Err(_) => Err(PyTypeError::new_err(format!(
                "give True, False or a choice's name, not {}",
                obj.get_type().name()?
            ))),
        }
    }
}

/// `Tokenizer(tokenizer)`: a `tokenizer.json`'s path, or a tokenizer object that
/// `nostall._tokenizer` turns into that file's JSON (a `tokenizers.Tokenizer`, OpenCLIP's).
pub(crate) enum TokenizerSource {
    Path(std::path::PathBuf),
    Json(String),
}

impl<'py> FromPyObject<'_, 'py> for TokenizerSource {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<TokenizerSource> {
        if let Ok(path) = obj.extract::<std::path::PathBuf>() {
            return Ok(TokenizerSource::Path(path));
        }
        let py = obj.py();
        let json = crate::front::front(py)?
            .tokenizer
            .bind(py)
            .call_method1("tokenizer_json", (obj,))?;
        Ok(TokenizerSource::Json(json.extract()?))
    }
}

/// A tokenizer's texts: a list of `str`, or of `bytes` holding UTF-8 (a WebDataset `txt`
/// member as it is read). A text that is not valid Unicode (bytes that are not UTF-8, a
/// `str` with a lone surrogate) is kept as its cause, for the error that names it.
pub(crate) struct Texts(pub Vec<Result<String, nostall::Cause>>);

impl<'py> FromPyObject<'_, 'py> for Texts {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Texts> {
        let items: Vec<Bound<'py, PyAny>> = obj.extract()?;
        let not_unicode = |what: String| nostall::Cause::Corrupt(format!("a text that is {what}"));
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                if let Ok(text) = item.cast::<PyString>() {
                    return Ok(text
                        .to_str()
                        .map(str::to_owned)
                        .map_err(|_| not_unicode("not valid Unicode (a lone surrogate)".into())));
                }
                if let Ok(bytes) = item.cast::<PyBytes>() {
                    return Ok(std::str::from_utf8(bytes.as_bytes())
                        .map(str::to_owned)
                        .map_err(|e| not_unicode(format!("not UTF-8 ({e})"))));
                }
                Err(PyTypeError::new_err(format!(
                    "texts[{i}]: give str or UTF-8 bytes, not {}",
                    item.get_type().name()?
                )))
            })
            .collect::<PyResult<_>>()
            .map(Texts)
    }
}

/// `pipeline=`: a preset's name, or a list of `nostall.ops` or `nostall.audio` operators
/// (with `nostall.ops.Python` among them), or a list of such lists (views). A recipe of
/// torchvision's or timm's is translated by the front (`nostall._translate.resolve`).
pub(crate) struct PipelineArg(pub PipelineSetting);

impl PipelineArg {
    /// `obj` as a pipeline, its `ops.Python` joining `python`.
    pub(crate) fn with_python(
        obj: &Bound<'_, PyAny>,
        python: &Arc<PythonOps>,
    ) -> PyResult<PipelineArg> {
        if let Ok(name) = obj.extract::<String>() {
            return name
                .parse()
                .map(PipelineArg)
                .map_err(|e| raise(obj.py(), e));
        }
        let operators = ops::from_python(obj, python)?;
        Ok(PipelineArg(PipelineSetting::Operators(operators)))
    }
}

impl<'py> FromPyObject<'_, 'py> for PipelineArg {
    type Error = PyErr;

    /// With torch tensors for `ops.Python` where torch is installed, run in the threads.
    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<PipelineArg> {
        let torch = obj.py().import("torch").is_ok();
        PipelineArg::with_python(&obj.to_owned(), &PythonOps::new(torch))
    }
}
