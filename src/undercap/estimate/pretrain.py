"""Pre-training on a source dataset: the weights estimation and device training start from
(paper Sec. 4.2: "the same pre-trained model is fine-tuned with every batch size").

`pretrain()` trains with the common training loop and saves the state dict with
`models.weights.save_weights` (loaded back with `weights_only=True`), recording the
dataset, accuracy, input shape and class count.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Union

from undercap import defaults
from undercap.artifacts.provenance import provenance
from undercap.data.spec import DataSpec, load_splits
from undercap.models.recipe import NO_USER_CODE, UserCode
from undercap.models.registry import model_spec
from undercap.models.weights import initial_model, save_weights
from undercap.report.progress import sample_bar, training_hooks
from undercap.train.loop import LoopConfig, Trainer, resolve_torch_device


@dataclass(frozen=True)
class PretrainResult:
    model: str
    dataset: str
    path: str
    accuracy: float  # final test accuracy (per character for text)
    best_accuracy: float
    samples_trained: int
    wall_s: float
    meta: Dict[str, Any]


def pretrain(
    model_name: str,
    data: DataSpec,
    out: Union[str, Path],
    *,
    batch_size: int = defaults.PRETRAIN_BATCH_SIZE,
    lr: Optional[float] = None,
    max_samples: Optional[int] = None,
    epochs: Optional[float] = None,
    eval_every_samples: Optional[int] = None,
    eval_max_samples: Optional[int] = None,
    seed: int = 0,
    torch_device: str = "auto",
    progress: bool = True,
    code: UserCode = NO_USER_CODE,
) -> PretrainResult:
    """Train `model_name` from a seeded random init on `data` and save its weights.
    The budget is `max_samples`, or `epochs` passes over the training split (default
    5 epochs). Evaluates `eval_every_samples` apart (default: once per epoch) and at
    the end, on at most `eval_max_samples` test samples (default all). `code`: the
    user's loss, metric and recipe (models/recipe.UserCode)."""
    device = resolve_torch_device(torch_device)
    t0 = time.perf_counter()
    splits = load_splits(data, device)
    max_samples = _budget(max_samples, epochs, batch_size, splits.n_train)
    model, _ = initial_model(model_name, splits, init_seed=seed, pretrained=None)
    spec = model_spec(model_name)
    cfg = LoopConfig(
        batch_size=batch_size,
        lr=lr if lr is not None else spec.base_lr,
        optimizer=spec.optimizer,
        weight_decay=spec.weight_decay,
        target_accuracy=None,
        max_samples=max_samples,
        eval_every_samples=eval_every_samples or splits.n_train,
        eval_max_samples=eval_max_samples,
        seed=seed,
        loss=code.loss,
        metric=code.metric,
        recipe=code.recipe_at(lr, batch_size, batch_size),  # models/recipe.py; one batch size
    )
    bar = sample_bar(max_samples, f"pretrain {model_name}", progress)
    on_step, on_eval = training_hooks(bar)
    try:
        result = Trainer(model, splits, cfg, device, on_step=on_step, on_eval=on_eval).run()
    finally:
        bar.close()
    wall_s = time.perf_counter() - t0
    meta = _meta(model_name, data, splits, cfg, result, wall_s, device)
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


def _budget(max_samples: Optional[int], epochs: Optional[float], batch_size: int, n: int) -> int:
    """`max_samples`, or `epochs` passes over `n` training samples (default
    defaults.PRETRAIN_EPOCHS), at least one batch."""
    if max_samples is not None:
        return max_samples
    return max(batch_size, round((epochs if epochs is not None else defaults.PRETRAIN_EPOCHS) * n))


def _meta(
    model_name: str,
    data: DataSpec,
    splits: Any,
    cfg: LoopConfig,
    result: Any,
    wall_s: float,
    device: str,
) -> Dict[str, Any]:
    """What the weights file records about how it was made."""
    return {
        "model": model_name,
        "dataset": data.dataset,
        "accuracy": result.final_accuracy,
        "accuracy_kind": splits.accuracy_kind,
        "input_shape": list(splits.input_shape),
        "num_classes": splits.num_classes,
        "samples_trained": result.samples_trained,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "optimizer": cfg.optimizer,
        "seed": cfg.seed,
        "wall_s": wall_s,
        "torch_device": device,
        # plain str/int values only: weights_only loading refuses e.g. torch's TorchVersion
        "provenance": json.loads(json.dumps(provenance(seed=cfg.seed, torch_device=device))),
    }
