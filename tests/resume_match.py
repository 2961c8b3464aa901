"""What "a resumed run matches the uninterrupted one" means, for the kill-and-resume
tests (test_train.py, test_train_cli.py; docs/_drafts/resume.md says it for users).

* On the CPU, and on CUDA with --deterministic: exactly. Same evaluations, same
  accuracies, same losses bit for bit, the same samples to target and steps. The loop
  restores model, optimizer, data order and RNG (train/loop/), and these kernels
  sum in a fixed order (the CPU at a fixed number of threads; on CUDA
  torch.use_deterministic_algorithms, cuDNN without benchmarking, a fixed cuBLAS
  workspace).
* On CUDA without --deterministic: within the run-to-run spread of two uninterrupted
  runs, measured by the test (`again`, a second uninterrupted run). cuDNN and cuBLAS
  may pick kernels that add in another order (atomics, split reductions), so float32
  results differ in the last bits from run to run, and training carries those
  differences forward and grows them. A fixed bound cannot stand in: on an H200 one
  resumed run's loss differed from the uninterrupted one's in the 7th digit after ~50
  steps, and on another day by more than 1e-3 relative (the bound then in force).
  The bound per evaluation is `SPREAD_X` times the largest difference between the
  two uninterrupted runs over the whole curve, and at least `ACC_SAMPLES` test
  samples' predictions and `LOSS_REL` of a loss; the evaluations fall at the same
  sample counts (they are set by samples, not by time), and the run reaches the
  target where the uninterrupted run's curve, moved by that bound, says it may.
"""

from typing import Any, Mapping, Optional, Sequence, Tuple

import pytest

ACC_SAMPLES = 2  # test samples whose prediction may flip at least (one seen on an H200)
LOSS_REL = 1e-3  # relative loss difference per evaluation at least
SPREAD_X = 4.0  # times the largest difference between two uninterrupted runs


def exact_expected(torch_device: str, deterministic: bool) -> bool:
    """The rule: bit for bit on the CPU or with --deterministic, else within bounds."""
    return torch_device == "cpu" or deterministic


def _point(p: Any) -> Tuple[int, float, float]:
    if isinstance(p, Mapping):
        return int(p["samples"]), float(p["accuracy"]), float(p["loss"])
    return int(p.samples), float(p.accuracy), float(p.loss)


def assert_resumed_matches(
    resumed: Any,
    full: Any,
    *,
    exact: bool,
    n_eval: int,
    target: Optional[float],
    again: Any = None,
) -> None:
    """`resumed`, `full` and `again` (a second uninterrupted run, needed where the
    match is not exact): train results (TrainResult objects or their dicts)."""
    get = (lambda r, k: r[k]) if isinstance(resumed, Mapping) else getattr
    rc = [_point(p) for p in get(resumed, "curve")]
    fc = [_point(p) for p in get(full, "curve")]
    r_stt, f_stt = get(resumed, "samples_to_target"), get(full, "samples_to_target")
    if exact:
        assert rc == fc
        assert r_stt == f_stt
        assert get(resumed, "steps") == get(full, "steps")
        return
    assert again is not None, "not bit for bit: pass a second uninterrupted run (again=)"
    tol, loss_rel = _spread(fc, [_point(p) for p in get(again, "curve")], n_eval)
    assert [s for s, _, _ in rc[: len(fc)]] == [s for s, _, _ in fc[: len(rc)]]
    for (s, acc, loss), (_, f_acc, f_loss) in zip(rc, fc):
        assert abs(acc - f_acc) <= tol + 1e-12, f"accuracy at {s} samples"
        assert loss == pytest.approx(f_loss, rel=loss_rel), f"loss at {s} samples"
    if target is None or f_stt is None:
        return
    assert r_stt is not None, "the resumed run missed a target the uninterrupted one met"
    assert r_stt >= _first_at(fc, target - tol), "reached the target too early"
    latest = _first_at(fc, target + tol)
    assert latest is None or r_stt <= latest, "reached the target too late"


def _spread(
    full: Sequence[Tuple[int, float, float]], again: Sequence[Tuple[int, float, float]], n: int
) -> Tuple[float, float]:
    """The bounds (accuracy, relative loss): SPREAD_X times the largest difference
    between two uninterrupted runs, at least ACC_SAMPLES / n and LOSS_REL."""
    d_acc = max((abs(a[1] - b[1]) for a, b in zip(full, again)), default=0.0)
    d_loss = max((abs(a[2] - b[2]) / abs(b[2]) for a, b in zip(full, again) if b[2]), default=0.0)
    return max(ACC_SAMPLES / n, SPREAD_X * d_acc), max(LOSS_REL, SPREAD_X * d_loss)


def _first_at(curve: Sequence[Tuple[int, float, float]], accuracy: float) -> Optional[int]:
    return next((s for s, acc, _ in curve if acc >= accuracy), None)
