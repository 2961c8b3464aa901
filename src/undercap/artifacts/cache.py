"""The one content-addressed cache: profiles, pre-trained weights, r(b) runs and
device training runs all live here, keyed by everything that determines them.

Layout: `<root>/<kind>/<digest>/`, digest the SHA-256 of the canonical JSON of
`{"kind", "key"}`, holding the value files and, written last to seal the entry,
`key.json` (the full key). Writes are atomic; an entry without a matching `key.json`
(interrupted before the seal, or a hash prefix collision) is not a hit and is written
again, so interrupting any cached computation is safe.

Values are JSON (`load_json`/`store_json`) or files the producer writes (`path(name)`,
then `seal()`), e.g. torch weights. A key holds only what determines the value: runs
are keyed without the target they stop at, so a longer run answers a shorter request.
"""

import datetime as _dt
import hashlib
import json
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional

from undercap.artifacts.io import PathLike, load_json, save_json
from undercap.errors import ArtifactError

CACHE_SCHEMA = "undercap.cache/1"
KEY_FILE = "key.json"
VALUE_FILE = "value.json"
DIGEST_CHARS = 24  # 96 bits: collisions are checked against key.json anyway


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return asdict(x)
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (set, frozenset)):
        return sorted(x)
    raise TypeError(f"cache keys hold JSON-like values, not {type(x).__name__}")


def canonical(key: Any) -> Any:
    """The key as plain JSON values (dataclasses to dicts, paths to strings, tuples to
    lists), so a key read back from key.json compares equal to the one computed."""
    return json.loads(json.dumps(key, sort_keys=True, default=_jsonable))


def digest(kind: str, key: Mapping[str, Any]) -> str:
    text = json.dumps({"kind": kind, "key": canonical(key)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


class CacheEntry:
    """One cached value: a folder with its files and the key that names it."""

    def __init__(self, root: Path, kind: str, key: Mapping[str, Any]) -> None:
        self.kind = kind
        self.key = canonical(key)
        self.dir = root / kind / digest(kind, key)

    def path(self, name: str = VALUE_FILE) -> Path:
        """Where the value file `name` lives (the folder is created)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir / name

    @property
    def sealed(self) -> bool:
        """The entry is complete and is the one for this key."""
        try:
            saved = load_json(self.dir / KEY_FILE, what="cache key")
        except ArtifactError:
            return False
        return saved.get("schema") == CACHE_SCHEMA and saved.get("key") == self.key

    def seal(self) -> None:
        """Mark the value as complete: call after every value file is written."""
        from undercap import __version__

        save_json(
            self.path(KEY_FILE),
            {
                "schema": CACHE_SCHEMA,
                "kind": self.kind,
                "key": self.key,
                "undercap_version": __version__,
                "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            },
        )

    def load_json(self, name: str = VALUE_FILE) -> Optional[Dict[str, Any]]:
        """The stored JSON value, or None when the entry is not a (readable) hit."""
        if not self.sealed:
            return None
        try:
            return load_json(self.dir / name, what="cached value")
        except ArtifactError:
            return None

    def store_json(self, value: Mapping[str, Any], name: str = VALUE_FILE) -> None:
        save_json(self.path(name), value)
        self.seal()


class Cache:
    """A cache rooted at `root`; `Cache(None)` stores nothing (every lookup misses)."""

    def __init__(self, root: Optional[PathLike]) -> None:
        self.root = None if root is None else Path(root)

    def entry(self, kind: str, key: Mapping[str, Any]) -> Optional[CacheEntry]:
        return None if self.root is None else CacheEntry(self.root, kind, key)

    def json(
        self,
        kind: str,
        key: Mapping[str, Any],
        make: Callable[[], Mapping[str, Any]],
        *,
        on_hit: Optional[Callable[[CacheEntry], None]] = None,
    ) -> Dict[str, Any]:
        """The JSON value cached under (kind, key), or `make()` stored there."""
        entry = self.entry(kind, key)
        if entry is not None:
            hit = entry.load_json()
            if hit is not None:
                if on_hit is not None:
                    on_hit(entry)
                return hit
        value = dict(make())
        if entry is not None:
            entry.store_json(value)
        return value
