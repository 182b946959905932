"""Writes ``nostall/ops.pyi``, the type stubs of ``nostall.ops``, from the engine's
declarations of its operators (``nostall._nostall._image_operators``).

Run it after adding or changing an operator (the package built, e.g. by ``make
python-test``): ``python python/write_ops_stub.py``. ``tests/test_ops.py`` fails while the
stubs differ from what this writes.
"""

from __future__ import annotations

import pathlib
import textwrap

STUB = pathlib.Path(__file__).parent / "nostall" / "ops.pyi"

HEADER = '''"""Type stubs of nostall.ops: the operators of a pipeline.

Written by python/write_ops_stub.py from the engine's declarations: do not edit.
"""

from collections.abc import Callable, Sequence
from typing import Any, final

from typing_extensions import disjoint_base

'''

BASE = '''@disjoint_base
class Op:
    """An operator of a pipeline: the base class of the operators of ``nostall.ops``.

    Operators are made by their subclasses and cannot be changed once made; a list of
    them is the ``pipeline`` of a ``nostall.Loader``. Two operators are equal when they
    do the same thing.
    """

    def __new__(cls, name: str, args: Sequence[Any], kwargs: dict[str, Any] | None) -> Op: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def _arg(self, name: str) -> Any: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...
'''


TRANSLATE = '''
def from_torchvision(transform: Any) -> list[Op]:
    """nostall's operators for a torchvision (v1 or v2) or timm recipe."""

class Python:
    """Your own function on each sample, after the geometric operators (images) or the
    crop (audio): the 8-bit pixels ``uint8[3, H, W]`` where an operator on pixels or
    ``Normalize`` follows, the waveform where ``MelSpectrogram`` follows, else the sample
    as delivered."""

    fn: Callable[..., Any]
    name: str
    wants_generator: bool
    def __init__(self, fn: Callable[..., Any]) -> None: ...
'''


def docstring(text: str, indent: str) -> str:
    """``text`` as a docstring at ``indent``, wrapped to 92 columns."""
    width = 92 - len(indent)
    paragraphs = [
        "\n".join(textwrap.fill(line, width, subsequent_indent="  ") for line in p.split("\n"))
        if p.startswith("- ")
        else textwrap.fill(p, width)
        for p in text.split("\n\n")
    ]
    body = "\n\n".join(paragraphs)
    return textwrap.indent(f'"""{body}\n"""', indent).replace(f"{indent}\n", "\n")


def render() -> str:
    """The stub file's text."""
    from nostall import ops
    from nostall._nostall import _image_operators

    declarations = _image_operators()
    names = sorted(["Op", "Python", "from_torchvision", *(name for name, _doc, _params in declarations)])
    out = [HEADER, "__all__ = [\n", *(f'    "{n}",\n' for n in names), "]\n\n", BASE]
    for name, _doc, params in declarations:
        out.append(f"\n@final\nclass {name}(Op):\n")
        out.append(docstring(getattr(ops, name).__doc__, "    ") + "\n\n")
        args = "".join(
            f", {param}: {takes}" + ("" if default is None else f" = {default}")
            for param, takes, _gives, default, _doc in params
        )
        out.append(f"    def __new__(cls{args}) -> {name}: ...\n")
        for param, _takes, gives, _default, doc in params:
            out.append(f"    @property\n    def {param}(self) -> {gives}:\n")
            out.append(f'        """{getattr(ops, name).__dict__[param].__doc__}"""\n')
    out.append(TRANSLATE)
    return "".join(out)


if __name__ == "__main__":
    STUB.write_text(render())
    print(f"wrote {STUB}")
