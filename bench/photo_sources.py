"""Source photographs for the benchmark dataset and the `nostall demo` assets.

The photos come from the Debian package ``mate-backgrounds`` (bookworm,
1.26.0-1), whose ``nature`` set holds 12 real photographs under GPL-2+.
The package is fetched with ``apt-get download`` and unpacked with
``dpkg -x`` into a cache directory; nothing is installed.

Everything else in that package (``abstract``/``desktop`` sets: gradients,
stripes, logos, and the painted "Elephants") is artwork, not photography,
and is not used.  ``ukui-wallpapers`` was examined as well and rejected: its
12 images are all rendered/illustrated artwork (ribbons, flat shapes,
cartoon animals), and its copyright file licenses them CC-BY-SA-3.0, not
GPL-2+.

Used by ``make_photos.py`` and ``make_demo_assets.py``; stdlib only.
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import sys

PACKAGE = "mate-backgrounds"
PACKAGE_VERSION = "1.26.0-1"
NATURE_DIR = "usr/share/backgrounds/mate/nature"
COPYRIGHT_FILE = "usr/share/doc/mate-backgrounds/copyright"
LICENSE = "GPL-2+"

# name -> (sha256 of the file in mate-backgrounds 1.26.0-1, copyright holders
# exactly as in /usr/share/doc/mate-backgrounds/copyright, short description).
PHOTOS: dict[str, tuple[str, str, str]] = {
    "Aqua.jpg": (
        "5c30118205982da441bf7e6a1ada636a8a0be879408140b3148280c665ed6bce",
        "2008, Charles Barbin <barbinch@free.fr>",
        "water drop splash crown, macro",
    ),
    "Blinds.jpg": (
        "f7aac0dcc2e06d0491643e84df3da1d9db7c4610f58806a880d56e074799f600",
        "2008, Lennart Poettering <mztabzr@0pointer.de>; 2008, Andrea Cimitan",
        "backlit green leaf with veins, macro",
    ),
    "Dune.jpg": (
        "8a67c2cb0be8c46b70c237311a4fa4d2b4ac7d39568135384787801fa5cc9a91",
        "2007, Marco Cogoni <cogoni@gmail.com>; 2008, Hylke Bons <hylkebons@gmail.com>",
        "dune grass in front of sea and sky",
    ),
    "FreshFlower.jpg": (
        "972b0a0c4e5e3fa93f4f244fc84bc64b121a5eac3aaa5856f1308c1f38a02f8e",
        "2005, Jens Ansorg <jens@ansorg-web.de>",
        "orange flower petals, macro",
    ),
    "Garden.jpg": (
        "d3095ee09d425ef23d27155412136cf14fc3c9af76ca58b452f55e23da324e78",
        "2008, Charles Barbin <barbinch@free.fr>",
        "red marigold flower on blurred garden background",
    ),
    "GreenMeadow.jpg": (
        "8fa0de0aa4089f7319c9fb7a6d006d4cab6023e8c8853731557cff53567b4832",
        "2005, Timothy Schellhase; 2008, Lapo Calamandrei",
        "young green grass blades",
    ),
    "LadyBird.jpg": (
        "e35a9a4126ef969c90b29c038058c5a575a20eadd84106a37bf1fa9931e7b61d",
        "2008, Charles Barbin <barbinch@free.fr>",
        "ladybird on a grass blade among forget-me-not flowers",
    ),
    "RainDrops.jpg": (
        "3e4ea9671c28c90a86cf67b3db9daf18c4741587c596333a7529ca589aaa0c16",
        "2008, \"blackcombwhistler07\" <blackcombwhistler07@googlemail.com>",
        "green leaves with rain drops",
    ),
    "Storm.jpg": (
        "77ca53077831d3237f73393a91fc879158abc046d852941c26e90de336356957",
        "2008, Sergey Nazarov <phearnot@renee.ru>",
        "storm clouds over fields, motion-blurred road",
    ),
    "TwoWings.jpg": (
        "665e5abf8a5399070a91a9a8e455fe071e5b61697ff78fdeda4e9843ef545aeb",
        "2008, Charles Barbin <barbinch@free.fr>; 2008, Hylke Bons <hylkebons@gmail.com>",
        "two dandelion seeds before blurred orange flowers",
    ),
    "Wood.jpg": (
        "19c78500ac00a622e19907ab9cc7d06d46fe08c4a6142759a84195696150ec07",
        "2008, Jean-François Fortin Tam <nekohayo@gmail.com>",
        "weathered painted wooden planks",
    ),
    "YellowFlower.jpg": (
        "254da96256acb7add685679775a04d1e4a5bc8cd13e5a5a3d61351ce198a5306",
        "2008, Charles Barbin <barbinch@free.fr>",
        "yellow flower petals and centre, macro",
    ),
}

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHE = os.path.join(BENCH_DIR, "data", ".debs")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sources(cache_dir: str = DEFAULT_CACHE) -> dict[str, str]:
    """Download + unpack mate-backgrounds (if needed); return {name: path}.

    Warns (does not fail) when a file's hash differs from the reference
    version, since the generated images would then differ too.
    """
    os.makedirs(cache_dir, exist_ok=True)
    root = os.path.join(cache_dir, "extract")
    nature = os.path.join(root, NATURE_DIR)
    if not all(os.path.isfile(os.path.join(nature, n)) for n in PHOTOS):
        debs = glob.glob(os.path.join(cache_dir, f"{PACKAGE}_*.deb"))
        if not debs:
            print(f"fetching {PACKAGE}={PACKAGE_VERSION} with apt-get download ...",
                  file=sys.stderr)
            r = subprocess.run(["apt-get", "download", f"{PACKAGE}={PACKAGE_VERSION}"],
                               cwd=cache_dir)
            if r.returncode != 0:
                print(f"pinned version unavailable; trying any {PACKAGE}", file=sys.stderr)
                subprocess.run(["apt-get", "download", PACKAGE], cwd=cache_dir, check=True)
            debs = glob.glob(os.path.join(cache_dir, f"{PACKAGE}_*.deb"))
        subprocess.run(["dpkg", "-x", sorted(debs)[-1], root], check=True)
    paths = {}
    for name, (digest, _, _) in PHOTOS.items():
        p = os.path.join(nature, name)
        if _sha256(p) != digest:
            print(f"WARNING: {name} differs from {PACKAGE} {PACKAGE_VERSION}; "
                  "generated images will not match the reference set", file=sys.stderr)
        paths[name] = p
    return paths


def copyright_path(cache_dir: str = DEFAULT_CACHE) -> str:
    return os.path.join(cache_dir, "extract", COPYRIGHT_FILE)
