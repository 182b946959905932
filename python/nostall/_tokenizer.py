"""Tokenizers given as Python objects, as the engine reads them: the JSON of a
``tokenizer.json``.

- A ``tokenizers.Tokenizer``: its own JSON (``to_str()``).
- OpenCLIP's ``HFTokenizer`` (``open_clip.get_tokenizer`` for models with a Hugging Face
  text tower): its ``transformers`` tokenizer's backend, the same way.
- OpenCLIP's ``SimpleTokenizer`` (CLIP's own BPE, ``open_clip.get_tokenizer("ViT-B-32")``):
  the Hugging Face tokenizer its vocabulary and merges make, built as ``transformers``'
  CLIP converter builds it (NFC, whitespace runs to one space, lower case; CLIP's split
  pattern; byte-level BPE with ``</w>`` ending words; start and end tokens around each
  text), curly quotes made straight as ftfy does. OpenCLIP runs the whole of
  ``ftfy.fix_text`` and ``html.unescape`` over each caption, which this does not:
  captions with HTML entities, mojibake or ligatures tokenize differently
  (docs/python.md says how often).

Anything else is refused, naming it.
"""

from __future__ import annotations

from typing import Any


def tokenizer_json(tokenizer: Any) -> str:
    """The ``tokenizer.json`` text of ``tokenizer``, one of the objects above."""
    if hasattr(tokenizer, "to_str"):
        return str(tokenizer.to_str())
    backend = getattr(getattr(tokenizer, "tokenizer", None), "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        return str(backend.to_str())
    if type(tokenizer).__name__ == "SimpleTokenizer" and hasattr(tokenizer, "bpe_ranks"):
        return _from_open_clip(tokenizer)
    raise TypeError(
        f"Tokenizer: give a tokenizer.json's path, a tokenizers.Tokenizer or an OpenCLIP "
        f"tokenizer, not {type(tokenizer).__module__}.{type(tokenizer).__qualname__}"
    )


# ftfy's curly quotes (`ftfy.chardata.SINGLE_QUOTE_RE`, `DOUBLE_QUOTE_RE`).
_SINGLE_QUOTES = "[\u02bc\u2018-\u201b]"
_DOUBLE_QUOTES = "[\u201c-\u201f]"

# CLIP's split of a cleaned caption into words (OpenCLIP's `SimpleTokenizer.pat` without
# its special tokens, which are added as special tokens instead).
_CLIP_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def _from_open_clip(simple: Any) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    if getattr(simple, "reduction_fn", None) is not None:
        raise TypeError("Tokenizer: OpenCLIP's reduction_mask (a reduction instead of truncation) has no "
                        "equivalent: make the tokenizer without it")
    clean = getattr(getattr(simple, "clean_fn", None), "__name__", "")
    # ftfy's `uncurl_quotes` (its default, and OpenCLIP's), then as transformers' converter.
    steps = [normalizers.Replace(Regex(_SINGLE_QUOTES), "'"), normalizers.Replace(Regex(_DOUBLE_QUOTES), '"'),
             normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " ")]
    if clean == "_clean_lower":
        steps.append(normalizers.Lowercase())
    elif clean != "_clean_whitespace":
        raise TypeError(f"Tokenizer: OpenCLIP's clean function {clean or simple.clean_fn!r} has no equivalent "
                        "(its 'lower' and 'whitespace' do)")
    special_ids = set(simple.all_special_ids)
    special = [token for token, _ in sorted(
        ((token, i) for token, i in simple.encoder.items() if i in special_ids), key=lambda item: item[1])]
    vocab = {token: i for token, i in simple.encoder.items() if token not in special}
    merges = [pair for pair, _ in sorted(simple.bpe_ranks.items(), key=lambda item: item[1])]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, continuing_subword_prefix="",
                                     end_of_word_suffix="</w>", fuse_unk=False))
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CLIP_PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(special)
    sot, eot = simple.sot_token_id, simple.eot_token_id
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{simple.decoder[sot]} $A {simple.decoder[eot]}",
        special_tokens=[(simple.decoder[sot], sot), (simple.decoder[eot], eot)],
    )
    return str(tokenizer.to_str())


def rebuilt(json: str, length: int, pad_id: int | None, max_bytes: int) -> Any:
    """A ``nostall.Tokenizer`` from what its ``__reduce__`` gave (pickling it)."""
    from ._nostall import Tokenizer

    return Tokenizer._from_json(json, length, pad_id, max_bytes)
