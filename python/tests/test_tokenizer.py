"""nostall.Tokenizer against its references: the ``tokenizers`` package on the same
``tokenizer.json`` (ids equal on every text) and OpenCLIP's own tokenizer (equal wherever
OpenCLIP's caption cleaning, ftfy and HTML unescaping, leaves the text as it was).

The texts are real English sentences: the Python documentation's reference topics that
ship with the interpreter (``pydoc_data``), with a few hostile ones added.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

import nostall
from nostall._tokenizer import tokenizer_json

open_clip = pytest.importorskip("open_clip")
tokenizers = pytest.importorskip("tokenizers")

HOSTILE = [
    "",
    " ",
    "\t\n  spaced   out \r\n",
    "emoji 🐈‍⬛🏳️‍🌈 and flags 🇫🇷",
    "combining: e\u0301 a\u0308 n\u0303 and NFC é ä ñ",
    "right to left: שלום עולם مرحبا بالعالم",
    "CJK 東京タワーの夜景 한국어 문장",
    "zero\u200bwidth\u200cjoiners\u200d and \u00a0non-breaking",
    "control \x01\x02\x7f characters",
    "<start_of_text> inside <end_of_text> a caption",
    "a " * 200,
    "x" * 3000,
    "'s 't 're 've 'm 'll 'd contractions: it's they're we've I'm you'll he'd",
    "numbers 1234567890 3.14159 1e-9 #42 $5.00",
]


@pytest.fixture(scope="module")
def sentences():
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) >= 3]
    assert len(found) > 2000
    return found + HOSTILE


@pytest.fixture(scope="module")
def simple():
    return open_clip.get_tokenizer("ViT-B-32")


@pytest.fixture(scope="module")
def reference(simple):
    """The ``tokenizers`` package's tokenizer of the same JSON, cut and padded alike."""
    hf = tokenizers.Tokenizer.from_str(tokenizer_json(simple))
    hf.enable_truncation(77)
    hf.enable_padding(length=77, pad_id=0)
    return hf


def test_ids_equal_the_tokenizers_package_on_every_text(simple, reference, sentences):
    ids, mask = nostall.Tokenizer(simple)(sentences)
    assert ids.shape == mask.shape == (len(sentences), 77)
    want = reference.encode_batch(sentences)
    np.testing.assert_array_equal(ids.numpy(), np.array([e.ids for e in want]))
    np.testing.assert_array_equal(mask.numpy(), np.array([e.attention_mask for e in want]))


def test_ids_equal_open_clips_where_its_cleaning_changes_nothing_else(simple, sentences):
    """OpenCLIP cleans each caption with ftfy and html.unescape; nostall's tokenizer makes
    curly quotes straight as ftfy does, and nothing else of it. Wherever the rest of the
    cleaning changes nothing, the ids are OpenCLIP's."""
    from open_clip.tokenizer import basic_clean, whitespace_clean

    def uncurled(text):
        return re.sub("[\u201c-\u201f]", '"', re.sub("[\u02bc\u2018-\u201b]", "'", text))

    ids, _ = nostall.Tokenizer(simple)(sentences)
    theirs = simple(sentences).numpy()
    differ = {i for i in range(len(sentences)) if not np.array_equal(ids[i].numpy(), theirs[i])}
    cleaned_alike = {i for i, s in enumerate(sentences)
                     if whitespace_clean(basic_clean(s)) == whitespace_clean(uncurled(s).strip())}
    assert len(cleaned_alike) > 0.95 * len(sentences)
    assert sorted(differ & cleaned_alike) == []


def test_a_tokenizer_given_as_a_file_or_an_object_is_the_same(simple, tmp_path, sentences):
    json = tokenizer_json(simple)
    path = tmp_path / "tokenizer.json"
    path.write_text(json)
    texts = sentences[:300]
    by_object = nostall.Tokenizer(simple)(texts)[0]
    by_path = nostall.Tokenizer(str(path))(texts)[0]
    by_hf = nostall.Tokenizer(tokenizers.Tokenizer.from_str(json))(texts)[0]
    assert (by_object == by_path).all() and (by_object == by_hf).all()


def test_length_padding_and_the_mask(simple):
    tok = nostall.Tokenizer(simple, 8, pad_id=7)
    assert (tok.length, tok.pad_id) == (8, 7)
    ids, mask = tok(["a photo of a cat", "one two three four five six seven eight nine ten"], output="numpy")
    assert ids.dtype == np.int64 and ids.shape == (2, 8)
    sot, eot = simple.sot_token_id, simple.eot_token_id
    assert ids[0][0] == sot and list(mask[0]) == [1] * 7 + [0]
    assert ids[0][6] == eot and ids[0][7] == 7
    # Cut: the start token, six words, the end token (as OpenCLIP cuts).
    assert list(mask[1]) == [1] * 8 and ids[1][0] == sot and ids[1][7] == eot
    np.testing.assert_array_equal(ids[1], simple(["one two three four five six seven eight nine ten"], 8)[0].numpy())


def test_a_text_over_the_bound_names_it_and_bad_arguments_are_config_errors(simple, tmp_path):
    tok = nostall.Tokenizer(simple, max_bytes=100)
    with pytest.raises(nostall.SampleError, match=r"texts\[1\].*101 bytes.*100") as info:
        tok(["fine", "x" * 101])
    assert info.value.cause == "too-large"
    with pytest.raises(nostall.ConfigError, match="length 0"):
        nostall.Tokenizer(simple, 0)
    with pytest.raises(nostall.ConfigError, match="tokenizer.json"):
        nostall.Tokenizer(str(tmp_path / "missing" / "tokenizer.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(nostall.ConfigError, match="not a tokenizer.json"):
        nostall.Tokenizer(str(bad))
    with pytest.raises(TypeError, match="not builtins.int"):
        nostall.Tokenizer(3)  # type: ignore[arg-type]


def test_html_entities_are_where_open_clip_differs(simple):
    """The known difference, kept visible: OpenCLIP unescapes HTML before tokenizing."""
    text = "fish &amp; chips"
    ours = nostall.Tokenizer(simple)([text])[0][0].numpy()
    assert not np.array_equal(ours, simple([text])[0].numpy())
    np.testing.assert_array_equal(nostall.Tokenizer(simple)([html.unescape(text)])[0][0].numpy(),
                                  simple([text])[0].numpy())


def test_hostile_texts_are_errors_naming_them_and_bytes_are_read_as_utf8(simple):
    tok = nostall.Tokenizer(simple)
    texts = ["a photo of a cat", "Café déjà vu"]
    by_str = tok(texts)[0]
    by_bytes = tok([t.encode() for t in texts])[0]
    assert torch_equal(by_str, by_bytes)
    for bad, says in [(b"\xff\xfe not utf-8", "not UTF-8"), ("lone \udcff surrogate", "not valid Unicode"),
                      ("x" * (10 << 20), "10485760 bytes")]:
        with pytest.raises(nostall.SampleError, match=r"texts\[1\]") as info:
            tok(["fine", bad, "fine too"])
        assert says in str(info.value)
    with pytest.raises(TypeError, match=r"texts\[0\]: give str or UTF-8 bytes, not int"):
        tok([3])


def torch_equal(a, b):
    return bool((a == b).all())


def test_a_tokenizer_pickles_to_the_same_ids(simple, sentences):
    """Ray sends a loader's settings to its actors pickled (remote=): a field's tokenizer
    comes back whole."""
    import pickle

    tok = nostall.Tokenizer(simple, 16, pad_id=3, max_bytes=4096)
    back = pickle.loads(pickle.dumps(tok))
    assert (back.length, back.pad_id) == (16, 3)
    texts = sentences[:200]
    assert (back(texts)[0] == tok(texts)[0]).all()
    field = nostall.Field("txt", tokenizer=tok)
    assert repr(pickle.loads(pickle.dumps(field))) == repr(field)
