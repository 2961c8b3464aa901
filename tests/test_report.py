"""Comparison records, statistics, tables and figures from hand-made records."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest

from undercap.artifacts.comparison import (
    ChoiceRecord,
    Comparison,
    RunRecord,
    gap_pct,
    speedup,
    stat,
    summarize,
    summary_for,
)
from undercap.errors import ArtifactError
from undercap.report.compare import markdown_report, plot_bars, write_comparison_report
from undercap.report.compare_csv import RUN_COLUMNS, SUMMARY_COLUMNS, runs_csv, summary_csv

# method -> limit -> (batch, freq, per-seed times); None time = not reached
TIMES = {
    "baseline1": {5.0: (256, 460.8, [100.0, 110.0, 120.0]), None: (256, 921.6, [50.0, 52.0, 54.0])},
    "baseline2": {5.0: (64, 460.8, [80.0, 84.0, 88.0]), None: (64, 921.6, [40.0, 41.0, 45.0])},
    "ours": {5.0: (32, 614.4, [50.0, 55.0, None]), None: (64, 921.6, [40.0, 41.0, 45.0])},
    "oracle": {5.0: (32, 614.4, [48.0, 50.0, 52.0]), None: (32, 921.6, [38.0, 40.0, 42.0])},
}


def _run(method: str, limit: float | None, seed: int, b: int, f: float, t: float | None):
    return RunRecord(
        method=method,
        power_limit_w=limit,
        seed=seed,
        batch_size=b,
        freq_mhz=f,
        reached=t is not None,
        time_to_accuracy_s=t,
        energy_j=None if t is None else 4.0 * t,
        peak_power_w=4.5 if limit else 9.0,
        mean_power_w=4.0,
        samples_to_target=None if t is None else 1000,
        samples_trained=2000,
        final_accuracy=0.9,
        guard_events=1 if (method == "ours" and seed == 2 and limit) else 0,
        shared_from="baseline2@none" if method == "ours" and limit is None else None,
    )


def make_comparison(simulated: bool = True) -> Comparison:
    choices, runs = [], []
    for m, per_limit in TIMES.items():
        for limit, (b, f, times) in per_limit.items():
            safe = (460.8 if limit else 921.6) if m.startswith("baseline") else None
            choices.append(ChoiceRecord(m, limit, b, f, 1e-3, 4.0, 1.0, safe))
            runs += [_run(m, limit, s, b, f, t) for s, t in enumerate(times)]
    return Comparison(
        device="sim:jetson-nano",
        simulated=simulated,
        model="small-cnn",
        proxy="digits",
        target="digits-b",
        target_accuracy=0.9,
        power_limits_w=(None, 5.0),
        seeds=(0, 1, 2),
        choices=tuple(choices),
        runs=tuple(runs),
        settings={"max_samples": 2000},
    )


def test_stat_speedup_gap():
    s = stat([1.0, None, 3.0])
    assert (s.mean, s.n) == (2.0, 2)
    assert s.std == pytest.approx(statistics.stdev([1.0, 3.0]))
    assert stat([2.0]).std is None and stat([None]).mean is None
    assert speedup(100.0, 50.0) == 2.0 and speedup(None, 1.0) is None
    assert gap_pct(55.0, 50.0) == pytest.approx(10.0) and gap_pct(50.0, None) is None


def test_summary_numbers():
    c = make_comparison()
    rows = summarize(c)
    assert len(rows) == 8
    assert [r.power_limit_w for r in rows[:4]] == [5.0] * 4  # tight limits first
    b1 = summary_for(rows, "baseline1", 5.0)
    assert b1.time_mean_s == pytest.approx(110.0)
    assert b1.time_std_s == pytest.approx(statistics.stdev([100.0, 110.0, 120.0]))
    assert b1.energy_mean_j == pytest.approx(440.0)
    assert b1.speedup_vs_baseline1 == pytest.approx(1.0)
    ours = summary_for(rows, "ours", 5.0)
    assert (ours.n_runs, ours.n_reached) == (3, 2)
    assert ours.time_mean_s == pytest.approx(52.5)  # the unfinished seed is left out
    assert ours.speedup_vs_baseline1 == pytest.approx(110.0 / 52.5)
    assert ours.speedup_vs_baseline2 == pytest.approx(84.0 / 52.5)
    assert ours.gap_to_oracle_pct == pytest.approx((52.5 / 50.0 - 1) * 100)
    assert ours.guard_events == 1
    oracle_none = summary_for(rows, "oracle", None)
    assert oracle_none.gap_to_oracle_pct == pytest.approx(0.0)
    assert (oracle_none.batch_size, oracle_none.freq_mhz) == (32, 921.6)


def test_json_round_trip():
    c = make_comparison()
    obj = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    back = Comparison.from_dict(obj)
    assert back == c
    assert obj["summary"][0]["method"] == "baseline1"
    with pytest.raises(ArtifactError, match="schema"):
        Comparison.from_dict({**obj, "schema": "nope"})
    del obj["runs"]
    with pytest.raises(ArtifactError, match="malformed"):
        Comparison.from_dict(obj)


def test_markdown_table():
    c = make_comparison()
    md = markdown_report(c)
    assert "simulated" in md.splitlines()[0]
    row5 = next(line for line in md.splitlines() if line.startswith("| 5 W |"))
    cells = [x.strip() for x in row5.strip("|").split("|")]
    # limit, B1, B2, ours, oracle, speed-up vs B1, vs B2, gap
    assert cells[1] == "110 ± 10.0"
    assert cells[3].startswith("52.5 ± ") and "(2/3 reached)" in cells[3]
    assert cells[5] == f"{110 / 52.5:.2f}x"
    assert cells[6] == f"{84 / 52.5:.2f}x"
    assert cells[7] == "+5.0%"
    assert "| 5 W | 460.8 MHz | 256 @ 460.8 MHz | 64 @ 460.8 MHz | 32 @ 614.4 MHz |" in md
    assert "did not reach the target" in md and "power guard" in md and "reuse" in md
    lines = md.splitlines()
    assert lines.index(row5) < lines.index(next(x for x in lines if x.startswith("| none |")))
    assert "simulated" not in markdown_report(make_comparison(simulated=False)).splitlines()[0]


def test_csvs_load_with_csv_module():
    c = make_comparison()
    runs = list(csv.DictReader(io.StringIO(runs_csv(c))))
    assert len(runs) == 24 and tuple(runs[0]) == RUN_COLUMNS
    assert {r["simulated"] for r in runs} == {"1"}
    unfinished = [r for r in runs if r["reached"] == "0"]
    assert len(unfinished) == 1 and unfinished[0]["time_to_accuracy_s"] == ""
    assert {r["power_limit"] for r in runs} == {"5 W", "none"}
    summary = list(csv.DictReader(io.StringIO(summary_csv(c))))
    assert len(summary) == 8 and tuple(summary[0]) == SUMMARY_COLUMNS
    ours = next(r for r in summary if r["method"] == "ours" and r["power_limit"] == "5 W")
    assert float(ours["time_mean_s"]) == pytest.approx(52.5)
    assert float(ours["speedup_vs_baseline1"]) == pytest.approx(110.0 / 52.5)
    none_row = next(r for r in summary if r["power_limit"] == "none")
    assert none_row["power_limit_w"] == ""


def test_figures_and_report_files(tmp_path):
    c = make_comparison()
    paths = write_comparison_report(c, tmp_path / "out")
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 0
    assert paths["time_figure"].read_bytes()[:4] == b"\x89PNG"
    assert not list((tmp_path / "out").glob(".*"))  # no temp files left behind
    with pytest.raises(ValueError):
        plot_bars(c, tmp_path / "x.png", quantity="power")
