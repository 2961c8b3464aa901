"""Your own training loop under a power cap: `undercap.capped(...)`.

    with undercap.open_device("sim:jetson-nano") as device, undercap.capped(
        device, "run-out/selection.json", model=model, input_shape=(3, 32, 32),
        target_accuracy=0.9,
    ) as cap:
        opt = torch.optim.Adam(model.parameters(), lr=cap.lr(1e-3))
        loader = DataLoader(train_set, batch_size=cap.batch_size, shuffle=True)
        while not cap.done:
            for x, y in loader:
                ...forward, backward, opt.step()...
                cap.step(len(x))          # device time, energy, the power guard
            with cap.paused():            # evaluation is not training time
                accuracy = evaluate(model)
            cap.report(accuracy)          # done once the target is reached
    print(cap.result())

The configuration comes from a selection (an artifact or its path: `undercap select
--json`, `run` or `compare` wrote it), or is chosen here from a power limit, a profile
and r(b) (Algorithm 1), or is given as a batch size and a frequency. Entering locks
the frequency (restored on every exit path, Ctrl-C and SIGTERM included), samples
power and runs the guard; `cap.lr(base_lr)` scales a learning rate from the largest
batch of the estimate by sqrt(b / b_max), as undercap's own training does (Sec. 4.2).
A simulated device needs the model and its input shape (or a Workload) to run its
clock; real devices measure the work itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

from undercap import defaults
from undercap.artifacts.selection import Selection, load_selection
from undercap.artifacts.workload import Workload
from undercap.devices.base import Device
from undercap.errors import UndercapError
from undercap.train.session import Session, current_freq_mhz


@dataclass(frozen=True)
class CappedResult:
    """What a capped loop did (times on the device's clock; virtual if simulated)."""

    reached: bool
    time_to_accuracy_s: Optional[float]
    train_time_s: float
    samples: int
    samples_to_target: Optional[int]
    energy_j: float
    peak_power_w: float
    mean_power_w: float
    batch_size: int
    freq_mhz_start: Optional[float]
    freq_mhz_final: Optional[float]
    power_limit_w: Optional[float]
    limit_exceeded: bool
    guard_events: tuple[dict[str, Any], ...]
    curve: tuple[tuple[int, float], ...]  # (samples, accuracy) per report
    pause_time_s: float  # waiting for power (a changing cap); part of time_to_accuracy_s
    segments: tuple[dict[str, Any], ...]  # per interval with one configuration
    simulated: bool
    device: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Choice:
    batch_size: int
    freq_mhz: Optional[float]
    power_limit_w: Optional[float]
    max_batch_size: Optional[int]


def _choose(
    selection: Union[Selection, str, Path, None],
    batch_size: Optional[int],
    freq_mhz: Optional[float],
    power_limit_w: Optional[float],
    profile: Any,
    relative: Optional[Mapping[int, float]],
    objective: Mapping[str, Any],
) -> _Choice:
    """From a selection, else the objective's choice (Algorithm 1 for time) on a
    profile and r(b), else given."""
    if selection is not None:
        sel = selection if isinstance(selection, Selection) else load_selection(selection)
        limit = sel.power_limit_w if power_limit_w is None else power_limit_w
        b_max = sel.training.get("max_batch_size")
        return _Choice(sel.batch_size, sel.freq_mhz, limit, b_max)
    if profile is not None and relative is not None:
        from undercap.select import choose

        choice = choose(_profile(profile), relative, power_limit_w, **objective)
        return _Choice(choice.batch_size, choice.freq_mhz, power_limit_w, max(relative))
    if batch_size is None:
        raise UndercapError(
            "capped() needs a selection, or a profile and r(b) (relative=) with a power "
            "limit, or a batch_size"
        )
    return _Choice(batch_size, freq_mhz, power_limit_w, None)


def _profile(profile: Any) -> Any:
    from undercap.artifacts.profile import Profile, load_profile

    return profile if isinstance(profile, Profile) else load_profile(profile)


def _follower(schedule: Any, profile: Any, relative: Any, objective: Mapping[str, Any]) -> Any:
    """A CapFollower for a cap that changes (train/follow.py)."""
    if schedule is None:
        return None
    if profile is None or relative is None:
        raise UndercapError("a power schedule needs profile= and relative= to re-select")
    from undercap.train.follow import CapFollower
    from undercap.train.schedule import Reselector, load_schedule

    budget = load_schedule(schedule) if isinstance(schedule, (str, Path)) else schedule
    n_max = objective.get("samples_bmax")
    kw = {"objective": objective.get("objective", "time"), "n_max": n_max}
    kw["energy_budget_j"] = objective.get("energy_budget_j")
    return CapFollower(budget, Reselector(_profile(profile), dict(relative), **kw))


class Capped:
    """The handle a capped loop works with (see the module docstring)."""

    def __init__(
        self,
        device: Device,
        choice: _Choice,
        *,
        target_accuracy: Optional[float],
        workload: Optional[Workload],
        guard_window_s: float,
        sample_rate_hz: float,
        follower: Any = None,
    ) -> None:
        if device.is_simulated and workload is None:
            raise UndercapError(
                f"{device.name} is simulated: pass model= and input_shape= (or workload=) "
                "so its clock can charge each step"
            )
        self.device, self.choice, self.target_accuracy = device, choice, target_accuracy
        self.session = Session(
            device,
            power_limit_w=choice.power_limit_w,
            freq_mhz=choice.freq_mhz,
            workload=workload,
            guard_window_s=guard_window_s,
            sample_rate_hz=sample_rate_hz,
            follower=follower,
            batch_size=choice.batch_size,
        )
        self.curve: list[tuple[int, float]] = []
        self.samples_to_target: Optional[int] = None
        self.time_to_accuracy_s: Optional[float] = None
        self._result: Optional[CappedResult] = None

    def __enter__(self) -> Capped:
        self.session.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        freq_final = current_freq_mhz(self.device)
        self.session.close()  # closes the last segment, stops sampling, restores clocks
        if self._result is None:
            self._result = self._finish(freq_final)

    # --- what the loop asks ---------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """The batch size to use now (a changing cap may switch it after a step)."""
        return int(self.session.batch_size or self.choice.batch_size)

    @property
    def freq_mhz(self) -> Optional[float]:
        return self.session.locked_mhz()

    @property
    def power_limit_w(self) -> Optional[float]:
        return self.session.power_limit_w

    def lr(self, base_lr: float) -> float:
        """`base_lr` (the learning rate at the estimate's largest batch) scaled by
        sqrt(b / b_max) for the current batch size (paper Sec. 4.2)."""
        from math import sqrt

        b_max = self.choice.max_batch_size or self.batch_size
        return base_lr * sqrt(self.batch_size / b_max)

    @property
    def samples(self) -> int:
        """Samples trained so far."""
        return self.session.samples

    @property
    def done(self) -> bool:
        return self.samples_to_target is not None

    # --- what the loop tells ----------------------------------------------------------
    def step(self, samples: Optional[int] = None) -> None:
        """After every optimizer step: it trained on `samples` (default the batch size)."""
        self.session.step(self.batch_size if samples is None else int(samples))

    def paused(self) -> Any:
        """A block whose work (evaluation, saving) is not charged to training."""
        return self.session.paused()

    def report(self, accuracy: float) -> bool:
        """Record an evaluation; True once the target accuracy has been reached."""
        samples = self.session.samples
        self.curve.append((samples, float(accuracy)))
        target = self.target_accuracy
        if self.samples_to_target is None and target is not None and accuracy >= target:
            self.samples_to_target = samples
            self.time_to_accuracy_s = self.session.schedule_s  # training + waiting for power
        return self.done

    # --- what happened ---------------------------------------------------------------
    def result(self) -> CappedResult:
        """The totals so far (or of the whole loop, after the `with` block)."""
        return self._result if self._result is not None else self._finish()

    def _finish(self, freq_final: Optional[float] = None) -> CappedResult:
        acc = self.session.snapshot()
        t, limit = acc["train_time_s"], self.choice.power_limit_w
        follower = self.session.follower
        segments = tuple(follower.segments) if follower is not None else ()
        return CappedResult(
            reached=self.done,
            time_to_accuracy_s=self.time_to_accuracy_s,
            train_time_s=t,
            samples=self.session.samples,
            samples_to_target=self.samples_to_target,
            energy_j=acc["energy_j"],
            peak_power_w=acc["peak_w"],
            mean_power_w=acc["energy_j"] / t if t > 0 else 0.0,
            batch_size=self.batch_size,
            freq_mhz_start=self.session.freq_start,
            freq_mhz_final=freq_final if freq_final is not None else current_freq_mhz(self.device),
            power_limit_w=limit,
            limit_exceeded=limit is not None and acc["peak_w"] > limit,
            guard_events=tuple(e.to_dict() for e in self.session.guard.events),
            curve=tuple(self.curve),
            pause_time_s=acc["pause_time_s"],
            segments=segments,
            simulated=self.device.is_simulated,
            device=self.device.name,
        )


def capped(
    device: Device,
    selection: Union[Selection, str, Path, None] = None,
    *,
    batch_size: Optional[int] = None,
    freq_mhz: Optional[float] = None,
    power_limit_w: Optional[float] = None,
    profile: Any = None,
    relative: Optional[Mapping[int, float]] = None,
    target_accuracy: Optional[float] = None,
    model: Any = None,
    input_shape: Optional[Sequence[int]] = None,
    task: Optional[str] = None,
    workload: Optional[Workload] = None,
    guard_window_s: float = defaults.GUARD_WINDOW_S,
    sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
    samples_bmax: Optional[float] = None,
    power_schedule: Any = None,
) -> Capped:
    """A context manager for a training loop of your own under a power cap (module
    docstring). `task` ("classification" or "next-token") tells which inputs the
    model takes when its workload is counted for a simulated device. With a profile
    and r(b), `objective` ("time", "energy", "edp") and `energy_budget_j` (with
    `samples_bmax`, N(b_max)) say what to minimise (select/objectives.py); a
    `power_schedule` (a schedule.PowerSchedule, LiveSource or CSV path) changes the
    cap during training and re-selects at every change: re-read `batch_size` and
    `lr()` after each step."""
    obj = {"objective": objective, "energy_budget_j": energy_budget_j, "samples_bmax": samples_bmax}
    choice = _choose(selection, batch_size, freq_mhz, power_limit_w, profile, relative, obj)
    follower = _follower(power_schedule, profile, relative, obj)
    if workload is None and model is not None and device.is_simulated:
        if input_shape is None:
            raise UndercapError("capped(model=...) on a simulated device needs input_shape=")
        from undercap.models.workload import workload_of

        workload = workload_of(model, type(model).__name__, input_shape, task)
    if workload is not None:
        device.check_fits(workload, choice.batch_size)
    return Capped(
        device,
        choice,
        target_accuracy=target_accuracy,
        workload=workload,
        guard_window_s=guard_window_s,
        sample_rate_hz=sample_rate_hz,
        follower=follower,
    )
