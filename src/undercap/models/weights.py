"""Save and load model weights (pre-trained models move from the server to the device).

File format: torch.save of {"format": "undercap.weights/1", "architecture": class
name, "meta": {...}, "state_dict": {...}}, written atomically (temp file + rename).
Loading refuses arbitrary pickled code (models/torchload.py: torch.load(weights_only=True)).
A plain state dict saved with torch.save(model.state_dict()) is accepted too.

Transfer between datasets: a class-count dependent tensor (the model's `head_prefixes`,
e.g. the classifier head) whose shape differs from the file's is left freshly initialised
and listed under "fresh_tensors"; any other difference (keys, shapes: a ResNet file in a
MobileNet, 1-channel weights in a 3-channel stem) is an ArtifactError.
"""

from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import nn

from undercap.artifacts.io import atomic_path
from undercap.errors import ArtifactError
from undercap.models.hfinputs import feed_from_tensor
from undercap.models.registry import model_spec
from undercap.models.torchload import load_tensors

WEIGHTS_FORMAT = "undercap.weights/1"


def save_weights(model: nn.Module, path: Union[str, Path], meta: Dict[str, Any]) -> Path:
    """Write the model's state dict and `meta` (plain JSON-like values) to `path`."""
    path = Path(path)
    blob = {
        "format": WEIGHTS_FORMAT,
        "architecture": type(model).__name__,
        "meta": dict(meta),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    with atomic_path(path) as tmp:
        torch.save(blob, tmp)
    return path


def _read(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        raise ArtifactError(f"weights file {path} does not exist")
    try:
        blob = load_tensors(path)
    except Exception as e:  # torch raises many types for corrupt or non-torch files
        msg = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise ArtifactError(f"{path} is not a readable weights file ({msg})") from e
    if isinstance(blob, dict) and blob.get("format") == WEIGHTS_FORMAT:
        return blob
    if isinstance(blob, dict) and blob and all(isinstance(v, torch.Tensor) for v in blob.values()):
        return {"architecture": None, "meta": {}, "state_dict": blob}
    raise ArtifactError(f"{path} is not an undercap weights file (expected {WEIGHTS_FORMAT})")


def load_weights(model: nn.Module, path: Union[str, Path]) -> Dict[str, Any]:
    """Load weights saved by `save_weights` into `model`; returns the saved meta plus
    "fresh_tensors" (names left freshly initialised because the class count differs)."""
    path = Path(path)
    blob = _read(path)
    arch, state = blob["architecture"], blob["state_dict"]
    target = model.state_dict()
    if arch is not None and arch != type(model).__name__:
        raise ArtifactError(
            f"{path} holds {arch} weights, not {type(model).__name__}: pick the matching --model"
        )
    missing, unexpected = set(target) - set(state), set(state) - set(target)
    if missing or unexpected:
        some = sorted(missing | unexpected)[:3]
        raise ArtifactError(
            f"{path} does not match the {type(model).__name__} architecture "
            f"({len(missing)} missing, {len(unexpected)} unexpected tensors, e.g. {some})"
        )
    heads = tuple(getattr(model, "head_prefixes", ("head.",)))
    fresh, load = [], {}
    for key, value in state.items():
        if value.shape == target[key].shape:
            load[key] = value
        elif key.startswith(heads):
            fresh.append(key)
        else:
            raise ArtifactError(
                f"{path}: tensor {key} has shape {tuple(value.shape)}, the model needs "
                f"{tuple(target[key].shape)}; the weights are for another input shape or model"
            )
    model.load_state_dict(load, strict=False)
    return {**blob["meta"], "fresh_tensors": sorted(fresh)}


def initial_model(
    model_name: str,
    data: Any,
    *,
    init_seed: int,
    pretrained: Optional[Union[str, Path]],
    fresh_head: bool = False,
) -> Tuple[nn.Module, Dict[str, Any]]:
    """A fresh model for `data` (a data.Splits: its class count and input shape),
    initialised under `init_seed`, then overwritten by the pre-trained weights when
    given, but for a head whose shape does not match (`load_weights`).

    `fresh_head` keeps the seeded head (the model's `head_prefixes`) even when its shape
    matches: transfer to a new task, as when an ImageNet model gets a new classifier."""
    torch.manual_seed(init_seed)
    model = model_spec(model_name).build(num_classes=data.num_classes, input_shape=data.input_shape)
    # a Hugging Face model gets its attention mask and seq2seq labels from the one
    # tensor undercap's loops feed it (models/hfinputs.py)
    seq2seq = getattr(data, "task", None) == "seq2seq"
    feed_from_tensor(model, getattr(data, "pad_token_id", None), seq2seq)
    if pretrained is None:
        return model, {"init": "random", "init_seed": init_seed}
    heads = tuple(getattr(model, "head_prefixes", ("head.",)))
    head_init = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(heads)}
    meta = dict(load_weights(model, pretrained) or {})
    if fresh_head:
        model.load_state_dict(head_init, strict=False)
        meta["fresh_tensors"] = sorted(head_init)
    return model, {
        "init": "pretrained",
        "init_seed": init_seed,
        "fresh_head": fresh_head,
        "weights_meta": meta,
    }
