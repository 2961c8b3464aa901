"""A Hugging Face model fed by undercap's own loops, which call `model(x)` with one
tensor of token ids per batch (train/loop/, estimate, profiling).

A forward pre-hook on the unmodified model (nothing wraps it, so its state dict and
outputs stay the model's own) rebuilds from that tensor what the Trainer's batch dicts
give: `attention_mask = input_ids != pad_token_id` (data/items.py found the one padding
id) and, for a seq2seq item packed as (2, T) (data/user.py), `model(input_ids=, labels=)`:
the model shifts the labels into its decoder's inputs (teacher forcing).
Calls that name `input_ids` (the Trainer's, workload counting) pass unchanged. See
docs/guides/hugging-face.md, including why padding still costs work.
"""

from typing import Any, Optional

import torch
from torch import nn

from undercap.models.tasks import hf_model_in

_HOOKED = "_undercap_inputs_hook"


def feed_from_tensor(model: nn.Module, pad_token_id: Optional[int], seq2seq: bool) -> nn.Module:
    """Install the pre-hook (module docstring) on a Hugging Face model; other models,
    and a Hugging Face model with no padding that is not seq2seq, are left alone."""
    hf = hf_model_in(model)
    if hf is not model or (pad_token_id is None and not seq2seq) or hasattr(model, _HOOKED):
        return model

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> Any:
        if not args or not torch.is_tensor(args[0]) or "input_ids" in kwargs:
            return None
        x, kw = args[0], dict(kwargs)
        if seq2seq and x.dim() == 3 and x.shape[1] == 2:
            x, kw["labels"] = x[:, 0].contiguous(), x[:, 1].contiguous()
        kw["input_ids"] = x
        if pad_token_id is not None and "attention_mask" not in kw:
            kw["attention_mask"] = (x != pad_token_id).to(torch.int64)
        return args[1:], kw

    setattr(model, _HOOKED, model.register_forward_pre_hook(hook, with_kwargs=True))
    return model
