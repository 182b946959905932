"""Writes ``nostall/_loader.pyi`` (the stub of ``nostall.Loader``) and the table of settings
in ``docs/python.md`` from the settings' declarations: the engine's
(``nostall._nostall._loader_settings``) and the front's (``nostall._loader.FRONT``).

Run it after adding or changing a setting (the package built, e.g. by ``make
python-test``): ``python python/write_loader_stub.py``. ``tests/test_loader_front.py``
fails while either differs from what this writes.
"""

from __future__ import annotations

import pathlib
import textwrap

ROOT = pathlib.Path(__file__).parent
STUB = ROOT / "nostall" / "_loader.pyi"
DOCS = ROOT.parent / "docs" / "python.md"
BEGIN = "<!-- settings: written by python/write_loader_stub.py -->"
END = "<!-- end of settings -->"

HEADER = '''"""Type stub of nostall.Loader.

Written by python/write_loader_stub.py from the settings' declarations: do not edit.
"""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any, Literal

from ._nostall import Field, Mixup
from ._nostall import Loader as _Engine
from ._remote import Remote

__all__ = ["Loader", "is_path", "texts"]

def is_path(obj: Any) -> bool: ...
def texts(given: Mapping[str, Any]) -> list[tuple[str, str]]: ...

class Loader(_Engine):
    """A data loader: iterate over it for the batches of one epoch (``help(nostall.Loader)``
    has every setting)."""

    def __new__(
        cls,
        source: str | PathLike[str] | Sequence[str | PathLike[str]] | Any,
        *,
'''


def render_stub() -> str:
    """The stub's text."""
    from nostall._loader import SETTINGS, literal

    lines = [f"        {s.name}: {s.annotation} = {literal(s.default)}," for s in SETTINGS]
    return HEADER + "\n".join(lines) + "\n    ) -> Loader: ...\n"


def render_docs(text: str) -> str:
    """``text`` (docs/python.md) with its table of settings written anew."""
    from nostall._loader import SETTINGS, setting_line

    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    body = "\n".join(textwrap.fill(setting_line(s, "`"), 90, subsequent_indent="  ") for s in SETTINGS)
    return text[:start] + "\n\n" + body + "\n\n" + text[end:]


def main() -> None:
    STUB.write_text(render_stub())
    DOCS.write_text(render_docs(DOCS.read_text()))


if __name__ == "__main__":
    main()
