"""Training checkpoints: saved atomically, loaded safely, refused when they do not match.

A checkpoint holds everything a killed `undercap train` needs to continue as if it
had not stopped: the loop's state (loop.Trainer.state_dict) plus the device-side
accounting (time, energy, power peaks, the clock the guard left, its events).

Writes go to a temp file in the same folder, fsync'd, then os.replace'd over the old
checkpoint (atomic on POSIX: a SIGKILL mid-write leaves the previous one intact).
Loading refuses all but tensors and plain containers (torch.load's weights_only, or
its equal on torch 1.10: models/torchload.py), so no pickled code is ever executed.
"""

import dataclasses
import hashlib
import io
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import torch

from undercap.artifacts.io import atomic_path, file_sha256
from undercap.data.base import Splits
from undercap.errors import ArtifactError, UndercapError
from undercap.models.torchload import load_tensors
from undercap.models.user import code_digest
from undercap.train.spec import RunOptions, TrainSpec

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_SCHEMA = "undercap.train-checkpoint/1"


def checkpoint_path(checkpoint_dir: Union[str, Path]) -> Path:
    return Path(checkpoint_dir) / CHECKPOINT_NAME


def save_checkpoint(checkpoint_dir: Union[str, Path], state: Mapping[str, Any]) -> Path:
    """Atomically write `state` (tensors and plain containers) as the checkpoint."""
    path = checkpoint_path(checkpoint_dir)
    # Serialised in memory, written by Python: a disk that refuses the write (full,
    # capped) is an OSError here, where torch's own file writer raises a RuntimeError
    # (torch 2) or aborts the process (torch 1.10, JetPack 4.6), clocks still locked.
    buffer = io.BytesIO()
    torch.save({"schema": CHECKPOINT_SCHEMA, **state}, buffer)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(buffer.getbuffer())
    return path


def load_checkpoint(checkpoint_dir: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The saved checkpoint, or None when the folder has none."""
    path = checkpoint_path(checkpoint_dir)
    if not path.exists():
        return None
    try:
        state = load_tensors(path)
    except Exception as e:  # truncated or foreign file: say which and what to do
        raise ArtifactError(
            f"cannot read checkpoint {path} ({type(e).__name__}); delete it to start over"
        ) from e
    if not isinstance(state, dict) or state.get("schema") != CHECKPOINT_SCHEMA:
        raise ArtifactError(f"{path} is not an undercap training checkpoint")
    return state


#: identity keys that older checkpoints hold and a run no longer compares: the cap is a
#: setting of the run, which a resumed run may change (setup._identity)
RETIRED_KEYS = ("power_limit_w",)


def check_same_config(saved: Mapping[str, Any], current: Mapping[str, Any], where: Path) -> None:
    """Refuse to resume a checkpoint written for a different run: continuing with
    another batch size, seed, dataset or model would silently mix two runs."""
    keys = sorted((set(saved) | set(current)) - set(RETIRED_KEYS))
    diff = [k for k in keys if saved.get(k) != current.get(k)]
    if diff:
        shown = ", ".join(f"{k} {saved.get(k)!r} -> {current.get(k)!r}" for k in diff[:4])
        more = f" (+{len(diff) - 4} more)" if len(diff) > 4 else ""
        raise ArtifactError(
            f"checkpoint {where} was written for a different run ({shown}{more}); "
            "resume with the same settings or use another --checkpoint-dir"
        )


def checkpoint_to_resume(
    checkpoint_dir: Optional[Union[str, Path]], resume: bool, config: Dict[str, Any]
) -> Optional[Dict[str, Any]]:
    """The checkpoint a run continues from: None for a fresh run. Refuses to resume
    nothing, to overwrite a resumable run without --resume, and to mix configs."""
    if checkpoint_dir is None:
        if resume:
            raise UndercapError("--resume needs --checkpoint-dir (where the checkpoint is)")
        return None
    saved = load_checkpoint(checkpoint_dir)
    where = checkpoint_path(checkpoint_dir)
    if resume and saved is None:
        raise ArtifactError(f"no checkpoint at {where} to resume; run without --resume")
    if not resume and saved is not None:
        raise ArtifactError(
            f"{where} already holds a checkpoint; pass --resume to continue that run "
            "or use another --checkpoint-dir"
        )
    if saved is not None:
        check_same_config(saved["config"], config, where)
    return saved


def cap_change_note(saved: Optional[Dict[str, Any]], cap_source: str) -> str:
    """A line for the result when a run resumes under another cap than it was
    checkpointed under ('' when not): the cap is a setting, not the run's identity.
    Older checkpoints name a fixed cap in their config (a changing one: the same)."""
    if saved is None:
        return ""
    was = saved.get("cap")
    if was is None and not saved.get("follower"):
        old_w = saved["config"].get("power_limit_w")
        was = "none" if old_w is None else f"{old_w:g} W"  # train.cap.FixedCap.source
    if was is None or was == cap_source:
        return ""
    print(f"note: resumed under the cap {cap_source} (checkpointed under {was})", file=sys.stderr)
    samples = saved["trainer"]["samples"]
    return f"resumed at {samples} samples under the cap {cap_source}; before: {was}"


def run_identity(spec: TrainSpec, data: Splits, device: str) -> Dict[str, Any]:
    """Everything that makes a run this run: a checkpoint of another is refused. Made
    without building the model, so a run checks it before it changes anything. The cap
    is not part of it: a run may resume under another (as a changing cap changes)."""
    spec.validate()
    sha = None if spec.pretrained is None else file_sha256(spec.pretrained, what="weights file")
    recipe = (spec.optimizer_factory, spec.lr_scheduler, spec.train_step)
    loop = dataclasses.asdict(spec.loop_config())
    for key, default in (("deterministic", False), ("precision", "fp32")):
        if loop[key] == default:  # checkpoints from before the switch existed resume
            del loop[key]
    return {
        **loop,
        "model": spec.model,
        "dataset": data.name,
        "data_fingerprint": _data_fingerprint(data),
        "n_train": data.n_train,
        "n_test": data.n_test,
        "max_batch_size": spec.b_max,
        "pretrained_sha256": None if sha is None else sha[:16],
        "device": device,
        "freq_mhz": spec.freq_mhz,
        "guard_window_s": spec.guard_window_s,
        "user_code": code_digest(spec.model, data.name, spec.loss, spec.metric, *recipe),
    }


def _data_fingerprint(data: Splits) -> str:
    """Cheap identity of the splits: labels in order plus the first inputs."""
    h = hashlib.sha256()
    for t in (data.y_train, data.y_test, data.x_train[:64], data.x_test[:64]):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def check_resumable(device_name: str, spec: TrainSpec, data: Splits, options: RunOptions) -> None:
    """Refuse now, before anything is written or the device touched, what `train` would
    refuse after its set-up: a checkpoint folder the run cannot use."""
    identity = run_identity(spec, data, device_name)
    checkpoint_to_resume(options.checkpoint_dir, options.resume, identity)
