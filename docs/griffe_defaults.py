"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings `extensions:`):
a default written as a name from `undercap.defaults` shows its value, so the reference
reads `max_steps: int = 50`, not `max_steps: int = defaults.PROFILE_MAX_STEPS` (in
dataclass fields and in function signatures).
`undercap.defaults` imports nothing, so reading it costs nothing."""

from __future__ import annotations

import importlib
from typing import Any

from griffe import Attribute, Extension, Function


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


class DefaultValues(Extension):
    def on_attribute_instance(self, *, attr: Attribute, **kwargs: Any) -> None:
        attr.value = _value(attr.value)

    def on_function_instance(self, *, func: Function, **kwargs: Any) -> None:
        for parameter in func.parameters:
            parameter.default = _value(parameter.default)
