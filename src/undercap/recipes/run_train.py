"""How `undercap run` trains a selection on the device: one run at the selection's
(b, f) in a folder of its own (its checkpoint, its evaluation log), so a re-run
resumes it; the winner's run, or a race lane's, ended after a device-time budget
(recipes/race.py). The TrainSpec comes whole from the selection (its choice and its
training block), so `run` and `train --from-selection` train one way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from undercap.artifacts.selection import Selection
from undercap.artifacts.train_result import TrainResult
from undercap.data.spec import DataSpec
from undercap.errors import ArtifactError, UndercapError
from undercap.train.cap import Cap, changes
from undercap.train.schedule import Reselector, reselector_for
from undercap.train.spec import RunOptions, TrainSpec


@dataclass(frozen=True)
class SelectionTraining:
    """One device run at a selection's (b, f) on `target`, on the device opened by
    name, under `cap` (one that changes re-selects with `reselector`)."""

    device: str
    device_options: Mapping[str, Any]
    seed: int
    target: DataSpec
    cap: Cap
    torch_device: str
    reselector: Optional[Reselector] = None
    online: bool = False  # the online rule from the selection's online block (train/online.py)

    @classmethod
    def for_run(
        cls, cfg: Any, cap: Cap, torch_device: str, profile: Any, eff: Any
    ) -> SelectionTraining:
        """`run`'s (a RunConfig's) training: under the cap, re-selecting (b, f) from the
        profile and r(b) at every change of one that changes; --online and --race are
        one or the other."""
        if cfg.online and cfg.race:
            raise UndercapError("--online and --race both re-decide on the target: pick one")
        reselector = None
        if changes(cap):
            reselector = reselector_for(
                profile.with_margin(cfg.power_margin_w),
                eff,
                objective=cfg.objective,
                energy_budget_j=cfg.energy_budget_j,
            )
        return cls(
            cfg.device, cfg.device_options, cfg.seed, cfg.target, cap, torch_device, reselector,
            cfg.online,
        )  # fmt: skip

    def __call__(
        self,
        selection: Selection,
        folder: Path,
        progress: bool,
        time_budget_s: Optional[float] = None,
    ) -> TrainResult:
        from undercap.devices import open_device
        from undercap.train import train

        spec, options = self._spec_options(selection, folder, progress, time_budget_s)
        spec, rule = self._online(selection, spec)
        data = self._data()
        device = open_device(self.device, seed=self.seed, **self.device_options)
        with device, self._refused_resume(options):
            return train(device, spec, data, options, self.reselector, rule)

    def check(self, selection: Selection, folder: Path) -> None:
        """Refuse, before `run` writes anything, a folder whose checkpoint is another
        run's (another cap's selection picked another batch size or clock)."""
        from undercap.train.runner import check_resumable

        spec, options = self._spec_options(selection, folder, False, None)
        with self._refused_resume(options):
            check_resumable(self.device, spec, self._data(), options)

    def _spec_options(
        self, selection: Selection, folder: Path, progress: bool, time_budget_s: Optional[float]
    ) -> tuple[TrainSpec, RunOptions]:
        ckpt = folder / "checkpoint"
        spec = TrainSpec.from_selection(selection, cap=self.cap, torch_device=self.torch_device)
        options = RunOptions(
            checkpoint_dir=ckpt,
            resume=(ckpt / "checkpoint.pt").exists(),  # a re-run continues (or returns) the run
            progress=progress,
            eval_log=folder / "evals.csv",  # one row per evaluation, for pandas
            time_budget_s=time_budget_s,
            resume_hint=self._over_cap_hint(folder, ckpt),
            wait_hint="run the same command again (once power is back, or with a longer "
            "--max-wait-s) to go on from there",
        )
        return spec, options

    def _data(self) -> Any:
        from undercap.recipes.common import loaded_splits

        return loaded_splits(self.target)

    @contextlib.contextmanager
    def _refused_resume(self, options: RunOptions) -> Iterator[None]:
        """A checkpoint this run cannot continue: one line saying what to do."""
        try:
            yield
        except ArtifactError as e:
            if not options.resume:
                raise
            ckpt = options.checkpoint_dir
            raise UndercapError(
                f"cannot continue the training checkpointed in {ckpt} ({e}); use a new -o "
                f"folder or delete {ckpt}"
            ) from e

    def _over_cap_hint(self, folder: Path, ckpt: Path) -> str:
        """What goes on after a stop over the cap: `train --resume` from the selection
        under a higher limit (the same `run` would select for, and stop at, the same cap)."""
        return (
            f"`undercap train --from-selection {folder / 'selection.json'} --device "
            f"{self.device} --checkpoint-dir {ckpt} --eval-log {folder / 'evals.csv'} "
            f"-o {folder / 'train.json'} --resume --power-limit W` goes on from there "
            "under a higher limit W"
        )

    def _online(self, selection: Selection, spec: TrainSpec) -> tuple[TrainSpec, Any]:
        """The spec with the online rule on, and the rule (its proxies from the selection,
        feasible by the re-selector's profile under a changing cap); (spec, None) when off."""
        if not self.online:
            return spec, None
        from dataclasses import replace

        from undercap.train.online import rule_for

        profile = None if self.reselector is None else self.reselector.profile
        rule = rule_for(selection, spec.target_accuracy, profile=profile)
        return replace(spec, online=True), rule
