"""Users' own code by import path: `package.module:attr` or `path/to/file.py:attr`.

One loader for every place undercap takes code from the user (models, datasets,
losses, metrics). Problems in the user's code (the file or module is missing, it
raises on import, the name is not there or is not callable, the factory raises)
become one UndercapError line that names the file and what was expected, chained
with `from e` so `--debug` shows the user's traceback. Torch-free.
"""

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from undercap.errors import UndercapError

_FILE_MODULES: Dict[str, Any] = {}  # resolved file path -> its module (load once)


def is_import_path(text: str) -> bool:
    """`pkg.mod:attr` or `some/file.py:attr` (a built-in name has no colon)."""
    module, sep, attr = text.rpartition(":")
    return bool(sep and module and attr.isidentifier())


def split(text: str, what: str) -> Tuple[str, str]:
    if not is_import_path(text):
        raise UndercapError(
            f"{what} {text!r} is not an import path: use package.module:function or "
            "path/to/file.py:function"
        )
    module, _, attr = text.rpartition(":")
    return module, attr


def _load_file(module: str, text: str, what: str) -> Any:
    path = Path(module)
    key = str(path.resolve())
    if key in _FILE_MODULES:
        return _FILE_MODULES[key]
    if not path.is_file():
        raise UndercapError(f"{what} {text!r}: file {path} does not exist")
    name = "undercap_user_" + hashlib.sha256(key.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UndercapError(f"{what} {text!r}: cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so pickling (worker processes) can find its classes
    # the file's own folder first, so it can import its neighbours
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise UndercapError(f"{what} {text!r}: importing {path} failed: {_brief(e)}") from e
    finally:
        sys.path.remove(str(path.resolve().parent))
    _FILE_MODULES[key] = module
    return module


def _load_module(module: str, text: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as e:
        if isinstance(e, ModuleNotFoundError) and e.name and module.startswith(e.name):
            raise UndercapError(
                f"{what} {text!r}: no module named {e.name!r} (is it installed, or did you "
                "mean a file path like path/to/file.py:function?)"
            ) from e
        raise UndercapError(f"{what} {text!r}: importing {module} failed: {_brief(e)}") from e


def load_callable(text: str, what: str) -> Callable[..., Any]:
    """The callable named by an import path (file paths end in .py)."""
    module, attr = split(text, what)
    load = _load_file if module.endswith(".py") else _load_module
    mod = load(module, text, what)
    where = getattr(mod, "__file__", module)
    if not hasattr(mod, attr):
        raise UndercapError(f"{what} {text!r}: {where} has no {attr!r}")
    fn = getattr(mod, attr)
    if not callable(fn):
        raise UndercapError(
            f"{what} {text!r}: {attr} in {where} is a {type(fn).__name__}, not a callable"
        )
    return fn


def source_file(text: str) -> Optional[str]:
    """The file an import path's code lives in (for messages and cache keys)."""
    module, _ = split(text, "import path")
    if module.endswith(".py"):
        return str(Path(module).resolve())
    spec = importlib.util.find_spec(module)
    return None if spec is None else spec.origin


def code_digest(*texts: Optional[str]) -> Optional[str]:
    """SHA-256 over the source files of the import paths among `texts` (built-in names
    and None are skipped), so cached results of users' code are redone when it changes.
    None when none of them is an import path."""
    files = []
    for text in texts:
        t = text[3:] if text and text.startswith("py:") else text
        if t and is_import_path(t):
            files.append(source_file(t) or t)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode())
        # an installed package without a readable source: its path stands in
        with contextlib.suppress(OSError):
            h.update(Path(f).read_bytes())
    return h.hexdigest()


def call_with_supported(fn: Callable[..., Any], text: str, what: str, **kwargs: Any) -> Any:
    """Call `fn` with the keyword arguments its signature accepts (all of them when it
    takes **kwargs), so a factory may take none, some or all of them."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: call bare
        params = ()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        chosen = dict(kwargs)
    else:
        names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        chosen = {k: v for k, v in kwargs.items() if k in names}
    try:
        return fn(**chosen)
    except UndercapError:
        raise
    except Exception as e:
        args = ", ".join(f"{k}={v!r}" for k, v in chosen.items())
        raise UndercapError(f"{what} {text!r} raised when called as ({args}): {_brief(e)}") from e


def _brief(e: BaseException) -> str:
    """`Type: first line of the message`, to keep errors on one line."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__
