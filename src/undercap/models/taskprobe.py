"""A model's task inferred from the model itself, and dummy batches for that task.

Counting a model's work (models/workload.py) and profiling it (profile/stepper.py)
feed it random inputs of the right kind: float tensors, or token ids below its
vocabulary, with a label per input or per position (models/tasks.py). The task is
the one named, else inferred (the full order: docs/guides/hugging-face.md): a Hugging
Face model's task head from its class name; else, where the first Linear, Conv or
Embedding is an `nn.Embedding`, token ids, and one forward pass on dummy ids tells a
label per position ("next-token") from one per sequence ("sequence-classification");
else "classification". A seq2seq model (T5, BART) is called as `model(input_ids=x,
labels=y)`: it shifts the labels right into its decoder's inputs (teacher forcing).
"""

from typing import Any, Optional, Sequence, Tuple

import torch
from torch import nn

from undercap.models.outputs import logits_of
from undercap.models.tasks import Task, hf_model_in, hf_task_of, task_named


def first_layer(model: nn.Module) -> Optional[nn.Module]:
    """The first Linear, Conv or Embedding in module order (what takes the input)."""
    kinds = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding)
    return next((m for m in model.modules() if isinstance(m, kinds)), None)


def token_vocab(model: nn.Module) -> Optional[int]:
    """Token ids the model takes: its HF config's vocab_size, else the size of its
    first layer when that is an Embedding; None for models of float inputs."""
    size = getattr(getattr(hf_model_in(model), "config", None), "vocab_size", None)
    if isinstance(size, int) and size > 0:
        return size
    layer = first_layer(model)
    return int(layer.num_embeddings) if isinstance(layer, nn.Embedding) else None


def infer_task(model: nn.Module, input_shape: Sequence[int]) -> str:
    """The task of a model that was not told one (module docstring)."""
    hf = hf_task_of(model)
    if hf is not None:
        return hf
    vocab = token_vocab(model)
    if vocab is None:
        return "classification"
    x = torch.randint(0, vocab, (2, *input_shape), generator=torch.Generator().manual_seed(0))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = logits_of(model(x))
    except Exception:  # the caller's own forward pass reports it with the shapes
        return "next-token"
    finally:
        model.train(was_training)
    return "next-token" if out.dim() == x.dim() + 1 else "sequence-classification"


def resolve_task(model: nn.Module, input_shape: Sequence[int], task: Optional[str]) -> Task:
    """The named task (checked), else the inferred one."""
    return task_named(task if task else infer_task(model, input_shape))


def dummy_batch(
    task: Task,
    input_shape: Sequence[int],
    batch: int,
    vocab: int,
    num_classes: int,
    gen: torch.Generator,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and labels for `task`: token ids below `vocab` or floats in,
    classes below `num_classes` per input or per position out. A seq2seq batch is the
    encoder's ids (the last dimension of `input_shape`) and the target ids."""
    shape = tuple(int(s) for s in input_shape)
    if not task.token_inputs:
        x = torch.randn((batch, *shape), generator=gen)
        return x, torch.randint(0, num_classes, (batch,), generator=gen)
    if task.seq2seq:
        shape = shape[-1:]
    x = torch.randint(0, vocab, (batch, *shape), generator=gen)
    y_shape = (batch, *shape) if task.per_position else (batch,)
    return x, torch.randint(0, num_classes, y_shape, generator=gen)


def forward(model: nn.Module, task: Task, x: torch.Tensor, y: torch.Tensor) -> Any:
    """The model's outputs on a batch (a seq2seq model gets the labels: module docstring)."""
    return model(input_ids=x, labels=y) if task.seq2seq else model(x)
