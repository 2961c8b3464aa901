"""Shared fixtures. Tests run on 2 cores: tiny models, slices of data."""

import os
import sys
from pathlib import Path
from typing import Dict, List

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parents[1]


def _data_dir() -> Path:
    """The real datasets: $UNDERCAP_DATA_DIR, else data/ (scripts/make_data.py writes
    there), else a data folder beside the repository (benchmarks/harness.py: the same)."""
    for var in ("UNDERCAP_DATA_DIR", "UNDERCAP_SHARED_DATA"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return REPO / "data" if (REPO / "data").is_dir() else REPO.parent / "shared" / "data"


SHARED_DATA = _data_dir()


#: what the server side needs; JetPack 4.6's Python 3.6 runs the device side only
SERVER_PYTHON = sys.version_info >= (3, 8)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """`@pytest.mark.server`: the test runs the server side (estimate, select, run,
    compare, the user-loop API), skipped on a board's Python (tests/device_path.py)."""
    if SERVER_PYTHON:
        return
    skip = pytest.mark.skip(reason="the server side needs Python >= 3.8")
    for item in items:
        if "server" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    torch.set_num_threads(1)


@pytest.fixture
def shared_data() -> Path:
    """The real datasets when present; skip cleanly when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no data at {SHARED_DATA} (python scripts/make_data.py all)")
    return SHARED_DATA


def run_files(cache_root: Path) -> Dict[str, Path]:
    """The estimate runs cached under `cache_root`, named like `b8-seed1.json`: sealed
    entries only (key.json is written after value.json, artifacts/cache.py), so a test
    that kills an estimate once a run shows here has really lost nothing."""
    import json

    out = {}
    for value in sorted(Path(cache_root).glob("estimate-run/*/value.json")):
        if not (value.parent / "key.json").is_file():
            continue
        rec = json.loads(value.read_text())
        out[f"b{rec['batch_size']}-seed{rec['seed']}.json"] = value
    return out
