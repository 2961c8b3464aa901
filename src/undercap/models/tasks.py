"""What a model takes in and is scored on: the tasks undercap knows, by name.

A task says which inputs to feed a model when its work is counted or profiled (float
tensors or token ids), what its labels are (one per input, or one per position) and
how the model is called. Built-in models know theirs; a user's model is inferred
(models/taskprobe.py; a Hugging Face model by duck typing, transformers is never
imported, and by its class name's task head, e.g. `...ForSequenceClassification` is
"sequence-classification"), or named: `--task`, `task=` in `capped()` and both trainer
callbacks. Torch-free.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from undercap.errors import UndercapError


@dataclass(frozen=True)
class Task:
    """One task: its inputs, its labels and how they are scored."""

    name: str
    token_inputs: bool  # token ids in (else float tensors of the input shape)
    per_position: bool  # a label per input position (else one per input)
    seq2seq: bool = False  # an encoder-decoder: the labels also feed the decoder
    about: str = ""


TASKS: Dict[str, Task] = {
    t.name: t
    for t in (
        Task("classification", False, False, about="float inputs, one class per input"),
        Task("next-token", True, True, about="token ids in, the next token at each position"),
        Task(
            "sequence-classification",
            True,
            False,
            about="token ids in, one class per sequence (BertForSequenceClassification)",
        ),
        Task(
            "token-classification",
            True,
            True,
            about="token ids in, a class per token (BertForTokenClassification)",
        ),
        Task(
            "masked-lm",
            True,
            True,
            about="token ids with masked positions in, the masked tokens out (-100 elsewhere)",
        ),
        Task(
            "seq2seq",
            True,
            True,
            seq2seq=True,
            about="token ids in, target token ids out through a decoder (T5, BART)",
        ),
    )
}
TASK_NAMES = tuple(TASKS)

# Hugging Face task heads by the end of the model's class name (transformers'
# AutoModelFor... mapping names); the first match wins.
_HF_SUFFIXES = (
    ("ForSequenceClassification", "sequence-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForMaskedLM", "masked-lm"),
    ("ForConditionalGeneration", "seq2seq"),
    ("ForSeq2SeqLM", "seq2seq"),
    ("ForCausalLM", "next-token"),
    ("LMHeadModel", "next-token"),
)


def task_named(name: str) -> Task:
    """The task called `name`; an unknown name is one line listing the known ones."""
    task = TASKS.get(name)
    if task is None:
        raise UndercapError(f"unknown task {name!r}; name one of {', '.join(TASK_NAMES)}")
    return task


def is_hf_model(obj: Any) -> bool:
    """A Hugging Face `PreTrainedModel`, by what every one has (no transformers import)."""
    return hasattr(obj, "config") and hasattr(obj, "main_input_name")


def hf_model_in(model: Any) -> Optional[Any]:
    """The model itself when it is a Hugging Face model, else the first Hugging Face
    model among its submodules (a LightningModule wrapping one), else None."""
    if is_hf_model(model):
        return model
    modules = getattr(model, "modules", None)
    if not callable(modules):
        return None
    return next((m for m in modules() if is_hf_model(m)), None)


def hf_task_of(model: Any) -> Optional[str]:
    """The task of a Hugging Face model from its class name (its task head), else
    seq2seq for any encoder-decoder config; None for other models."""
    hf = hf_model_in(model)
    if hf is None:
        return None
    cls = type(hf).__name__
    for suffix, task in _HF_SUFFIXES:
        if cls.endswith(suffix):
            return task
    return "seq2seq" if getattr(hf.config, "is_encoder_decoder", False) else None


def name_it(task: Optional[str], likely: Optional[str] = None) -> str:
    """The end of a wrong-task message: the task used, the likely one, where to name it."""
    used = f"as task {task!r}" if task else "with no task"
    hint = f"; this looks like {likely!r}" if likely and likely != task else ""
    return (
        f"{used}{hint}: name the model's task (--task, or task= in capped() and the "
        f"callbacks), one of {', '.join(TASK_NAMES)}"
    )
