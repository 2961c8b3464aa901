"""Reproducible training: deterministic torch for a loop (so a resumed run on CUDA
matches the uninterrupted one bit for bit, as on the CPU), and the test hook that kills
a run at a chosen step (train/loop/ uses both)."""

import contextlib
import os
from typing import Iterator, Optional

import torch

from undercap.errors import UndercapError

#: The test hook (docs/concepts/safety.md): a Trainer built while this environment
#: variable holds N SIGKILLs its own process after the step that takes it to N samples,
#: once that step's hooks are done (Trainer._test_kill). Not for production use.
KILL_AFTER_SAMPLES_ENV = "UNDERCAP_TEST_KILL_AFTER_SAMPLES"

#: cuBLAS's deterministic workspace setting (CUDA >= 10.2: "a fixed workspace
#: configuration is needed for reproducible results", cuBLAS docs "Results
#: reproducibility"; torch.use_deterministic_algorithms raises on cuBLAS calls
#: without it). Read by cuBLAS when torch first creates its handle: set before then.
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def set_cublas_workspace() -> None:
    """Set CUBLAS_WORKSPACE_CONFIG for deterministic cuBLAS unless the user set it.
    Call before the first CUDA computation of the process (PyTorch reads it once)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)


@contextlib.contextmanager
def deterministic_torch(enabled: bool) -> Iterator[None]:
    """Deterministic torch for the block, as PyTorch's reproducibility notes say:
    `torch.use_deterministic_algorithms(True)` (an op with no deterministic kernel
    raises rather than warns), cuDNN's deterministic algorithms without benchmarking,
    and cuBLAS's fixed workspace. The flags are process-wide: they are put back as
    they were on exit (the environment variable stays: cuBLAS read it already)."""
    if not enabled:
        yield
        return
    set_cublas_workspace()
    cudnn = torch.backends.cudnn
    before = (
        torch.are_deterministic_algorithms_enabled(),
        _warn_only(),
        cudnn.benchmark,
        cudnn.deterministic,
    )
    _use_deterministic_algorithms(True, warn_only=False)
    cudnn.benchmark, cudnn.deterministic = False, True
    try:
        yield
    except RuntimeError as e:
        if "does not have a deterministic implementation" not in str(e):
            raise
        raise UndercapError(
            f"--deterministic: {str(e).splitlines()[0]} (torch {torch.__version__}); drop "
            "--deterministic to train with it (a resumed run then matches an uninterrupted "
            "one within the run-to-run spread, not bit for bit)"
        ) from e
    finally:
        _use_deterministic_algorithms(before[0], warn_only=before[1])
        cudnn.benchmark, cudnn.deterministic = before[2], before[3]


def _warn_only() -> bool:
    # warn_only arrived in torch 1.11; torch 1.10 (JetPack 4.6) always raises
    flag = getattr(torch, "is_deterministic_algorithms_warn_only_enabled", None)
    return bool(flag()) if flag is not None else False


def _use_deterministic_algorithms(mode: bool, warn_only: bool) -> None:
    if hasattr(torch, "is_deterministic_algorithms_warn_only_enabled"):
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:  # torch < 1.11: no warn_only (raising, the mode used here, is its only one)
        torch.use_deterministic_algorithms(mode)


def kill_after_samples() -> Optional[int]:
    """The test hook's N (KILL_AFTER_SAMPLES_ENV), None when unset."""
    value = os.environ.get(KILL_AFTER_SAMPLES_ENV, "").strip()
    return int(value) if value else None
