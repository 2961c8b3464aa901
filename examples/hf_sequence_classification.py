"""A Hugging Face Trainer fine-tuning a sequence classifier under a power cap.

Run from the repository root: `python examples/hf_sequence_classification.py` (needs
`pip install 'undercap[hf]'`; nothing is downloaded). A typical Trainer script: an
unmodified `BertForSequenceClassification` from a tiny config, padded token ids with
an `attention_mask` and `token_type_ids`, one label per sequence (does the marker
token appear?), `compute_metrics` and `eval_strategy="steps"`, plus
`UndercapTrainerCallback` as the docs add it. Neither task nor input shape is
given: undercap infers "sequence-classification" from the model
(models/taskprobe.py) and the input shape from the longest training item. The callback picks
the batch size and clock for a 3.2 W cap on a simulated Jetson Nano (Algorithm 1 on a
profile and r(b), typed in here), and stops the Trainer at 90% eval accuracy.

`build` is also the model factory for the CLI:
`--model examples/hf_sequence_classification.py:build`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch

VOCAB, LENGTH, MARKER, PAD = 200, 16, 7, 0


def build(num_classes: int = 2, input_shape: Sequence[int] = (LENGTH,)) -> Any:
    """An unmodified BertForSequenceClassification from a tiny config."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=int(input_shape[-1]),
        num_labels=int(num_classes),
        pad_token_id=PAD,
    )
    return BertForSequenceClassification(config)


def items(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Padded sequences of 6..16 tokens; label 1 when the marker token appears."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(6, LENGTH + 1, (1,), generator=gen))
        ids = torch.randint(MARKER + 1, VOCAB, (length,), generator=gen)
        if i % 2:  # half of them carry the marker somewhere
            ids[int(torch.randint(0, length, (1,), generator=gen))] = MARKER
        pad = LENGTH - length
        out.append(
            {
                "input_ids": torch.cat([ids, torch.full((pad,), PAD)]),
                "attention_mask": torch.cat([torch.ones(length), torch.zeros(pad)]).long(),
                "token_type_ids": torch.zeros(LENGTH, dtype=torch.long),
                "labels": torch.tensor(i % 2),
            }
        )
    return out


def data(seed: int = 0) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]]]:
    """(train, test) for the CLI: `--target py:examples/hf_sequence_classification.py:data`."""
    return items(1024, seed), items(256, seed + 1)


def compute_metrics(pred: Any) -> dict[str, float]:
    logits, labels = pred
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def main() -> None:
    from transformers import Trainer, TrainingArguments

    import undercap
    from undercap.train.hf import UndercapTrainerCallback

    train_set, test_set = data()
    torch.manual_seed(0)
    model = build()
    with undercap.open_device("sim:jetson-nano") as device:
        profile = undercap.run_profile(
            device,
            "examples/hf_sequence_classification.py:build",
            (LENGTH,),
            [8, 16, 32, 64],
            num_classes=2,
            progress=False,
        )
        callback = UndercapTrainerCallback(
            device,
            power_limit_w=3.2,
            profile=profile,
            relative={8: 0.5, 16: 0.6, 32: 0.8, 64: 1.0},  # r(b): `undercap estimate`
            model=model,  # its task and input shape are inferred (no task=, input_shape=)
            metric="eval_accuracy",
            target_accuracy=0.9,
        )
        args = TrainingArguments(
            output_dir=str(Path(tempfile.gettempdir()) / "hf-seqcls-out"),
            per_device_train_batch_size=callback.batch_size,  # the selected b
            learning_rate=3e-3,  # at the largest batch; the callback scales it
            num_train_epochs=30,
            eval_strategy="steps",
            eval_steps=10,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=train_set,
            eval_dataset=test_set,
            compute_metrics=compute_metrics,
            callbacks=[callback],
        )
        with callback:  # the device is restored even if training fails
            trainer.train()

    r = callback.result()
    print(
        f"batch {r.batch_size} at {r.freq_mhz_start:g} MHz under {r.power_limit_w} W: "
        f"reached={r.reached} after {r.samples} samples, {r.train_time_s:.2f} s "
        f"(simulated device), {r.energy_j:.1f} J, peak {r.peak_power_w:.2f} W, "
        f"limit exceeded: {r.limit_exceeded}"
    )


if __name__ == "__main__":
    main()
