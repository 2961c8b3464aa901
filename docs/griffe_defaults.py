"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings `extensions:`):
a default written as a name from `undercap.defaults` shows its value, so the reference
reads `max_steps: int = 50`, not `max_steps: int = defaults.PROFILE_MAX_STEPS` (in
dataclass fields and in function signatures); and a settings class that inherits the
user's code fields (`undercap.models.recipe.UserCode`, declared once) lists them in
its parameters table as its own, from UserCode's docstring.
`undercap.defaults` and `undercap.models.recipe` import nothing heavy."""

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


def _user_code_args() -> str:
    """The Args entries of UserCode's docstring, indented as in a class docstring."""
    doc = inspect.cleandoc(importlib.import_module("undercap.models.recipe").UserCode.__doc__)
    entries = doc.split("Args:\n", 1)[1]
    return "\n".join(line for line in entries.splitlines() if line.strip())


class DefaultValues(Extension):
    def on_class_instance(self, *, cls: Class, **kwargs: Any) -> None:
        inherits = any(str(base).endswith("UserCode") for base in cls.bases)
        if inherits and cls.docstring is not None and "\nArgs:" in cls.docstring.value:
            cls.docstring.value = cls.docstring.value.rstrip() + "\n" + _user_code_args()

    def on_attribute_instance(self, *, attr: Attribute, **kwargs: Any) -> None:
        attr.value = _value(attr.value)

    def on_function_instance(self, *, func: Function, **kwargs: Any) -> None:
        for parameter in func.parameters:
            parameter.default = _value(parameter.default)
