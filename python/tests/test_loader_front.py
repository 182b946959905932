"""The front of ``nostall.Loader``: its signature, stub and docs written from the settings'
declarations, and the conversion of each value to its setting's text form."""

from __future__ import annotations

import importlib.util
import inspect
import pathlib

import pytest

import nostall
from nostall import _nostall
from nostall._loader import FRONT, SETTINGS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _writer():
    spec = importlib.util.spec_from_file_location("write_loader_stub", ROOT / "write_loader_stub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stub_and_the_docs_are_written_from_the_declarations():
    writer = _writer()
    assert writer.STUB.read_text() == writer.render_stub(), (
        "nostall/_loader.pyi differs from the settings' declarations: run python python/write_loader_stub.py")
    docs = writer.DOCS.read_text()
    assert docs == writer.render_docs(docs), (
        "docs/python.md's settings differ from their declarations: run python python/write_loader_stub.py")


def test_every_engine_setting_is_a_keyword_of_the_loader():
    engine = {row[0] for row in _nostall._loader_settings()} - {"sample_column"}
    parameters = inspect.signature(nostall.Loader).parameters
    assert engine <= set(parameters), engine - set(parameters)
    assert {s.name for s in FRONT} <= set(parameters)
    assert len(parameters) == len(SETTINGS) + 1, "source, then each setting once"
    for setting in SETTINGS:
        assert setting.name in nostall.Loader.__doc__


def test_values_are_converted_to_their_settings_texts_or_refused_naming_them(tmp_path):
    photos = nostall.demo_photos(str(tmp_path / "photos"))
    with pytest.raises(TypeError, match="batch_size takes an int, not str"):
        nostall.Loader(photos, batch_size="8")
    with pytest.raises(TypeError, match="shuffle takes True or False, not int"):
        nostall.Loader(photos, shuffle=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        nostall.Loader(photos, batchsize=8)
    with pytest.raises(nostall.ConfigError, match="cache=1.5: a fraction of the dataset must lie in 0..1"):
        nostall.Loader(photos, cache=1.5)
    with pytest.raises(nostall.ConfigError, match="layout"):
        nostall.Loader(photos, layout="CWH")
    # The user-code settings where no user code runs, refused in one place.
    for extra in (dict(worker_init_fn=print), dict(workers="threads"), dict(timeout=5.0)):
        with pytest.raises(nostall.ConfigError, match="worker_init_fn= a Dataset's workers"):
            nostall.Loader(photos, **extra)
    # Settings the engine declares reach Python without a line of the front's.
    loader = nostall.Loader(photos, batch_size=4, threads=1, readahead="1MiB", adaptive_reads=False,
                            cache=0.5, memory=64 << 20, output="numpy")
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 224, 224) and labels.shape == (4,)
