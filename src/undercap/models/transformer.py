"""The paper's character-level transformer: a GPT decoder (pre-LayerNorm, causal).

Paper Sec. 5: 6 layers, 6 heads, 256 embedding dimensions, context 64, trained with
AdamW on characters. Built in the style of nanoGPT (Karpathy; GPT-2 layout): token +
learned position embeddings, blocks of x + attn(LN(x)) and x + MLP(LN(x)) with a 4x
GELU MLP, a final LayerNorm and a linear head over the vocabulary.

256 is not divisible by 6 heads. We keep the residual width at 256 (as the paper
states) and give each head floor(256 / 6) = 42 dimensions: the query/key/value
projections map 256 -> 6 x 42 = 252 and the output projection maps 252 -> 256. The
alternative (rounding the width to 252 or 258) would change every layer's size;
this changes only the attention's inner width, by 1.6%.

Attention is F.scaled_dot_product_attention(is_causal=True) (written out on torch <
2.0), so position t never sees positions > t. The head is not weight-tied to the token
embedding (nanoGPT ties them): untied, a class-count mismatch is handled per tensor.
"""

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from undercap.errors import UndercapError


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(d), causal) v with dropout p on the weights: torch's fused
    kernel, or on torch < 2.0 (JetPack 4.6's 1.10) the same product written out."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    weights = F.dropout(scores.masked_fill(future, float("-inf")).softmax(-1), p)
    return weights @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        inner = self.n_heads * self.head_dim
        self.qkv = nn.Linear(d_model, 3 * inner)
        self.proj = nn.Linear(inner, d_model)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(self.n_heads * self.head_dim, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = causal_attention(q, k, v, self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Input (B, T) int64 token ids with T <= context; output (B, T, vocab) logits."""

    # the vocabulary-size dependent tensors (see models.weights)
    head_prefixes = ("head.", "tok_emb.")

    def __init__(
        self,
        vocab_size: int,
        context: int = 64,
        n_layers: int = 6,
        n_heads: int = 6,
        d_model: int = 256,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(Block(d_model, n_heads, dropout) for _ in range(n_layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.apply(_init_weights)
        # GPT-2 scales the residual-branch output projections by 1/sqrt(2 * n_layers)
        # so the residual stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.context:
            raise ValueError(f"sequence length {t} exceeds the model's context {self.context}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        return self.head(self.ln_f(self.blocks(x)))


def _init_weights(m: nn.Module) -> None:
    # GPT-2 / nanoGPT initialisation: N(0, 0.02) weights, zero biases.
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, mean=0.0, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)


def build(num_classes: int, input_shape: Sequence[int]) -> CharTransformer:
    """The registry's factory: input_shape is (context,), num_classes the vocabulary."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 1:
        raise UndercapError(f"char-transformer needs input_shape (context,), got {shape}")
    return CharTransformer(vocab_size=num_classes, context=shape[0])
