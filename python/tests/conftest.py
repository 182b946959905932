"""Shared fixtures: the demo photographs (32 real JPEGs in 4 classes) written to disk."""

import shutil
import signal

import pytest

import nostall


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    """A read-only ImageFolder of the 32 demo photographs."""
    return nostall.demo_photos(str(tmp_path_factory.mktemp("demo")))


@pytest.fixture(scope="session")
def square_pngs(photos, tmp_path_factory):
    """`square_pngs(size)`: a folder of the demo photographs' centres at size × size as
    lossless PNGs (`parity.write_square_pngs`), made once a session for each size."""
    from parity import write_square_pngs

    made = {}

    def at(size):
        if size not in made:
            made[size] = write_square_pngs(photos, tmp_path_factory.mktemp(f"pngs{size}"), size)
        return made[size]

    return at


@pytest.fixture
def photos_copy(photos, tmp_path):
    """A private copy of the demo photographs, for tests that add or damage files."""
    dst = tmp_path / "photos"
    shutil.copytree(photos, dst)
    return dst


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt during the test, as in an interactive Python.

    A test that sends itself SIGINT sets this itself: started from a background job (as
    `make test &`, nohup and some CI runners do), Python starts with SIGINT ignored, and
    the signal would do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
