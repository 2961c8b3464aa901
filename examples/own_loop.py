"""Your own PyTorch training loop under a power cap (the README's example).

Run from the repository root: `python examples/own_loop.py`. It profiles the model
on a simulated Jetson Nano, picks the batch size and GPU clock for a 3.5 W cap with
Algorithm 1 from r(b) (here typed in; `undercap estimate` measures it), then trains
with a plain PyTorch loop inside `undercap.capped`, which locks the clock, samples
power, runs the guard and counts device time and energy.
"""

import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, "examples")
import my_data  # noqa: E402
import my_model  # noqa: E402

import undercap  # noqa: E402

train_set, test_set = my_data.load_target()
x_test = torch.stack([x for x, _ in test_set])
y_test = torch.stack([y for _, y in test_set])
torch.manual_seed(0)
model = my_model.build(num_classes=10, input_shape=(1, 16, 16))

with undercap.open_device("sim:jetson-nano") as device:
    profile = undercap.run_profile(
        device, "examples/my_model.py:build", (1, 16, 16), [16, 32, 64, 128], progress=False
    )
    relative = {16: 0.45, 32: 0.55, 64: 0.75, 128: 1.0}  # r(b): `undercap estimate`
    with undercap.capped(
        device,
        power_limit_w=3.5,
        profile=profile,
        relative=relative,
        target_accuracy=0.9,
        model=model,
        input_shape=(1, 16, 16),
    ) as cap:
        opt = torch.optim.Adam(model.parameters(), lr=cap.lr(1e-3))
        loader = DataLoader(train_set, batch_size=cap.batch_size, shuffle=True, drop_last=True)
        while not cap.done and cap.samples < 20_000:
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                cap.step(len(x))  # device time, energy, power guard
            with cap.paused():  # evaluation is not training time
                model.eval()
                with torch.no_grad():
                    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
                model.train()
            cap.report(accuracy)

result = cap.result()
print(
    f"batch {result.batch_size} at {result.freq_mhz_start:g} MHz under {result.power_limit_w} W: "
    f"{result.time_to_accuracy_s:.2f} s to {cap.target_accuracy:.0%} (simulated device), "
    f"{result.energy_j:.1f} J, peak {result.peak_power_w:.2f} W"
)
