"""Small builders for profile/efficiency fixtures used by the selection tests."""

from typing import Dict, Iterable, Mapping, Optional, Tuple

from undercap.artifacts import Efficiency, Profile, ProfileRow


def make_profile(
    table: Mapping[Tuple[int, float], Tuple[float, float]],
    *,
    model: str = "resnet18",
    device: str = "sim:jetson-nano",
    simulated: bool = True,
    unfit: Iterable[int] = (),
) -> Profile:
    """table: {(b, f_mhz): (time_per_sample_s, peak_power_w)}."""
    rows = tuple(ProfileRow(b, float(f), t, p, 0.8 * p) for (b, f), (t, p) in sorted(table.items()))
    return Profile(
        device={"name": device, "is_simulated": simulated},
        model=model,
        input_shape=(3, 32, 32),
        rows=rows,
        simulated=simulated,
        unfit_batch_sizes=tuple(unfit),
    )


def make_efficiency(
    relative: Mapping[int, float],
    *,
    never: Iterable[int] = (),
    model: str = "resnet18",
    n_max: int = 10_000,
) -> Efficiency:
    """An efficiency artifact with r(b) as given; `never` batch sizes never reached
    the target (null runs, no r)."""
    runs: Dict[int, Tuple[Optional[int], ...]] = {
        b: (round(r * n_max), round(r * n_max)) for b, r in relative.items()
    }
    runs.update({b: (None, None) for b in never})
    return Efficiency(
        model=model,
        dataset="digits",
        target_accuracy=0.9,
        samples_to_target=runs,
        relative=dict(relative),
    )


def figure1_profile(**kw: object) -> Profile:
    """A Figure-1-like table: power grows with b and f, time per sample falls with
    both, saturating in b (GPU occupancy)."""
    table = {}
    for b in (8, 16, 32, 64):
        for f in (200.0, 400.0, 600.0, 800.0):
            t = (1.0 / f) * (1.0 + 32.0 / b) * 1e-1
            p = 2.0 + 0.004 * f * (1.0 + b / 64.0)
            table[(b, f)] = (t, p)
    return make_profile(table, **kw)  # type: ignore[arg-type]
