"""Shared fixtures. Tests run on 2 cores: tiny models, slices of data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("UNDERCAP_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    torch.set_num_threads(1)


@pytest.fixture
def shared_data() -> Path:
    """../shared/data when present (real datasets); skip cleanly when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def run_files(cache_root: Path) -> dict[str, Path]:
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
