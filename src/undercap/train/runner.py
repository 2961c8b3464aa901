"""Training to a target accuracy on the device, under a power limit (`undercap train`).

The loop (loop.Trainer) fine-tunes the pre-trained model with the chosen batch size
and the learning rate scaled from the largest batch by sqrt(b / b_max), exactly as
in the efficiency estimate (paper Sec. 4.2); it runs inside a session.Session, which
locks the chosen frequency (restored on every exit path), samples power, holds the
guard and accounts device time and energy per step. Evaluation is not charged to
training: it happens while the session is paused, and is reported beside it, as
device time (`eval_time_s`: a simulated device's model of the forward passes, the
wall clock on hardware) and host time.

Checkpoints (checkpoint.py) are written at step boundaries where no evaluation is
pending, or right after an evaluation, so a resumed run repeats exactly the steps
and evaluations the killed one would have made.
"""

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Union

from undercap import defaults
from undercap.artifacts.provenance import provenance
from undercap.artifacts.train_result import TrainResult
from undercap.devices.base import Device
from undercap.errors import CapExceededError, PowerWaitError, UndercapError
from undercap.report.progress import sample_bar
from undercap.train.cap import Cap, cap_from, cap_notes, changes
from undercap.train.checkpoint import cap_change_note, checkpoint_to_resume
from undercap.train.checkpoint import save_checkpoint as _save
from undercap.train.evallog import EvalLog, eval_row
from undercap.train.follow import CapFollower
from undercap.train.guard import finish_run
from undercap.train.online import OnlineRule, say
from undercap.train.schedule import Reselector
from undercap.train.session import Session, current_freq_mhz
from undercap.train.setup import RunSetup
from undercap.train.spec import RunOptions, TrainSpec

if TYPE_CHECKING:
    from undercap.data.base import Splits
    from undercap.train.loop import EvalPoint, Trainer

__all__ = ["RunOptions", "TrainResult", "TrainSpec", "train", "train_on_device"]


@dataclass(frozen=True)
class _Checkpointing:
    """What a checkpoint holds besides the loop's and the session's state: the run's
    identity (setup.RunSetup.config), the clock it started at and its warnings."""

    options: RunOptions
    config: Dict[str, Any]
    freq_mhz_start: Optional[float]
    warnings: List[str]
    resumed_at: Optional[int] = None  # the samples a resumed run's checkpoint holds


class _Hooks:
    """The loop's on_step / on_eval: steps to the session, evaluation paused,
    checkpoints when due, the progress bar."""

    def __init__(
        self,
        session: Session,
        ckpt: _Checkpointing,
        bar: Any,
        spec: TrainSpec,
        online: Optional[OnlineRule] = None,
    ) -> None:
        self.session, self.ckpt, self.bar, self.spec = session, ckpt, bar, spec
        self.online = online  # train/online.py: re-selects at evaluations (--online)
        # evallog.EvalLog: a row per evaluation
        self.eval_log = EvalLog.open(
            ckpt.options.eval_log, ckpt.options.tensorboard_dir, ckpt.resumed_at
        )
        self.budget_s = ckpt.options.time_budget_s  # a race's lane: device seconds (race.py)
        self._eval_t0 = time.perf_counter()  # host clock when the pending evaluation began

    def switch(self, trainer: "Trainer", batch_size: int) -> None:
        """Train with `batch_size` from the next step on (a changing cap or the guard
        moved there: session.on_switch), with the learning rate re-scaled by the same
        sqrt rule; the optimizer state and the data order stay."""
        if batch_size != trainer.cfg.batch_size:
            self.session.device.check_fits(self.session.workload, batch_size)
            trainer.set_batch_size(batch_size, self.spec.lr_for(batch_size))

    def _online(self, trainer: "Trainer", point: "EvalPoint") -> None:
        """The online rule's look at this whole evaluation; its switch takes the path a
        cap-driven one does (session.reselect -> self.switch), at this step boundary."""
        rule, session = self.online, self.session
        if rule is None:
            return
        b = trainer.cfg.batch_size
        d = rule.observe(point.accuracy, b, session.power_limit_w, session.guard.events)
        if d is not None and d.switch:
            say(self.bar, rule.record(d, b, trainer.samples, applied=True))
            session.reselect(rule.operating_point(d, session.power_limit_w))

    def on_step(self, trainer: "Trainer", batch: int) -> None:
        if self.online is not None:  # the batch size this step trained at
            self.online.count(trainer.cfg.batch_size, batch)
        self.session.step(batch)  # a switch of the batch size reaches self.switch
        self.bar.update(batch)
        spent = self.budget_s is not None and self.session.acc.train_time_s >= self.budget_s
        if trainer.eval_due(trainer.samples - batch):
            self.session.pause()  # evaluation follows; on_eval resumes
            self._eval_t0 = time.perf_counter()
        elif spent:  # a race's lane ends here: judged on an evaluation at its budget
            self.session.pause()
            self._eval_t0 = time.perf_counter()
            trainer.evaluate()
        elif self._checkpoint_due(trainer):
            with self.session.paused():  # writing the checkpoint is not training either
                self.save(trainer)
        trainer.stop = trainer.stop or spent

    def on_eval(self, trainer: "Trainer", point: "EvalPoint") -> None:
        wall = time.perf_counter() - self._eval_t0
        self.session.add_eval(trainer.eval_items, trainer.cfg.eval_batch_size, wall)
        self._show(f"{point.accuracy:.3f}")
        if self.eval_log is not None:
            self.eval_log.write(eval_row(self.session, point.accuracy, {"loss": point.loss}))
        self._online(trainer, point)
        if self._checkpoint_due(trainer):
            self.save(trainer)
        self.session.resume()

    def on_screen(self, trainer: "Trainer", items: int) -> None:
        """A sequential look (evalplan.py) that stopped after `items` held-out items,
        ruling its grid point out: charged as evaluation, and the pause ends here (no
        whole evaluation follows)."""
        wall = time.perf_counter() - self._eval_t0
        self.session.add_eval(items, trainer.cfg.eval_batch_size, wall)
        self._show("<target")
        if self._checkpoint_due(trainer):
            self.save(trainer)
        self.session.resume()

    def _show(self, accuracy: str) -> None:
        """The bar's postfix: the last look and evaluation's share of training time."""
        acc = self.session.acc
        share = acc.eval_time_s / acc.train_time_s if acc.train_time_s > 0 else 0.0
        self.bar.set_postfix(acc=accuracy, eval=f"{share:.0%}", refresh=False)

    def close(self) -> None:
        self.bar.close()
        if self.eval_log is not None:
            self.eval_log.close()

    def _checkpoint_due(self, trainer: "Trainer") -> bool:
        o, acc = self.ckpt.options, self.session.acc
        if o.checkpoint_dir is None:
            return False
        by_time = o.checkpoint_every_s is not None and (
            acc.train_time_s - acc.last_ckpt_time_s >= o.checkpoint_every_s
        )
        by_samples = o.checkpoint_every_samples is not None and (
            trainer.samples - acc.last_ckpt_samples >= o.checkpoint_every_samples
        )
        return by_time or by_samples

    def save(self, trainer: "Trainer") -> None:
        acc = self.session.acc
        acc.last_ckpt_time_s, acc.last_ckpt_samples = acc.train_time_s, trainer.samples
        _save(
            self.ckpt.options.checkpoint_dir,
            {
                "config": self.ckpt.config,
                "trainer": trainer.state_dict(),
                "accounts": self.session.snapshot(),
                "freq_mhz": self.session.locked_mhz(),
                "guard_events": [e.to_dict() for e in self.session.guard.events],
                "freq_mhz_start": self.ckpt.freq_mhz_start,
                "warnings": list(self.ckpt.warnings),
                "cap": self.spec.cap.source,  # a resume under another cap says so
                "follower": None
                if self.session.follower is None
                else self.session.follower.state(self.session),
                "segments": self.session.segment_state(),
                "online": None if self.online is None else self.online.state(),
            },
        )


def _loop(trainer: "Trainer", hooks: _Hooks, options: RunOptions) -> Any:
    """The loop to its end, checkpointed at the end; a run stopped for power (over its
    cap, guard.py, or out of patience waiting for one, follow.py) is checkpointed first,
    and its message says how to go on (`options.resume_hint`, `wait_hint`)."""
    session, ckpt_dir = hooks.session, options.checkpoint_dir
    try:
        result = trainer.run()
        session.pause()
        if ckpt_dir is not None:
            hooks.save(trainer)
        return result
    except CapExceededError as e:
        if ckpt_dir is None:
            raise
        with session.paused():
            hooks.save(trainer)
        hint = options.wait_hint if isinstance(e, PowerWaitError) else options.resume_hint
        raise type(e)(
            f"{e}. Checkpointed at {trainer.samples} samples in {ckpt_dir}: {hint}"
        ) from e
    finally:
        hooks.close()


def train(
    device: Device,
    spec: TrainSpec,
    data: "Splits",
    options: Optional[RunOptions] = None,
    reselector: Optional[Reselector] = None,
    online: Optional[OnlineRule] = None,
) -> TrainResult:
    """Train `spec` on `data` on `device`, kept as `options` say: the loop inside a
    session that locks the clock (or not, read-only), holds the cap and accounts the
    device's time and energy. A cap that changes (`spec.cap`) needs the `reselector`
    that picks (b, f) at every change; `spec.online` the `online` rule, made from a
    selection's online block (the proxies' curves)."""
    if changes(spec.cap) != (reselector is not None):
        raise UndercapError("a power schedule needs a reselector (a profile and r(b)), and back")
    if spec.online != (online is not None):
        raise UndercapError("spec.online needs online= (a selection's online rule), and back")
    options = options or RunOptions()
    setup = RunSetup.build(device, spec, data)
    saved = checkpoint_to_resume(options.checkpoint_dir, options.resume, setup.config)
    follower = None
    if reselector is not None:
        follower = CapFollower(spec.cap, reselector, saved=saved.get("follower") if saved else None)
    if online is not None and saved is not None:
        online.restore(saved.get("online") or {})
    return _run(device, setup, saved, options, follower, online)


def check_resumable(device_name: str, spec: TrainSpec, data: "Splits", options: RunOptions) -> None:
    """Refuse now, before anything is written or the device touched, a run whose
    checkpoint folder it cannot use (another run's checkpoint, --resume with none, a
    checkpoint without --resume): what `train` would refuse after the set-up."""
    from undercap.train.setup import run_identity

    identity = run_identity(spec, data, device_name)
    checkpoint_to_resume(options.checkpoint_dir, options.resume, identity)


def train_on_device(
    device: Device,
    model_name: str,
    data: "Splits",
    *,
    checkpoint_dir: Optional[Union[str, Path]] = None,
    checkpoint_every_s: Optional[float] = defaults.CHECKPOINT_EVERY_S,
    checkpoint_every_samples: Optional[int] = None,
    resume: bool = False,
    sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
    progress: bool = True,
    power_limit_w: Optional[float] = None,
    power_schedule: Optional[Cap] = None,
    reselector: Optional[Reselector] = None,
    eval_log: Optional[Union[str, Path]] = None,
    tensorboard_dir: Optional[Union[str, Path]] = None,
    time_budget_s: Optional[float] = None,
    **spec: Any,
) -> TrainResult:
    """Fine-tune `model_name` on `data` on `device` until the target accuracy (or the
    sample budget), with the clocks locked at `freq_mhz` (None: leave them) and the
    power guard holding `power_limit_w`. `spec` takes the other fields of
    [TrainSpec][undercap.train.spec.TrainSpec] (`batch_size` and `target_accuracy`
    are required). The learning rate is scaled from the largest batch by
    sqrt(b / b_max), as in the r(b) estimate. Evaluation runs with the device's
    accounting paused: it is reported as host time, not as training.

    With a `power_schedule` (a schedule or a live source of the cap) the cap changes
    during training, and the `reselector` picks (b, f) again at every change.
    `eval_log` (a .csv or .jsonl path) and `tensorboard_dir` log every evaluation.
    `time_budget_s` ends the run, with an evaluation, once it trained that much device
    time (a lane of a race; its checkpoint continues as an ordinary run). Checkpoints
    go to `checkpoint_dir` every `checkpoint_every_s` device seconds (or
    `checkpoint_every_samples`), and `resume=True` continues a killed run exactly.

    The keyword form of [train][undercap.train.runner.train], which takes the two
    values this builds: the TrainSpec and the RunOptions."""
    cap = cap_from(power_limit_w, power_schedule)
    options = RunOptions(
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_s=checkpoint_every_s,
        checkpoint_every_samples=checkpoint_every_samples,
        resume=resume,
        sample_rate_hz=sample_rate_hz,
        progress=progress,
        eval_log=eval_log,
        tensorboard_dir=tensorboard_dir,
        time_budget_s=time_budget_s,
    )
    return train(device, TrainSpec(model=model_name, cap=cap, **spec), data, options, reselector)


@contextlib.contextmanager
def _entered(
    session: Session, saved: Optional[Dict[str, Any]], options: RunOptions
) -> Iterator[Session]:
    """The session entered: a changing cap that gives up waiting for power before the
    first step says what to do (the checkpoint, if any, is as it was)."""
    try:
        session.__enter__()
    except PowerWaitError as e:
        hint = (
            options.wait_hint
            if saved
            else "nothing was trained yet: run it again once power is back, or with a "
            "longer --max-wait-s"
        )
        raise PowerWaitError(f"{e}. {hint}") from e
    try:
        yield session
    finally:
        session.__exit__(None, None, None)


def _run(
    device: Device,
    setup: RunSetup,
    saved: Optional[Dict[str, Any]],
    options: RunOptions,
    follower: Optional[CapFollower],
    online: Optional[OnlineRule] = None,
) -> TrainResult:
    spec, trainer = setup.spec, setup.trainer
    if saved is not None:
        trainer.load_state_dict(saved["trainer"])
    warnings = list(saved.get("warnings", [])) if saved else list(setup.warnings)
    new_cap = cap_change_note(saved, spec.cap.source)
    if new_cap:
        warnings.append(new_cap)
    device.check_fits(setup.workload, spec.batch_size)
    session = Session(
        device,
        power_limit_w=spec.power_limit_w,
        # on resume, continue at the frequency the guard had left, not the requested
        # one; under a new cap, from the requested one again (the guard steps it down)
        freq_mhz=saved["freq_mhz"] if saved and not new_cap else spec.freq_mhz,
        workload=setup.workload,
        guard_window_s=spec.guard_window_s,
        sample_rate_hz=options.sample_rate_hz,
        cuda_sync=setup.cuda_sync,
        saved=saved,
        samples=trainer.samples,
        follower=follower,
        batch_size=trainer.cfg.batch_size,
        batch_ladder=spec.batch_ladder,
    )
    with _entered(session, saved, options):
        bar = sample_bar(
            spec.max_samples, f"train b={spec.batch_size}", options.progress, trainer.samples
        )
        freq_start = saved["freq_mhz_start"] if saved else session.freq_start
        resumed_at = int(saved["trainer"]["samples"]) if saved else None
        ckpt = _Checkpointing(options, setup.config, freq_start, warnings, resumed_at)
        hooks = _Hooks(session, ckpt, bar, spec, online)
        if session.batch_size is not None:  # a changing cap chose the first configuration
            hooks.switch(trainer, session.batch_size)
        session.on_switch = lambda b: hooks.switch(trainer, b)
        trainer.on_step, trainer.on_eval = hooks.on_step, hooks.on_eval
        if trainer.plan is not None:
            trainer.plan.on_screen = lambda m: hooks.on_screen(trainer, m)
        loop_result = _loop(trainer, hooks, options)
        freq_final, end_notes = current_freq_mhz(device), finish_run(session)  # guard.py
    acc = session.snapshot()
    return setup.result(
        loop_result,
        acc,
        guard=session.guard,
        freq_start=freq_start,
        freq_final=freq_final,
        energy_source=session.energy_source,
        warnings=warnings
        + [n for n in session.notes + cap_notes(spec.cap) if n not in warnings]
        + end_notes,
        resumed_from=int(saved["trainer"]["samples"]) if saved else None,
        provenance=provenance(seed=spec.seed, device=device.name),
        segments=session.segments(),
        schedule=None if follower is None else spec.cap.source,
        clocks=session.clocks,
    )
