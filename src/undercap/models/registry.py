"""The model registry: one row per model with every fact the pipeline needs about it.

Built-in rows (paper Sec. 5): "resnet18" and "mobilenetv2" (CIFAR variants, 32x32
inputs), "char-transformer" (6 layers, 6 heads, 256 dims, context 64), plus
"small-cnn" for quick runs on the bundled 8x8 digits.

Optimizers and base learning rates (the LR at the largest batch; smaller batches use
sqrt scaling, train.loop.scaled_lr): the CNNs use Adam at 1e-3 (Kingma & Ba's
default; the paper uses Adam for the CNNs); the transformer uses AdamW at 6e-4 (the
GPT-3 small / nanoGPT default; nanoGPT's shakespeare-char config uses 1e-3 but with a
warm-up, which our loop does not have) with torch's default decoupled weight decay.

Users' own models (`package.module:factory`, `path/to/file.py:factory`) get a row too,
with Adam at 1e-3 and the task from the data: see docs/guides/own-code.md.

Torch-free: a row names its factory by import path and `build` imports it, so the
CLI can check a model name and read its facts without loading torch.
"""

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from undercap.errors import UndercapError
from undercap.models.tasks import TASK_NAMES
from undercap.models.user import call_with_supported, is_import_path, load_callable
from undercap.models.vocab import VOCAB_SIZE

#: every task a model may have (models/tasks.py); built-in rows are "classification"
#: (one label per image) or "next-token" (character models, scored per token).
TASKS = TASK_NAMES


@dataclass(frozen=True)
class ModelSpec:
    """What undercap knows about one model (units and meaning in the names)."""

    name: str
    factory: str  # "package.module:function", called as f(num_classes=, input_shape=)
    task: Optional[str]  # None: from the data (users' models)
    default_input_shape: Optional[Tuple[int, ...]]
    optimizer: str  # "adam" or "adamw"
    base_lr: float  # at the largest batch size
    weight_decay: float
    builtin: bool = True

    @property
    def is_sequence(self) -> bool:
        return self.task == "next-token"

    def task_for(self, data_task: Optional[str]) -> str:
        """The task a run trains: the row's, else the data's, else classification."""
        return self.task or data_task or "classification"

    def profile_classes(self, task: Optional[str] = None) -> int:
        """Classes of the output layer when profiling without data: the character
        vocabulary for next-token models (`task` for a user's), else 10 (the head is a
        tiny share of the work; a user's model that ignores it keeps its own)."""
        return int(VOCAB_SIZE) if self.task_for(task) == "next-token" else 10

    def build(self, *, num_classes: int, input_shape: Sequence[int]) -> Any:
        """A freshly initialised nn.Module (torch's global RNG seeds it)."""
        shape = tuple(int(s) for s in input_shape)
        if self.builtin:
            module, _, attr = self.factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
            return factory(num_classes=num_classes, input_shape=shape)
        fn = load_callable(self.factory, "model")
        model = call_with_supported(
            fn, self.factory, "model", num_classes=num_classes, input_shape=shape
        )
        if not callable(model) or not hasattr(model, "parameters"):
            raise UndercapError(
                f"model {self.factory!r} returned a {type(model).__name__}, expected a "
                "torch.nn.Module"
            )
        return model


#: (optimizer, base_lr, weight_decay) of the CNNs and users' models, and of the
#: transformer (module docstring)
_ADAM = ("adam", 1e-3, 0.0)
_ADAMW = ("adamw", 6e-4, 0.01)


def _row(
    name: str, factory: str, shape: Tuple[int, ...], task: str = "classification"
) -> ModelSpec:
    return ModelSpec(name, factory, task, shape, *(_ADAMW if task == "next-token" else _ADAM))


BUILTIN: Dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _row("small-cnn", "undercap.models.small_cnn:build", (1, 8, 8)),  # the bundled digits
        _row("resnet18", "undercap.models.resnet:build", (3, 32, 32)),
        _row("mobilenetv2", "undercap.models.mobilenet:build", (3, 32, 32)),
        _row("char-transformer", "undercap.models.transformer:build", (64,), "next-token"),
    )
}
MODEL_NAMES = tuple(BUILTIN)


def model_spec(name: str) -> ModelSpec:
    """The registry row of a built-in model or of a user's factory by import path;
    unknown names list the known ones. Does not import the user's code."""
    if name in BUILTIN:
        return BUILTIN[name]
    if is_import_path(name):
        return ModelSpec(name, name, None, None, *_ADAM, builtin=False)
    raise UndercapError(
        f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}, or give your own "
        "as package.module:factory or path/to/file.py:factory"
    )
