"""Proxies with recorded curves for the online rule's tests (test_online_train.py and the
callbacks'): one proxy (A) whose wide seed spread fits any target curve and whose r(b)
favours b = 16, and two (B, C) whose curves sit far above any target's and whose r(b)
favours b = 32, so their median starts the run at 32 and the first evaluation moves it
to 16."""

import dataclasses
import json

from select_helpers import make_efficiency, make_profile

from undercap.artifacts import save_efficiency, save_profile

MHZ = 921.6  # a clock of the simulated Nano
#: small-cnn on the simulated Nano draws ~3.4 W here: under every cap the tests use
TABLE = {(16, MHZ): (1.0e-3, 3.0), (32, MHZ): (0.8e-3, 3.2)}
REL = {"A": {16: 0.3, 32: 1.0}, "B": {16: 2.0, 32: 1.0}, "C": {16: 2.0, 32: 1.0}}
FLAT = 100_000.0


def _curves(name: str, target: float) -> dict:
    """b -> seed -> (samples, accuracy): A spans 0 to its target (any prefix fits); B and
    C sit at three times their target (none fits)."""
    if name == "A":
        seeds = {"0": [[0, 0.0], [FLAT, 0.0]], "1": [[0, target], [FLAT, target]]}
    else:
        seeds = {s: [[0, 3 * target], [FLAT, 3 * target]] for s in ("0", "1")}
    return {str(b): seeds for b in (16, 32)}


def proxy_efficiencies(model: str = "small-cnn"):  # type: ignore[no-untyped-def]
    out = []
    for name, rel in REL.items():
        eff = make_efficiency(rel, model=model, n_max=int(FLAT))
        extra = {"curves": _curves(name, eff.target_accuracy), "config": {"b_max": 32}}
        out.append(dataclasses.replace(eff, dataset=f"proxy-{name}", extra=extra))
    return out


def write_selection(tmp_path, main, capsys, limit: str = "5") -> str:  # type: ignore[no-untyped-def]
    """`select --json` over the three proxies: the selection file's path."""
    prof = save_profile(tmp_path / "p.json", make_profile(TABLE, model="small-cnn"))
    argv = ["select", "--profile", str(prof), "--power-limit", limit, "--json"]
    for i, eff in enumerate(proxy_efficiencies()):
        argv += ["--efficiency", str(save_efficiency(tmp_path / f"e{i}.json", eff))]
    assert main(argv) == 0
    path = tmp_path / "sel.json"
    path.write_text(capsys.readouterr().out)
    assert json.loads(path.read_text())["batch_size"] == 32
    return str(path)
