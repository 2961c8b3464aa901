"""What a run minimises and what "accuracy" means: the loss and the target metric.

Out of the box (the paper's setting, Sec. 5): cross-entropy, and top-1 accuracy as the
target metric; sequence outputs (B, T, V) against labels (B, T) are scored per
position. A user's loss `fn(outputs, labels) -> scalar tensor` and metric
`fn(outputs, labels) -> float` (higher is better, the batch's mean) are accepted by
import path (`package.module:fn` or `path/to/file.py:fn`).

A sequential look (evalplan.Check) also reads the spread of the items scored so far
(`Objective.items`): text windows, each a mean over its characters, are the cluster
sample they are (ItemSpread). `check_outputs` runs the model once before a run, so
outputs that do not fit the labels fail with one line, not deep in the loss.
"""

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from undercap.errors import UndercapError
from undercap.models.outputs import logits_of, loss_of
from undercap.models.user import load_callable
from undercap.train.loop.gpu import on_gpu, whole_sums_on_device

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: (outputs, labels) -> (sum of the metric over the batch, number of items scored)
Score = Callable[[torch.Tensor, torch.Tensor], Tuple[float, int]]
#: (outputs, labels) -> per item: (its metric summed over its predictions, its predictions)
ItemScore = Callable[[Any, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy; sequence outputs (B, T, V) are scored per position."""
    if logits.dim() == 3:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


def _top1_hits(logits: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Which predictions are top-1 right, and which are scored: labels of -100
    (cross-entropy's and Hugging Face's ignore index) are not."""
    keep = y != -100
    return (logits.argmax(dim=-1) == y) & keep, keep


def top1_items(logits: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-1 per held-out item: its correct and scored predictions (one per scored
    position of a sequence), on the CPU in float64 (squared later; MPS has none)."""
    right, keep = _top1_hits(logits, y)
    if y.dim() > 1:
        right, keep = right.flatten(1).sum(1), keep.flatten(1).sum(1)
    return right.to("cpu", torch.float64), keep.to("cpu", torch.float64)


@dataclass(frozen=True)
class Objective:
    """The loss to train with and the score to evaluate, with where they came from."""

    loss: Loss
    score: Score
    loss_name: str = "cross-entropy"
    metric_name: str = "top-1 accuracy"
    #: the metric per item (None: a user's metric, a batch mean, has no per-item form)
    items: Optional[ItemScore] = None


def make_objective(loss: Optional[str] = None, metric: Optional[str] = None) -> Objective:
    """The default objective, or the user's loss and/or metric by import path, given the
    model's outputs as it returns them (models/outputs.py); the default loss is the
    model's own where it returns one, else cross-entropy on its logits."""
    loss_fn: Loss = _own_or_cross_entropy if loss is None else load_callable(loss, "loss")
    score_fn: Score = _top1 if metric is None else _batch_mean(metric)
    items = _top1_items if metric is None else None
    return Objective(loss_fn, score_fn, loss or "cross-entropy", metric or "top-1 accuracy", items)


def _own_or_cross_entropy(out: Any, y: torch.Tensor) -> torch.Tensor:
    own = loss_of(out)
    return own if own is not None else cross_entropy(logits_of(out), y)


def _top1(out: Any, y: torch.Tensor) -> Tuple[float, int]:
    """Correct top-1 predictions and predictions made (per position for sequences)."""
    right, keep = _top1_hits(logits_of(out), y)
    return float(right.sum()), int(keep.sum())


def _top1_items(out: Any, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return top1_items(logits_of(out), y)


def _batch_mean(path: str) -> Score:
    fn = load_callable(path, "metric")

    def score(outputs: torch.Tensor, y: torch.Tensor) -> Tuple[float, int]:
        value = fn(outputs, y)
        try:
            value = float(value)
        except (TypeError, ValueError) as e:
            raise UndercapError(
                f"metric {path!r} returned a {type(value).__name__}; expected a number "
                "(higher is better)"
            ) from e
        n = int(y.shape[0])
        return value * n, n

    return score


def check_outputs(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> None:
    """One forward pass on two training samples: the default loss needs outputs
    (B, classes) for class labels, or (B, T, vocabulary) for token labels (B, T)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(x[:2])
    except Exception as e:
        raise UndercapError(
            f"the model failed on inputs of shape {tuple(x.shape[1:])}: {type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        ) from e
    finally:
        model.train(was_training)

    try:
        out = logits_of(out)
    except TypeError as e:
        raise UndercapError(
            f"the model returned {e}; the default loss needs logits (pass --loss for other outputs)"
        ) from e
    want = (2, num_classes) if y.dim() == 1 else (2, *y.shape[1:], num_classes)
    if tuple(out.shape[:-1]) != want[:-1] or out.shape[-1] < num_classes:
        raise UndercapError(
            f"the model's output has shape {tuple(out.shape[1:])} per sample but the labels "
            f"need {want[1:]} ({num_classes} classes{', one per position' if y.dim() > 1 else ''});"
            " build the model with num_classes= from the data, or pass --loss"
        )


class Scored(NamedTuple):
    """What an evaluation scored: the metric and mean loss over the first `items`
    held-out items, and whether that was all of them."""

    metric: float
    loss: float
    items: int
    complete: bool


#: (the metric over the items scored so far, how many items: held-out samples, their
#: spread: ItemSpread.sd) -> stop now
Stop = Callable[[float, int, Optional[float]], bool]


class ItemSpread:
    """The spread of the items a sequential look has scored, where the metric is a
    ratio of per-item sums (correct / predictions) and an item makes several
    predictions (a text window, one per character): the standard deviation of the
    residuals c_i - R k_i over the mean predictions per item, R the ratio so far; the
    ratio estimator's variance is that over m (Cochran, Sampling Techniques, 3rd ed.
    1977, Sec. 6.3, eq. 6.9). None where every item is one prediction: a Bernoulli
    item's variance at a threshold is known (train/loop/evalplan.margin)."""

    def __init__(self) -> None:
        self.m, self.multi = 0, False
        self.c = self.k = self.cc = self.ck = self.kk = 0.0

    def add(self, c: torch.Tensor, k: torch.Tensor) -> None:
        self.m += int(c.shape[0])
        self.multi = self.multi or bool((k > 1).any())
        self.c, self.k = self.c + float(c.sum()), self.k + float(k.sum())
        self.cc, self.ck = self.cc + float((c * c).sum()), self.ck + float((c * k).sum())
        self.kk += float((k * k).sum())

    def sd(self) -> Optional[float]:
        if not self.multi or self.m < 2 or self.k <= 0:
            return None
        r = self.c / self.k
        residuals = max(self.cc - 2.0 * r * self.ck + r * r * self.kk, 0.0)
        return math.sqrt(residuals / (self.m - 1)) / (self.k / self.m)


@torch.no_grad()
def score_until(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    objective: Optional[Objective] = None,
    batch_size: int = 512,
    device: Union[torch.device, str] = "cpu",
    stop: Optional[Stop] = None,
) -> Scored:
    """Score (x, y) in batches, in order, asking `stop` after each batch but the last
    whether the rest can be skipped (a sequential look: estimate/evalsched.py). The
    complete sums are evaluate()'s, float for float."""
    obj = objective or make_objective()
    was_training = model.training
    model.eval()
    total_loss, total_score, total_n, total_items = 0.0, 0.0, 0, 0
    spread = ItemSpread() if stop is not None and obj.items is not None else None
    try:
        if stop is None and obj.score is _top1 and on_gpu(device):  # one read (loop/gpu.py)
            right, n, loss, items = whole_sums_on_device(model, x, y, obj.loss, batch_size, device)
            return Scored(right / max(n, 1), loss / max(items, 1), items, True)
        for i in range(0, x.shape[0], batch_size):
            xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
            out = model(xb)
            score, n = obj.score(out, yb)
            total_loss += float(obj.loss(out, yb)) * int(yb.shape[0])
            total_score += score
            total_n += n
            total_items += int(yb.shape[0])
            if stop is None or total_items >= x.shape[0]:
                continue
            if spread is not None and obj.items is not None:
                spread.add(*obj.items(out, yb))
            sd = None if spread is None else spread.sd()
            if stop(total_score / max(total_n, 1), total_items, sd):
                break
    finally:
        model.train(was_training)
    complete = total_items >= x.shape[0]
    return Scored(
        total_score / max(total_n, 1), total_loss / max(total_items, 1), total_items, complete
    )


def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    objective: Optional[Objective] = None,
    batch_size: int = 512,
    device: Union[torch.device, str] = "cpu",
) -> Tuple[float, float]:
    """The target metric (default top-1 accuracy) and the mean loss over (x, y)."""
    done = score_until(model, x, y, objective=objective, batch_size=batch_size, device=device)
    return done.metric, done.loss
