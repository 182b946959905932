"""Writes ``nostall/ops.pyi``, ``nostall/audio.pyi`` and ``nostall/video.pyi``, the type stubs of
``nostall.ops``, ``nostall.audio`` and ``nostall.video``, from the engine's declarations of
its operators (``nostall._nostall._image_operators``, ``_audio_operators`` and
``_video_operators``).

Run it after adding or changing an operator (the package built, e.g. by ``make
python-test``): ``python python/write_ops_stub.py``. ``tests/test_ops.py`` and
``tests/test_audio.py`` fail while the stubs differ from what this writes.
"""

from __future__ import annotations

import pathlib
import textwrap
from types import ModuleType

STUB = pathlib.Path(__file__).parent / "nostall" / "ops.pyi"
AUDIO_STUB = pathlib.Path(__file__).parent / "nostall" / "audio.pyi"
VIDEO_STUB = pathlib.Path(__file__).parent / "nostall" / "video.pyi"


def header(module: str, what: str, abc: str) -> str:
    """The stub file's opening: its docstring and imports (``abc``: from collections.abc)."""
    return f'''"""Type stubs of {module}: {what}.

Written by python/write_ops_stub.py from the engine's declarations: do not edit.
"""

from collections.abc import {abc}
from typing import Any, final

from typing_extensions import disjoint_base

'''


def base(summary: str) -> str:
    """The base class ``Op``, its docstring opening with ``summary``."""
    return f'''@disjoint_base
class Op:
    """{summary}

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
    as delivered; last in a video pipeline, the whole clip as delivered."""

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


def names(declarations: list, *others: str) -> list[str]:
    """``__all__``'s lines: the declared operators and ``others``, sorted."""
    every = sorted(["Op", *others, *(name for name, _doc, _params in declarations)])
    return ["__all__ = [\n", *(f'    "{n}",\n' for n in every), "]\n\n"]


def classes(module: ModuleType, declarations: list) -> list[str]:
    """One stub class for each operator the engine declares, as ``module`` made it."""
    out = []
    for name, _doc, params in declarations:
        out.append(f"\n@final\nclass {name}(Op):\n")
        out.append(docstring(getattr(module, name).__doc__, "    ") + "\n\n")
        args = "".join(
            f", {param}: {takes}" + ("" if default is None else f" = {default}")
            for param, takes, _gives, default, _doc in params
        )
        out.append(f"    def __new__(cls{args}) -> {name}: ...\n")
        for param, _takes, gives, _default, _pdoc in params:
            out.append(f"    @property\n    def {param}(self) -> {gives}:\n")
            out.append(f'        """{getattr(module, name).__dict__[param].__doc__}"""\n')
    return out


def render() -> str:
    """``nostall/ops.pyi``'s text."""
    from nostall import ops
    from nostall._nostall import _image_operators

    declarations = _image_operators()
    return "".join([
        header("nostall.ops", "the operators of a pipeline", "Callable, Sequence"),
        *names(declarations, "Python", "from_torchvision"),
        base("An operator of a pipeline: the base class of the operators of ``nostall.ops``."),
        *classes(ops, declarations),
        TRANSLATE,
    ])


def render_audio() -> str:
    """``nostall/audio.pyi``'s text."""
    from nostall import audio
    from nostall._nostall import _audio_operators

    declarations = _audio_operators()
    return "".join([
        header("nostall.audio", "the operators of an audio pipeline", "Sequence"),
        *names(declarations),
        base("An operator of an audio pipeline: the base class of the operators of\n"
             "    ``nostall.audio``."),
        *classes(audio, declarations),
    ])


def render_video() -> str:
    """``nostall/video.pyi``'s text."""
    from nostall import video
    from nostall._nostall import _video_operators

    declarations = _video_operators()
    return "".join([
        header("nostall.video", "the operators of a video pipeline", "Sequence"),
        *names(declarations),
        base("An operator of a video pipeline: the base class of the operators of\n"
             "    ``nostall.video``."),
        *classes(video, declarations),
    ])


if __name__ == "__main__":
    for stub, text in [(STUB, render()), (AUDIO_STUB, render_audio()), (VIDEO_STUB, render_video())]:
        stub.write_text(text)
        print(f"wrote {stub}")
