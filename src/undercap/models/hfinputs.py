"""A Hugging Face model fed by undercap's own loops, which call `model(x)` with one
tensor of token ids per batch (train/loop/, estimate, profiling).

Two things a Hugging Face model gets from its Trainer's batch dicts are rebuilt here
from that tensor, by a forward pre-hook on the unmodified model (nothing wraps it, so
its state dict and outputs stay the model's own):

* `attention_mask`: where the data were padded (data/items.py found the one padding
  id under the items' masks), the mask is `input_ids != pad_token_id`, so padding
  is not attended to, as with the Trainer. It still costs work: the kernels run
  over the padded length (masking only changes the attention scores), which is why
  profiles and the simulated clock charge every position.
* seq2seq labels: a seq2seq item is packed as (2, T), input ids and labels
  (data/user.py); the hook calls `model(input_ids=, labels=)`, and the model shifts
  the labels right into its decoder's inputs (teacher forcing) and returns its own
  loss over the labels that are not -100.

Calls that name `input_ids` (the Trainer's, workload counting) pass unchanged.
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

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    setattr(model, _HOOKED, handle)
    return model
