"""Benchmark: a heterogeneous fleet of SIMULATED Jetsons, each under its own power cap,
training one model on Flower (issue 20; the paper's Sec. 6 future work).

Scale (tiny, for 2 CPU cores): the small CNN on the bundled 8x8 digits (1437 training
images split across the nodes, 360 test images the server evaluates on), target 95%.
The fleet (examples/fleet-digits.toml): 2 x Jetson Nano at 3.1 W, 2 x TX2 NX at
4.2 W, 2 x Orin Nano at 5.8 W, and one Nano at 2.9 W, a cap under which the model
cannot run at all (left out of every round, saying so). Devices are simulated:
their clocks, power and energy come from undercap's documented device model; the
training itself is real PyTorch.

Plans, each the same Flower ServerApp/ClientApp and FedNova aggregation:
  (a) baseline1: every node at Baseline 1 (its largest batch at its safe clock),
      equal local work;
  (b) equal: every node at its own Algorithm 1 choice, equal local work;
  (c) balanced (undercap): the same choices, local work that makes nodes finish
      together.
Work per round is the same for all three (2 epochs of the fleet's data in
b_max-equivalent samples, fleet/plan.py). r(b) is estimated once on the digits with
another train/test split (split seed 1; `undercap estimate`, 3 seeds).

Reported per plan and data split (IID and non-IID Dirichlet(0.5)), mean +- std over
seeds 0, 1, 2: rounds, device time and energy (training plus idle waiting) to the
global target, idle time per round summed over nodes, cap violations (node rounds
whose robust peak exceeded the node's own cap; must be 0).

    .venv/bin/python benchmarks/fleet.py        # about 3 minutes on 2 cores (in-process)
    .venv/bin/python benchmarks/fleet.py --backend ray   # Flower's Ray runtime, ~10 min
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import harness as H

OUT = H.RESULTS / "fleet"
FLEET = H.REPO / "examples" / "fleet-digits.toml"
PLANS = ("baseline1", "equal", "balanced")
PARTITIONS = ("iid", "dirichlet:0.5")
SEEDS = (0, 1, 2)
TARGET = 0.95
EPOCHS_PER_ROUND = 2
N_TRAIN = 1437  # the digits' training split (80% of 1797)


def estimate(out: Path) -> Path:
    """r(b) of the small CNN on the digits with split seed 1 (a proxy split), through
    the same library call `undercap run` makes (recipes/common.estimate_efficiency)."""
    from undercap import defaults
    from undercap.artifacts.cache import Cache
    from undercap.artifacts.efficiency import save_efficiency
    from undercap.data.spec import DataSpec
    from undercap.recipes.common import TrainingSetup, estimate_efficiency

    path = out / "efficiency.json"
    if not path.is_file():
        setup = TrainingSetup(
            model="small-cnn",
            batch_sizes=(8, 16, 32, 64, 128),
            max_samples=defaults.ESTIMATE_MAX_SAMPLES,
            eval_every_samples=defaults.ESTIMATE_EVAL_EVERY_SAMPLES,
            torch_device="cpu",
        )
        eff = estimate_efficiency(
            setup,
            DataSpec("digits", seed=1),
            seeds=SEEDS,
            target_accuracy=TARGET,
            target_fraction=None,
            cache=Cache(out / "cache"),
            role="proxy",
            progress=False,
        )
        save_efficiency(path, eff)
    return path


def one_run(plan: str, partition: str, seed: int, eff: Path, backend: str, out: Path) -> dict:
    from undercap.artifacts.efficiency import load_efficiency
    from undercap.data.spec import DataSpec
    from undercap.fleet.config import FleetConfig
    from undercap.fleet.simulation import run_fleet
    from undercap.fleet.spec import load_fleet

    rel = {int(b): float(r) for b, r in load_efficiency(eff).relative.items()}
    cfg = FleetConfig(
        fleet=load_fleet(FLEET),
        model="small-cnn",
        data=DataSpec("digits"),
        target_accuracy=TARGET,
        relative=rel,
        mode=plan,
        partition=partition,
        round_work=float(EPOCHS_PER_ROUND * N_TRAIN),
        max_rounds=80,
        seed=seed,
        cache_dir=str(out / "cache"),
        efficiency_source=str(eff),
    )
    keep = out / f"{partition.replace(':', '')}-{plan}-seed{seed}" if seed == 0 else None
    elapsed = H.stopwatch()
    res = run_fleet(cfg, keep, backend=backend, progress=False)
    return {
        "plan": plan,
        "partition": partition,
        "seed": seed,
        **res.summary(),
        "rounds": len(res.rounds),
        "nodes_trained": len(res.rounds[0].nodes) if res.rounds else 0,
        "nodes_left_out": len(res.rounds[0].excluded) if res.rounds else 0,
        "wall_s": elapsed(),
    }


def _ms(values: list) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.mean(vals):.3g} +- {sd:.2g}"


def table(rows: list) -> str:
    head = ["split", "plan", "reached", "rounds", "time to target (s)", "energy to target (J)",
            "idle s/round", "cap violations"]  # fmt: skip
    body = []
    for part in PARTITIONS:
        for plan in PLANS:
            rs = [r for r in rows if r["plan"] == plan and r["partition"] == part]
            body.append([part, plan, f"{sum(r['reached'] for r in rs)}/{len(rs)}",
                         *(_ms([r[k] for r in rs]) for k in ("rounds_to_target", "time_to_target_s",
                                                            "energy_to_target_j", "idle_s_per_round")),
                         sum(r["cap_violations"] for r in rs)])  # fmt: skip
    return H.md_table(head, body)


def ratios(rows: list) -> str:
    """Per split and seed: (a) and (b) time and energy over (c)'s; mean +- std."""
    out = []
    for part in PARTITIONS:
        for base in ("baseline1", "equal"):
            t, e = [], []
            for seed in SEEDS:
                c = _get(rows, "balanced", part, seed)
                b = _get(rows, base, part, seed)
                if c and b and c["time_to_target_s"] and b["time_to_target_s"]:
                    t.append(b["time_to_target_s"] / c["time_to_target_s"])
                    e.append(b["energy_to_target_j"] / c["energy_to_target_j"])
            out.append(
                f"- {part}: {base} / balanced: time {_ms(t)}x, energy {_ms(e)}x "
                f"(per seed: {', '.join(f'{x:.2f}' for x in t)})"
            )
    return "\n".join(out)


def _get(rows: list, plan: str, part: str, seed: int) -> dict:
    return next(
        (r for r in rows if (r["plan"], r["partition"], r["seed"]) == (plan, part, seed)), {}
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("inprocess", "ray"), default="inprocess")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    elapsed = H.stopwatch()
    eff = estimate(args.out)
    rows = []
    for part in PARTITIONS:
        for seed in SEEDS:
            for plan in PLANS:
                rows.append(one_run(plan, part, seed, eff, args.backend, args.out))
                r = rows[-1]
                print(
                    f"{part} {plan} seed {seed}: rounds {r['rounds_to_target']}, "
                    f"{r['time_to_target_s']} s, {r['energy_to_target_j']} J, "
                    f"violations {r['cap_violations']} ({r['wall_s']:.1f} s wall)",
                    flush=True,
                )
    _write(args.out, rows, args.backend, elapsed())


def _write(out: Path, rows: list, backend: str, wall_s: float) -> None:
    H.write_csv(out / "runs.csv", rows)
    H.write_json(out / "runs.json", {"backend": backend, "wall_s": wall_s, "runs": rows})
    text = (
        "# Fleet benchmark (SIMULATED devices)\n\n"
        f"Backend {backend}; total wall time {wall_s:.0f} s on this host.\n\n"
        + table(rows)
        + "\n\nTime and energy of (a) and (b) relative to (c), per seed:\n\n"
        + ratios(rows)
        + "\n"
    )
    H.write_text(out / "table.md", text)
    print(text)


if __name__ == "__main__":
    main()
