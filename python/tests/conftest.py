"""Shared fixtures: the demo photographs (32 real JPEGs in 4 classes) written to disk."""

import shutil

import pytest

import nostall


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    """A read-only ImageFolder of the 32 demo photographs."""
    return nostall.demo_photos(str(tmp_path_factory.mktemp("demo")))


@pytest.fixture
def photos_copy(photos, tmp_path):
    """A private copy of the demo photographs, for tests that add or damage files."""
    dst = tmp_path / "photos"
    shutil.copytree(photos, dst)
    return dst
