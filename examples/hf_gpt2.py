"""An unmodified Hugging Face `GPT2LMHeadModel`, built from a tiny config (no
download): use it with `--model examples/hf_gpt2.py:build` on `text:` data.

undercap calls `build` with `num_classes=` (the data's vocabulary, 97 characters for
`text:` corpora) and `input_shape=` (the context, `(64,)`); the model returns a
`CausalLMOutputWithCrossAttentions`, whose `.logits` undercap trains on.
"""

from __future__ import annotations

from typing import Sequence

from transformers import GPT2Config, GPT2LMHeadModel


def build(num_classes: int = 97, input_shape: Sequence[int] = (64,)) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=int(num_classes),
        n_positions=int(input_shape[0]),
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=0,  # GPT-2's own 50256 is outside a small vocabulary
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)
