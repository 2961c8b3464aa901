"""Plain-text corpora for the character transformer.

One fixed vocabulary for every corpus (models/vocab.py: "\\n", printable ASCII, <unk>).
Normalisation before mapping, so typographic variants are not <unk>: CRLF and CR ->
LF, the typographic spaces, quotes, dashes and ellipsis of `_REPLACE` -> ASCII, then
Unicode NFKD decomposition with combining marks dropped (so e-acute -> e).

Samples: the corpus (files joined by a newline) is cut into windows of context + 1
characters with stride `context` (x = window[:-1], y = window[1:]: every character but
the first is a target once), split 90/10 train/test by a seeded shuffle (the paper's).
"""

import unicodedata
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch

from undercap._compat import isascii
from undercap.artifacts.io import decode_text, has_bom
from undercap.errors import DataError
from undercap.models.vocab import UNK_ID, VOCAB, VOCAB_SIZE

_REPLACE = str.maketrans(
    {
        **dict.fromkeys("\t\u00a0", " "),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u2013\u2014\u2212", "-"),
        "\u2026": "...",
    }
)
_LUT = np.full(0x110000, UNK_ID, dtype=np.uint8)
_LUT[[ord(c) for c in VOCAB[:-1]]] = np.arange(VOCAB_SIZE - 1, dtype=np.uint8)


def normalise_text(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_REPLACE)
    if isascii(text):
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def encode(text: str) -> np.ndarray:
    """Token ids (uint8) of `text` after normalisation."""
    codes = np.frombuffer(normalise_text(text).encode("utf-32-le"), dtype=np.uint32)
    return _LUT[codes]


def read_corpus(paths: List[Path]) -> str:
    texts = []
    for p in paths:
        if not p.is_file():
            raise DataError(f"text: {p} not found; expected a UTF-8 plain-text file")
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise DataError(f"text: cannot read {p}: {e.strerror or e}") from e
        if not has_bom(raw) and b"\x00" in raw[:65536]:  # UTF-16/32 have NULs, and a mark
            raise DataError(f"text: {p} looks binary (NUL bytes); expected UTF-8 plain text")
        texts.append(decode_text(raw, p, what="text:", error=DataError))
    return "\n".join(texts)


def windows(ids: np.ndarray, context: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(N, context) inputs and next-character targets from non-overlapping windows (the
    caller checks that the corpus holds at least one)."""
    starts = np.arange((ids.size - 1) // context) * context
    idx = starts[:, None] + np.arange(context + 1)[None, :]
    w = torch.from_numpy(ids[idx].astype(np.int64))
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def split_windows(n: int, seed: int, limit: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Seeded 90/10 split of n windows; `limit` keeps a seeded random subset of at
    most `limit` train and limit // 9 test windows spread over the whole corpus."""
    perm = np.random.default_rng(seed).permutation(n)
    k = min(max(int(round(0.9 * n)), 1), n - 1)
    tr, te = perm[:k], perm[k:]
    if limit is not None:
        tr, te = tr[:limit], te[: max(limit // 9, 1)]
    return np.sort(tr), np.sort(te)
