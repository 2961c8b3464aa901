"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings `extensions:`):
a default written as a name from `undercap.defaults` shows its value, so the reference
reads `max_steps: int = 50`, not `max_steps: int = defaults.PROFILE_MAX_STEPS` (in
dataclass fields and in function signatures); and a settings class that inherits the
fields of a class declared once (the user's code fields, `undercap.models.recipe.UserCode`;
a run's plan, `undercap.train.spec.Plan`) lists them in its parameters table as its own,
from that class's docstring (and from those it inherits in turn).
`undercap.defaults`, `undercap.models.recipe` and `undercap.train.spec` import nothing heavy."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from griffe import Attribute, Class, Extension, Function


def _value(expr: Any) -> Any:
    """The default's value as text where it names `undercap.defaults`, else `expr`."""
    text = None if expr is None else str(expr)
    if not text or "defaults." not in text:
        return expr
    names = {"defaults": importlib.import_module("undercap.defaults")}
    names.update(tuple=tuple, range=range)
    try:  # e.g. `defaults.PROFILE_MAX_STEPS` or `tuple(range(defaults.ESTIMATE_SEEDS))`
        return repr(eval(text, {"__builtins__": {}}, names))  # noqa: S307 (our own source)
    except Exception:  # anything else stays as written
        return expr


#: classes whose fields are documented once, in their docstring's Args: {name: module}
DECLARED_ONCE = {"UserCode": "undercap.models.recipe", "Plan": "undercap.train.spec"}


def _inherited_args(name: str) -> str:
    """The Args entries of the docstrings of `name` and of the classes declared once that
    it inherits, indented as in a class docstring."""
    cls = getattr(importlib.import_module(DECLARED_ONCE[name]), name)
    lines = []
    for klass in cls.__mro__:
        if klass.__name__ in DECLARED_ONCE:
            entries = inspect.cleandoc(klass.__doc__).split("Args:\n", 1)[1]
            lines += [line for line in entries.splitlines() if line.strip()]
    return "\n".join(lines)


class DefaultValues(Extension):
    def on_class_instance(self, *, cls: Class, **kwargs: Any) -> None:
        bases = [str(base).rpartition(".")[2] for base in cls.bases]
        inherited = [b for b in bases if b in DECLARED_ONCE]
        if inherited and cls.docstring is not None and "\nArgs:" in cls.docstring.value:
            args = "\n".join(_inherited_args(b) for b in inherited)
            cls.docstring.value = cls.docstring.value.rstrip() + "\n" + args

    def on_attribute_instance(self, *, attr: Attribute, **kwargs: Any) -> None:
        attr.value = _value(attr.value)

    def on_function_instance(self, *, func: Function, **kwargs: Any) -> None:
        for parameter in func.parameters:
            parameter.default = _value(parameter.default)
