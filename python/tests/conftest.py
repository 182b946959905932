"""Shared fixtures: the demo photographs (32 real JPEGs in 4 classes) written to disk, and
nostall-video's test footage in class folders."""

import pathlib
import shutil
import signal

import pytest

import nostall


#: nostall-video's test footage (camera footage re-encoded, and its hostile files).
FOOTAGE = pathlib.Path(__file__).parents[2] / "crates" / "nostall-video" / "tests" / "footage"

#: The footage of one size, 320 × 240: AV1, H.264 with B-frames and with open GOPs, VP9.
SMALL_VIDEOS = ["av1.mp4", "h264_bframes.mp4", "h264_opengop.mkv", "vp9.webm", "vp9_offset.webm"]


@pytest.fixture(scope="session")
def videos(tmp_path_factory):
    """A read-only folder of the footage of one size, in class folders by container."""
    root = tmp_path_factory.mktemp("videos")
    for p in (FOOTAGE / name for name in SMALL_VIDEOS):
        (root / p.suffix[1:]).mkdir(exist_ok=True)
        shutil.copy(p, root / p.suffix[1:] / p.name)
    return root


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
