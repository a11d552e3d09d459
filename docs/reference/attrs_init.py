"""A griffe extension: the `__init__` that attrs writes, for the API reference.

Most public classes are `attrs` classes, whose `__init__` exists only at run
time, so griffe, reading the source, would show them without parameters and
take each `Args:` entry of their docstrings for a parameter that does not
exist. This gives every such class of the package the signature Python
itself reports (`inspect.signature`: aliases, keyword-only parameters,
defaults, a converter's argument type), so the reference shows the real one
and `mkdocs build --strict` fails on an `Args:` entry that names no
parameter. mkdocs.yml loads it (`extensions:`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import attrs
import griffe


def _runtime_class(cls: griffe.Class) -> type | None:
    """The class `cls` describes, imported; None when it cannot be."""
    try:
        module = importlib.import_module(cls.module.path)
    except ImportError:
        return None
    value: Any = module
    for part in cls.path.removeprefix(cls.module.path + ".").split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, type) else None


def _default(field: attrs.Attribute[Any] | None, value: object) -> str | None:
    """How the reference writes a parameter's default."""
    if value is inspect.Parameter.empty:
        return None
    # attrs reports a factory's default as NOTHING: the factory says more.
    factory = getattr(field.default, "factory", None) if field is not None else None
    if factory is not None:
        return f"{getattr(factory, '__qualname__', repr(factory))}()"
    return repr(value)


def _annotation(
    cls: griffe.Class, field: attrs.Attribute[Any] | None, value: object
) -> str | griffe.Expr | None:
    """A parameter's type: as attrs wrote it, else its attribute's in the source.

    A converter without annotations leaves attrs' parameter without a type;
    the attribute's own annotation is then the best there is.
    """
    if value is inspect.Parameter.empty:
        member = cls.members.get(field.name) if field is not None else None
        return member.annotation if isinstance(member, griffe.Attribute) else None
    return value if isinstance(value, str) else inspect.formatannotation(value)


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}


def _set_init(cls: griffe.Class) -> None:
    runtime = _runtime_class(cls)
    if runtime is None or not attrs.has(runtime) or "__init__" in cls.members:
        return
    fields = {field.alias: field for field in attrs.fields(runtime) if field.init}
    signature = inspect.signature(runtime.__init__)
    parameters = [
        griffe.Parameter(
            name,
            annotation=_annotation(cls, fields.get(name), parameter.annotation),
            kind=_KINDS[parameter.kind],
            default=_default(fields.get(name), parameter.default),
        )
        for name, parameter in signature.parameters.items()
    ]
    init = griffe.Function(
        "__init__",
        lineno=cls.lineno,
        endlineno=cls.lineno,
        parent=cls,
        parameters=griffe.Parameters(*parameters),
        returns="None",
    )
    cls.set_member("__init__", init)


def _walk(obj: griffe.Module | griffe.Class, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if isinstance(obj, griffe.Class):
        _set_init(obj)
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Module | griffe.Class):
            _walk(member, seen)


class AttrsInit(griffe.Extension):
    """Gives each attrs class of a loaded package the `__init__` attrs makes for it."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Called by griffe once the package is loaded."""
        _walk(pkg, set())
