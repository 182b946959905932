//! `nostall.Tokenizer`: the engine's tokenizer (`nostall::prep::tokens`) for Python.

use nostall::error::SampleError;
use nostall::prep::tokens::{self, TokenizerArgs};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{Texts, TokenizerSource};
use crate::dlpack::Owner;
use crate::errors::raise;
use crate::tensor::{object, resolve_output};

/// A Hugging Face tokenizer run by nostall's engine, every text cut or padded to
/// ``length`` ids, as a text encoder takes them (OpenCLIP's 77 tokens).
///
/// - ``tokenizer``: a ``tokenizer.json``'s path, or a ``tokenizers.Tokenizer``: the same
///   file gives the same ids as the ``tokenizers`` package (its normaliser,
///   pre-tokeniser, model and special tokens; its own truncation and padding settings are
///   replaced by ``length``).
/// - ``length`` (``77``): ids a text; longer texts are cut (the special tokens kept),
///   shorter ones padded after.
/// - ``pad_id`` (``None``): the padding's id; by default the file's padding id where it
///   sets one, else 0 (as OpenCLIP pads).
/// - ``max_bytes`` (``65536``): the longest text, in UTF-8 bytes: a longer one is a
///   ``SampleError`` naming it (a tokenizer's work grows with its text).
///
/// Calling it with a list of texts gives ``(input_ids, attention_mask)``, int64
/// ``[len(texts), length]``: the mask 1 on the texts' ids, 0 on the padding.
#[pyclass(module = "nostall", name = "Tokenizer", frozen)]
pub(crate) struct Tokenizer(tokens::Tokenizer);

impl Tokenizer {
    /// The engine's tokenizer.
    pub(crate) fn engine(&self) -> &tokens::Tokenizer {
        &self.0
    }

    /// The tokenizer of `source` with these settings.
    fn made(
        py: Python<'_>,
        source: TokenizerSource,
        length: usize,
        pad_id: Option<u32>,
        max_bytes: usize,
    ) -> PyResult<Tokenizer> {
        let mut args = TokenizerArgs::new(length);
        (args.pad_id, args.max_bytes) = (pad_id, max_bytes);
        let made = py.detach(|| match &source {
            TokenizerSource::Path(path) => tokens::Tokenizer::from_file(path, args),
            TokenizerSource::Json(json) => tokens::Tokenizer::from_json(json.as_bytes(), args),
        });
        made.map(Tokenizer).map_err(|e| raise(py, e))
    }
}

#[pymethods]
impl Tokenizer {
    #[new]
    #[pyo3(signature = (tokenizer, length=77, *, pad_id=None, max_bytes=tokens::DEFAULT_MAX_BYTES),
           text_signature = "(tokenizer, length=77, *, pad_id=None, max_bytes=65536)")]
    fn new(
        py: Python<'_>,
        tokenizer: TokenizerSource,
        length: usize,
        pad_id: Option<u32>,
        max_bytes: usize,
    ) -> PyResult<Tokenizer> {
        Tokenizer::made(py, tokenizer, length, pad_id, max_bytes)
    }

    /// A tokenizer from its JSON and settings, as `__reduce__` gives them.
    #[staticmethod]
    fn _from_json(
        py: Python<'_>,
        json: String,
        length: usize,
        pad_id: Option<u32>,
        max_bytes: usize,
    ) -> PyResult<Tokenizer> {
        Tokenizer::made(py, TokenizerSource::Json(json), length, pad_id, max_bytes)
    }

    /// For pickling (Ray sends a loader's settings to its actors so): its JSON and
    /// settings, rebuilt by `nostall._tokenizer.rebuilt`.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Py<PyAny>, Bound<'py, PyTuple>)> {
        let rebuilt = crate::front::front(py)?
            .tokenizer
            .bind(py)
            .getattr("rebuilt")?
            .unbind();
        let args = self.0.args();
        let json = String::from_utf8_lossy(self.0.json()).into_owned();
        let args = (json, args.length, args.pad_id, args.max_bytes).into_pyobject(py)?;
        Ok((rebuilt, args))
    }

    /// The number of ids a text.
    #[getter]
    fn length(&self) -> usize {
        self.0.length()
    }

    /// The padding's id.
    #[getter]
    fn pad_id(&self) -> u32 {
        self.0.pad_id()
    }

    /// ``(input_ids, attention_mask)`` of ``texts`` (``str``, or ``bytes`` holding UTF-8),
    /// each int64 ``[len(texts), length]`` (torch tensors; ``output="numpy"`` or
    /// ``"dlpack"`` as ``Loader`` gives them). A text that is not valid Unicode, or over
    /// ``max_bytes``, is a ``SampleError`` naming it (``texts[i]``).
    #[pyo3(signature = (texts, *, output="torch"))]
    fn __call__(
        &self,
        py: Python<'_>,
        texts: Texts,
        output: &str,
    ) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let output = resolve_output(py, output)?;
        let length = self.0.length();
        let texts = texts.0;
        let encoded = py.detach(|| -> nostall::Result<(Vec<i64>, Vec<i64>)> {
            let (mut ids, mut mask) =
                (vec![0; texts.len() * length], vec![0; texts.len() * length]);
            let rows = ids
                .chunks_exact_mut(length)
                .zip(mask.chunks_exact_mut(length));
            for (i, (text, (ids, mask))) in texts.iter().zip(rows).enumerate() {
                let encoded = match text {
                    Ok(text) => self.0.encode_into(text, ids, mask),
                    Err(cause) => Err(cause.clone()),
                };
                encoded.map_err(|cause| {
                    nostall::Error::Sample(SampleError {
                        id: i as u64,
                        location: format!("texts[{i}]"),
                        cause,
                    })
                })?;
            }
            Ok((ids, mask))
        });
        let (ids, mask) = encoded.map_err(|e| raise(py, e))?;
        Ok((
            object(py, &output, Owner::Ints(ids, length))?,
            object(py, &output, Owner::Ints(mask, length))?,
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(<tokenizer>, length={}, pad_id={})",
            self.0.length(),
            self.0.pad_id()
        )
    }
}
