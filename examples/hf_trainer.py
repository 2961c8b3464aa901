"""The Hugging Face Trainer under a power cap: `UndercapTrainerCallback`.

Run from the repository root: `python examples/hf_trainer.py` (needs
`pip install 'undercap[hf]'`; nothing is downloaded). An unmodified `GPT2LMHeadModel`
(examples/hf_gpt2.py) learns a repetitive character corpus with the stock `Trainer`;
the callback picks the batch size and GPU clock for a 4 W cap on a simulated Jetson
Nano (Algorithm 1 on a profile and r(b), typed in here), sets the Trainer's batch
size and scaled learning rate, counts device time and energy, and stops the Trainer
when its own `eval_accuracy` reaches the target.
"""

import sys
import tempfile
from pathlib import Path

import torch
from transformers import Trainer, TrainingArguments

sys.path.insert(0, "examples")
import hf_gpt2  # noqa: E402

import undercap  # noqa: E402
from undercap.train.hf import UndercapTrainerCallback  # noqa: E402

CONTEXT, VOCAB = 32, 16
ids = torch.tensor([i % VOCAB for i in range(40 * CONTEXT)])  # "abcd...abcd...": learnable
items = [{"input_ids": w, "labels": w} for w in ids.view(-1, CONTEXT)]  # the model shifts


def accuracy(pred):  # next-token accuracy: logits at t predict the label at t + 1
    logits, labels = pred
    return {"accuracy": float((logits[:, :-1] == labels[:, 1:]).mean())}


def argmax(logits, labels):  # keep only the predictions, not the logits, for the metric
    return logits.argmax(-1)


torch.manual_seed(0)
model = hf_gpt2.build(num_classes=VOCAB, input_shape=(CONTEXT,))
with undercap.open_device("sim:jetson-nano") as device:
    profile = undercap.run_profile(
        device,
        "examples/hf_gpt2.py:build",
        (CONTEXT,),
        [8, 16, 32],
        num_classes=VOCAB,
        task="next-token",
        progress=False,
    )
    callback = UndercapTrainerCallback(
        device,
        power_limit_w=4.0,
        profile=profile,
        relative={8: 0.6, 16: 0.8, 32: 1.0},  # r(b): `undercap estimate`
        model=model,
        input_shape=(CONTEXT,),
        task="next-token",
        metric="eval_accuracy",
        target_accuracy=0.9,
    )
    args = TrainingArguments(
        output_dir=str(Path(tempfile.gettempdir()) / "hf-trainer-out"),  # save_strategy "no"
        per_device_train_batch_size=callback.batch_size,  # the selected b
        learning_rate=3e-3,  # at the largest batch; the callback scales it
        max_steps=200,
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
        train_dataset=items,
        eval_dataset=items[:8],
        compute_metrics=accuracy,
        preprocess_logits_for_metrics=argmax,
        callbacks=[callback],
    )
    with callback:  # the device is restored even if training fails
        trainer.train()

result = callback.result()
print(
    f"batch {result.batch_size} at {result.freq_mhz_start:g} MHz under {result.power_limit_w} W: "
    f"reached={result.reached} after {result.samples} samples, "
    f"{result.train_time_s:.2f} s (simulated device), {result.energy_j:.1f} J"
)
