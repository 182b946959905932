"""The classes of the engine's operators, made from their declarations: ``nostall.ops``'s
(images) and ``nostall.audio``'s each come from here, so that an operator is defined once,
in the engine (its name, parameters, defaults and docs)."""

from __future__ import annotations

import ast
import inspect
from typing import Any

#: One parameter as the engine declares it: name, what it takes and gives (Python
#: annotations), its default as Python writes it (``None``: required), its doc.
Param = tuple[str, str, str, "str | None", str]


def _rst(text: str) -> str:
    """The engine's Markdown code spans as reStructuredText's."""
    return text.replace("`", "``")


def _attribute(param: str, doc: str) -> property:
    """The attribute giving the operator's argument ``param``, as the engine holds it."""
    return property(lambda self: self._arg(param), doc=doc)


def operator_class(base: type, module: str, name: str, doc: str, params: list[Param]) -> type:
    """The class of the engine's operator ``name``: a subclass of ``base`` (the extension's
    class holding an operator) in ``module``, whose ``__new__`` hands its name and arguments
    to ``base.__new__``, with one property per parameter."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        return base.__new__(cls, name, args, kwargs)

    signature = inspect.Signature(
        [inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [
            inspect.Parameter(
                param,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if default is None else ast.literal_eval(default),
                annotation=takes,
            )
            for param, takes, _gives, default, _doc in params
        ]
    )
    __new__.__signature__ = signature  # type: ignore[attr-defined]
    __new__.__qualname__ = f"{name}.__new__"
    lines = [
        f"- ``{param}``{'' if default is None else f' (``{default}``)'}: {_rst(pdoc)}."
        for param, _takes, _gives, default, pdoc in params
    ]
    properties = {
        param: _attribute(param, _rst(pdoc[:1].upper() + pdoc[1:]) + ".")
        for param, _takes, _gives, _default, pdoc in params
    }
    return type(
        name,
        (base,),
        {
            **properties,
            "__new__": __new__,
            "__doc__": _rst(doc) + ("\n\n" + "\n".join(lines) if lines else ""),
            "__module__": module,
            "__qualname__": name,
            "__slots__": (),
        },
    )
