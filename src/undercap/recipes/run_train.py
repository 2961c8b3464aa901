"""How `undercap run` trains a selection on the device: one run at the selection's
(b, f) in a folder of its own (its checkpoint, its evaluation log), so a re-run
resumes it; the winner's run, or a race lane's, ended after a device-time budget
(recipes/race.py). The TrainSpec comes whole from the selection (its choice and its
training block), so `run` and `train --from-selection` train one way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from undercap.artifacts.selection import Selection
from undercap.artifacts.train_result import TrainResult
from undercap.data.spec import DataSpec
from undercap.errors import ArtifactError, UndercapError
from undercap.train.cap import Cap
from undercap.train.schedule import Reselector
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
    def of(
        cls, cfg: Any, cap: Cap, torch_device: str, reselector: Optional[Reselector]
    ) -> SelectionTraining:
        """`run`'s (a RunConfig's) training: --online and --race are one or the other."""
        if cfg.online and cfg.race:
            raise UndercapError("--online and --race both re-decide on the target: pick one")
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
        from undercap.data.spec import load_splits
        from undercap.devices import open_device
        from undercap.train import train

        ckpt = folder / "checkpoint"
        spec = TrainSpec.from_selection(selection, cap=self.cap, torch_device=self.torch_device)
        spec, rule = self._online(selection, spec)
        resume = (ckpt / "checkpoint.pt").exists()  # a re-run continues (or returns) the run
        options = RunOptions(
            checkpoint_dir=ckpt,
            resume=resume,
            progress=progress,
            eval_log=folder / "evals.csv",  # one row per evaluation, for pandas
            time_budget_s=time_budget_s,
        )
        data = load_splits(self.target, "cpu")
        with open_device(self.device, seed=self.seed, **self.device_options) as device:
            try:
                return train(device, spec, data, options, self.reselector, rule)
            except ArtifactError as e:
                if not resume:
                    raise
                raise UndercapError(
                    f"cannot continue the training checkpointed in {ckpt} ({e}); use a new -o "
                    f"folder or delete {ckpt}"
                ) from e

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
