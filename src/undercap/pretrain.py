"""Pre-training on a source dataset, and the data/model set-up estimation shares.

The efficiency estimate (efficiency.py) and device training both start from the same
pre-trained weights (paper Sec. 4.2: "the same pre-trained model is fine-tuned with
every batch size"). `pretrain()` trains a model on a source dataset with the common
training loop and saves its state dict with `models.save_weights` (loaded back with
`weights_only=True`), recording the dataset, accuracy, input shape and class count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from undercap.datasets.base import Splits
from undercap.errors import UndercapError
from undercap.loop import EvalPoint, LoopConfig, Trainer
from undercap.provenance import provenance


def resolve_torch_device(name: str) -> str:
    """'auto' -> 'cuda' when torch has a usable GPU, else 'cpu'; 'cuda' must exist."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UndercapError(
            f"--torch-device {name}: torch sees no CUDA GPU; use --torch-device cpu or auto"
        )
    if name != "cpu" and not name.startswith("cuda"):
        raise UndercapError(f"--torch-device {name!r}: use auto, cpu or cuda[:N]")
    return name


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError as e:
        raise UndercapError(f"weights file {path} does not exist; run `undercap pretrain`") from e
    return h.hexdigest()


@dataclass(frozen=True)
class DataSpec:
    """Which data to load: a `load_dataset` spec plus its options."""

    dataset: str
    data_dir: str | None = None
    input_shape: tuple[int, ...] | None = None  # None: the dataset's own shape
    context: int = 64  # characters per sequence (text datasets)
    limit: int | None = None  # use at most this many samples (quick runs, tests)
    seed: int = 0  # the train/test split; fixed so every run sees the same test set
    split: str | None = None  # "paper" (80/20, text 90/10), "official", None: official if any


def load_splits(spec: DataSpec, torch_device: str = "cpu") -> Splits:
    """Load the splits, test split in a seeded random order; on a GPU keep them there
    so batches need no host copy.

    Why the shuffle: a file stored class by class (like the shared CIFAR quarters)
    yields a class-sorted test split, and evaluating on at most N test samples
    (LoopConfig.eval_max_samples) takes the first N: that would score 4 of 10
    classes and swing with the model's class bias. Shuffled, any prefix is a random
    subset; full-split accuracy is unchanged. Training order is the Trainer's own."""
    from undercap.datasets import load_dataset

    splits = load_dataset(
        spec.dataset,
        data_dir=spec.data_dir,
        input_shape=spec.input_shape,
        context=spec.context,
        seed=spec.seed,
        limit=spec.limit,
        split=spec.split,
    )
    order = torch.randperm(splits.n_test, generator=torch.Generator().manual_seed(spec.seed))
    return dataclasses.replace(
        splits,
        x_train=splits.x_train.to(torch_device),
        y_train=splits.y_train.to(torch_device),
        x_test=splits.x_test[order].to(torch_device),
        y_test=splits.y_test[order].to(torch_device),
    )


def initial_model(
    model_name: str,
    splits: Splits,
    *,
    init_seed: int,
    pretrained: str | Path | None,
    fresh_head: bool = False,
) -> tuple[nn.Module, dict[str, Any]]:
    """A fresh model for `splits`, initialised under `init_seed`, then overwritten by
    the pre-trained weights when given (a head whose shape does not match is left at
    its seeded initialisation; `load_weights` reports that in the returned meta).

    `fresh_head` keeps the seeded initialisation of the class-count dependent tensors
    (the model's `head_prefixes`) even when their shapes match: transfer to a new task,
    as when an ImageNet model gets a new classifier for the proxy's classes."""
    from undercap.models import build_model, load_weights

    torch.manual_seed(init_seed)
    model = build_model(model_name, num_classes=splits.num_classes, input_shape=splits.input_shape)
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


def optimizer_settings(model_name: str, weight_decay: float | None) -> tuple[str, float]:
    """Adam for CNNs, AdamW for the transformer (paper Sec. 5); AdamW keeps torch's
    default decoupled weight decay 0.01 unless told otherwise."""
    from undercap.models import optimizer_for

    opt = optimizer_for(model_name)
    if weight_decay is None:
        weight_decay = 0.01 if opt == "adamw" else 0.0
    return opt, float(weight_decay)


def sample_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar over training samples on stderr (None when disabled)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="sample", leave=False, file=sys.stderr)


def progress_hooks(
    bar: Any,
) -> tuple[Callable[[Trainer, int], None] | None, Callable[[Trainer, EvalPoint], None] | None]:
    if bar is None:
        return None, None

    def on_step(_t: Trainer, n: int) -> None:
        bar.update(n)

    def on_eval(_t: Trainer, p: EvalPoint) -> None:
        bar.set_postfix(acc=f"{p.accuracy:.3f}", refresh=False)

    return on_step, on_eval


@dataclass(frozen=True)
class PretrainResult:
    model: str
    dataset: str
    path: str
    accuracy: float  # final test accuracy (per character for text)
    best_accuracy: float
    samples_trained: int
    wall_s: float
    meta: dict[str, Any]


def pretrain(
    model_name: str,
    data: DataSpec,
    out: str | Path,
    *,
    batch_size: int = 64,
    lr: float | None = None,
    max_samples: int | None = None,
    epochs: float | None = None,
    eval_every_samples: int | None = None,
    eval_max_samples: int | None = None,
    seed: int = 0,
    torch_device: str = "auto",
    progress: bool = True,
) -> PretrainResult:
    """Train `model_name` from a seeded random init on `data` and save its weights.

    The budget is `max_samples`, or `epochs` passes over the training split
    (default 5 epochs when neither is given). Evaluates on the test split
    `eval_every_samples` apart (default: once per epoch) and at the end, on at most
    `eval_max_samples` test samples (default all).
    """
    from undercap.models import default_lr, save_weights

    device = resolve_torch_device(torch_device)
    t0 = time.perf_counter()
    splits = load_splits(data, device)
    if max_samples is None:
        max_samples = max(
            batch_size, round((epochs if epochs is not None else 5.0) * splits.n_train)
        )
    model, _ = initial_model(model_name, splits, init_seed=seed, pretrained=None)
    opt, wd = optimizer_settings(model_name, None)
    cfg = LoopConfig(
        batch_size=batch_size,
        lr=lr if lr is not None else default_lr(model_name),
        optimizer=opt,
        weight_decay=wd,
        target_accuracy=None,
        max_samples=max_samples,
        eval_every_samples=eval_every_samples or splits.n_train,
        eval_max_samples=eval_max_samples,
        seed=seed,
    )
    bar = sample_bar(max_samples, f"pretrain {model_name}", progress)
    on_step, on_eval = progress_hooks(bar)
    try:
        result = Trainer(model, splits, cfg, device, on_step=on_step, on_eval=on_eval).run()
    finally:
        if bar is not None:
            bar.close()
    wall_s = time.perf_counter() - t0
    meta = {
        "model": model_name,
        "dataset": data.dataset,
        "accuracy": result.final_accuracy,
        "accuracy_kind": "character" if splits.kind == "text" else "sample",
        "input_shape": list(splits.input_shape),
        "num_classes": splits.num_classes,
        "samples_trained": result.samples_trained,
        "batch_size": batch_size,
        "lr": cfg.lr,
        "optimizer": opt,
        "seed": seed,
        "wall_s": wall_s,
        "torch_device": device,
        # plain str/int values only: weights_only loading refuses e.g. torch's TorchVersion
        "provenance": json.loads(json.dumps(provenance(seed=seed, torch_device=device))),
    }
    save_weights(model.cpu(), out, meta)
    return PretrainResult(
        model=model_name,
        dataset=data.dataset,
        path=str(out),
        accuracy=result.final_accuracy,
        best_accuracy=max(p.accuracy for p in result.curve),
        samples_trained=result.samples_trained,
        wall_s=wall_s,
        meta=meta,
    )
