"""Benchmark: training under a cap that changes, three strategies side by side, on the
SIMULATED Jetson Nano and TX2 NX (beyond the paper: its Sec. 6 limitation).

Schedules (time on the device's clock from the start of training):
* cloudy: NREL MIDC Golden, CO, 2018-10-14 (broken clouds), from data/power;
* clear:  NOAA SURFRAD Alamosa, CO, 2016-01-01 (a clear winter day);
* stepped: 5 -> 3.1 -> 0 (outage) -> 4 -> 3.4 W of the Nano's range, repeating
  (scaled to the TX2 NX's range), no data needed.
The solar days go through `undercap solar` (recipes/solar.py): daylight compressed
into --day-s seconds of training, the panel sized so that the mean irradiance of the
day's brightest two hours gives 1.3x the model's unconstrained peak power (a panel
matched to the device; clouds and the low sun of morning and evening give less),
no battery, 0.5 W drawn by the rest of the system.

Strategies, each the same training (small CNN, digits, seeds 0..2):
* static: the paper's way: the configuration Algorithm 1 picks for the lowest cap at
  which the model can run, held for the whole run (it pauses when the cap falls
  below that configuration's peak);
* ours: re-select (b, f) at every change from the proxy's r(b) (train/session/follow.py);
* hindsight: the same with the target's own r(b) (an oracle: it knows N(b) on the
  target, which no real run does).
Reported per device and schedule: time to accuracy (training + waiting for power),
energy (including idle power while paused), and cap violations (training segments
whose robust peak went above their cap), mean +- std over seeds.

    .venv/bin/python benchmarks/schedule.py            # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import harness as H

OUT = H.RESULTS / "schedule"
POWER = H.DATA / "power"  # the solar days; without them only the stepped schedule runs
DAYS = {
    "cloudy": "ghi-golden-co-2018-10-14-cloudy.csv",
    "clear": "ghi-alamosa-co-2016-01-01-clear.csv",
}
BATCHES = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Fixed:
    """static: one configuration, paused whenever the cap is below its peak plus the
    safety margin (the same feasibility test selection uses)."""

    config: object
    relative: dict
    n_max: float

    def choose(self, limit_w, p=0.0, energy_j=0.0):  # type: ignore[no-untyped-def]
        ok = limit_w is None or limit_w >= self.lowest_feasible_w()
        return self.config if ok else None

    def lowest_feasible_w(self) -> float:
        """The cap it runs under (the follower says so while it waits for power)."""
        return self.config.peak_power_w + self.config.margin_w  # type: ignore[attr-defined]


def setup(device: str, cache: Path):  # type: ignore[no-untyped-def]
    """The profile (full sweep, cached) and r(b) on the proxy and on the target."""
    from undercap.artifacts.cache import Cache
    from undercap.data.spec import DataSpec
    from undercap.devices import open_device
    from undercap.recipes.common import TrainingSetup, estimate_efficiency, profile_model

    store = Cache(cache)
    quiet = lambda _m: None  # noqa: E731
    with open_device(device) as dev:
        profile = profile_model(dev, "small-cnn", (1, 8, 8), BATCHES, num_classes=10,
                                cache=store, progress=False, log=quiet)  # fmt: skip
    ts = TrainingSetup("small-cnn", BATCHES, max_samples=30_000, eval_every_samples=128,
                       torch_device="cpu")  # fmt: skip
    effs = {
        role: estimate_efficiency(
            ts,
            spec,
            seeds=(0, 1, 2),
            target_accuracy=0.95,
            target_fraction=None,
            cache=store,
            role=role,
            progress=False,
            log=quiet,
        )  # fmt: skip
        for role, spec in (
            ("proxy", DataSpec("digits", limit=360, seed=1)),
            ("target", DataSpec("digits")),
        )  # fmt: skip
    }
    return profile, effs


def schedules(profile, day_s: float):  # type: ignore[no-untyped-def]
    from undercap.recipes.solar import SolarSystem, daylight, read_irradiance, solar_schedule
    from undercap.train.cap import PowerSchedule

    peak = max(r.peak_power_w for r in profile.rows)
    low = min(r.peak_power_w for r in profile.rows)
    out = {}
    for name, file in DAYS.items():
        path = POWER / file
        if not path.is_file():
            print(f"({name}: {path} not found, skipped)", file=sys.stderr)
            continue
        lit = sorted(g for _, g in daylight(read_irradiance(path)))
        bright = sum(lit[-120:]) / len(lit[-120:])  # the day's brightest two hours
        area = 1.3 * peak / (bright * 0.20 * 0.86)
        system = SolarSystem(area_m2=area)
        out[name] = solar_schedule(path, system, duration_s=day_s, repeat=True)[0]
    levels = [
        peak * 1.05,
        low + 0.3 * (peak - low),
        0.0,
        low + 0.8 * (peak - low),
        low + 0.5 * (peak - low),
    ]
    step = day_s / 20
    times = tuple(i * step for i in range(20))
    out["stepped"] = PowerSchedule(
        times, tuple(round(levels[i % 5], 2) for i in range(20)), "stepped"
    )
    return out


def strategies(profile, effs):  # type: ignore[no-untyped-def]
    from undercap.select import lowest_feasible_power_w, select_ours
    from undercap.train.session.follow import OperatingPoint, Reselector

    proxy, target = effs["proxy"], effs["target"]
    low = select_ours(profile, proxy.relative, lowest_feasible_power_w(profile))
    fixed = OperatingPoint(
        low.batch_size, low.freq_mhz, low.peak_power_w, low.power_margin_w or 0.0
    )
    return {
        "static": Fixed(fixed, dict(proxy.relative), proxy.samples_bmax),
        "ours": Reselector(profile, proxy.relative, n_max=proxy.samples_bmax),
        "hindsight": Reselector(profile, target.relative, n_max=target.samples_bmax),
    }


def train(device: str, schedule, reselector, seed: int, data):  # type: ignore[no-untyped-def]
    from undercap.devices import open_device
    from undercap.train import train_on_device

    with open_device(device, seed=seed) as dev:
        return train_on_device(
            dev, "small-cnn", data, batch_size=256, max_batch_size=256, target_accuracy=0.95,
            max_samples=30_000, eval_every_samples=128, seed=seed, torch_device="cpu",
            progress=False, power_schedule=schedule, reselector=reselector,
        )  # fmt: skip


def violations(result) -> int:  # type: ignore[no-untyped-def]
    return sum(
        1
        for s in result.segments
        if s["batch_size"] is not None and s["power_limit_w"] is not None
        and s["peak_power_w"] is not None and s["peak_power_w"] > s["power_limit_w"]
    )  # fmt: skip


def fmt(xs: list) -> str:  # type: ignore[type-arg]
    if not xs:
        return "not reached"
    m = statistics.fmean(xs)
    return f"{m:.3g}" if len(xs) < 2 else f"{m:.3g} ± {statistics.stdev(xs):.2g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="sim:jetson-nano,sim:jetson-tx2nx")
    ap.add_argument("--day-s", type=float, default=4.0, help="daylight compressed into (s)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--cache-dir", type=Path, default=H.REPO / "runs" / "bench-schedule")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from undercap.data.spec import DataSpec, load_splits
    from undercap.report.schedule import plot_schedule

    data = load_splits(DataSpec("digits"))
    rows, elapsed = [], H.stopwatch()
    for device in args.devices.split(","):
        profile, effs = setup(device, args.cache_dir)
        for name, schedule in schedules(profile, args.day_s).items():
            for strategy, reselector in strategies(profile, effs).items():
                runs = [train(device, schedule, reselector, s, data) for s in range(args.seeds)]
                rows.append(_row(device, name, strategy, runs))
                print(_line(rows[-1]), flush=True)
                if strategy == "ours":
                    sim = " (simulated)" if runs[0].simulated else ""
                    plot_schedule(runs[0].segments, args.out / f"{name}-{device.replace(':', '-')}.png",
                                  title=f"ours, {name} day, small CNN on {device}{sim}", cap=schedule)  # fmt: skip
    text = _markdown(rows, args, elapsed())
    H.write_text(args.out / "results.md", text)
    H.write_json(args.out / "results.json", {"rows": rows})
    print(text)
    return 0


def _row(device: str, name: str, strategy: str, runs: list) -> dict:  # type: ignore[type-arg]
    done = [r for r in runs if r.reached]
    return {
        "device": device, "schedule": name, "strategy": strategy, "seeds": len(runs),
        "reached": len(done), "time_s": [r.time_to_accuracy_s for r in done],
        "energy_j": [r.energy_j for r in done], "paused_s": [r.pause_time_s for r in done],
        "violations": [violations(r) for r in runs], "segments": [len(r.segments) for r in runs],
        "configs": sorted({f"{s['batch_size']}@{s['freq_mhz']:g}" for r in runs
                           for s in r.segments if s["batch_size"]}),
    }  # fmt: skip


def _line(r: dict) -> str:  # type: ignore[type-arg]
    return (f"{r['device']} {r['schedule']:8s} {r['strategy']:9s} time {fmt(r['time_s'])} s, "
            f"energy {fmt(r['energy_j'])} J, violations {sum(r['violations'])}, "
            f"reached {r['reached']}/{r['seeds']}")  # fmt: skip


def _markdown(rows: list, args: argparse.Namespace, wall_s: float) -> str:  # type: ignore[type-arg]
    head = ["device", "schedule", "strategy", "time to accuracy (s)", "vs static", "vs hindsight",
            "energy (J)", "paused (s)", "cap violations", "configurations"]  # fmt: skip
    by = {(r["device"], r["schedule"], r["strategy"]): r for r in rows}
    body = []
    for r in rows:
        mean = statistics.fmean(r["time_s"]) if r["time_s"] else None
        ref = {k: by.get((r["device"], r["schedule"], k)) for k in ("static", "hindsight")}
        rel = [
            "-"
            if mean is None or not x or not x["time_s"]
            else f"{mean / statistics.fmean(x['time_s']) - 1:+.1%}"
            for x in ref.values()
        ]
        body.append([f"{r['device']} (simulated)", r["schedule"], r["strategy"], fmt(r["time_s"]),
                     *rel, fmt(r["energy_j"]), fmt(r["paused_s"]), sum(r["violations"]),
                     ", ".join(r["configs"])])  # fmt: skip
    cmd = f"python benchmarks/schedule.py --day-s {args.day_s:g} --seeds {args.seeds}"
    return "\n".join(
        [f"# Changing power caps: static vs ours vs hindsight ({wall_s:.0f} s wall)", "",
         f"`{cmd}`; small CNN on digits to 95% test accuracy; simulated devices, virtual clock; "
         "mean ± std over seeds; time includes waiting for power.", "", H.md_table(head, body), ""]
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
