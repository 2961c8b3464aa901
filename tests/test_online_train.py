"""The online rule on a running run (train/online.py): the selection's online block, the
prefix re-anchored after a switch, and `undercap train --from-selection --online` on the
simulated Nano (a switch recorded as a segment, like a cap-driven one)."""

import json

import pytest
from online_helpers import REL, proxy_efficiencies, write_selection

from undercap import defaults
from undercap.artifacts.selection import load_selection
from undercap.cli import main
from undercap.errors import UndercapError
from undercap.select.core import Choice
from undercap.select.online_data import from_block, online_block, thin
from undercap.train.online import OnlineRule

TRAIN = ["train", "--device", "sim:jetson-nano", "--dataset", "digits", "--input-shape", "1x8x8",
         "--limit", "600", "--target-accuracy", "0.99", "--max-samples", "512", "--eval-every",
         "128", "--torch-device", "cpu", "--no-progress"]  # fmt: skip


def test_thin_keeps_the_ends_and_at_most_the_count() -> None:
    curve = [(i * 10.0, i / 100) for i in range(101)]
    out = thin(curve, 7)
    assert len(out) == 7 and out[0] == [0.0, 0.0] and out[-1] == [1000.0, 1.0]
    assert [p[0] for p in out] == sorted(p[0] for p in out)
    assert thin(curve[:5], 7) == [[float(n), a] for n, a in curve[:5]]


def test_block_round_trips_and_needs_two_proxies_with_curves() -> None:
    effs = proxy_efficiencies()
    block = online_block(["A", "B", "C"], effs)
    assert block is not None and block["samples_bmax"] == 100_000
    data = from_block({"online": json.loads(json.dumps(block))})
    assert [p.name for p in data.proxies] == ["A", "B", "C"]
    assert data.proxies[0].relative == REL["A"] and len(data.proxies[0].curves[16]) == 2
    assert online_block(["A"], effs[:1]) is None  # one proxy: nothing to re-weigh
    bare = [e.__class__(**{**e.__dict__, "extra": {}}) for e in effs]
    assert online_block(["A", "B", "C"], bare) is None  # no recorded curves
    with pytest.raises(UndercapError, match="has no online block"):
        from_block({}, "old.json")


def _rule(target: float = 0.9) -> OnlineRule:
    data = from_block({"online": online_block(["A", "B", "C"], proxy_efficiencies())})
    cands = {
        16: Choice("ours", 16, 921.6, 1.0e-3, 3.0, None, None, 5.0),
        32: Choice("ours", 32, 921.6, 0.8e-3, 3.2, None, None, 5.0),
    }
    return OnlineRule(data, target, lambda limit: dict(cands))


def test_rule_starts_at_the_median_and_switches_on_the_first_look() -> None:
    rule = _rule()
    assert rule.relative == {16: 2.0, 32: 1.0}  # the median of A, B, C: stays at 32
    rule.count(32, 128)
    d = rule.observe(0.3, 32, 5.0)
    assert d is not None and d.switch and d.batch_size == 16  # A alone fits the prefix
    assert rule.relative == pytest.approx(REL["A"], rel=1e-6)
    assert d.remaining_s < (1 - defaults.ONLINE_MARGIN) * d.current_remaining_s
    assert rule.observe(0.95, 32, 5.0) is None  # at the target: the run ends, no look


def test_prefix_after_a_switch_is_re_anchored_at_the_new_batch_size() -> None:
    """After 128 samples at b = 32 and a switch to 16, those samples did the work of
    128 r(16) / r(32) = 38.4 samples at 16 (schedule.py's progress model, with the r(b)
    in force); the next 64 samples at 16 put the run at 102.4 b=16-equivalent samples."""
    rule = _rule()
    rule.count(32, 128)
    rule.observe(0.3, 32, 5.0)
    rule.count(16, 64)
    assert rule.equivalent(rule.samples_by_batch, 16) == pytest.approx(128 * 0.3 + 64)
    d = rule.observe(0.35, 16, 5.0)
    first, second = (rule.equivalent(at, 16) for at, _ in rule.points)
    assert (first, second) == pytest.approx((38.4, 102.4), rel=1e-6)
    assert d is not None and not d.switch and d.batch_size == 16  # A still: stay
    # the checkpoint's state continues the same prefix
    again = _rule()
    again.restore(json.loads(json.dumps(rule.state())))
    assert again.points == rule.points and again.relative == rule.relative


def test_rule_never_leaves_the_feasible_candidates() -> None:
    rule = _rule()
    only32 = rule.feasible
    rule.feasible = lambda limit: {32: only32(limit)[32]}  # a cap under b = 16's peak
    rule.count(32, 128)
    d = rule.observe(0.3, 32, 3.1)
    assert d is not None and not d.switch and d.batch_size == 32


def test_read_only_rule_stays_below_what_the_guard_stepped_down_from() -> None:
    """On a read-only device the guard measured b = 32 over the cap and stepped down to
    16: the rule, which would move back to 32 (proxy X fits and favours it), stays."""
    from types import SimpleNamespace

    from undercap.select.online import ProxyCurves
    from undercap.select.online_data import OnlineData

    wide = {b: [[(0.0, 0.0), (1e5, 0.0)], [(0.0, 0.9), (1e5, 0.9)]] for b in (16, 32)}
    off = {b: [[(0.0, 2.7), (1e5, 2.7)]] * 2 for b in (16, 32)}
    data = OnlineData(
        (
            ProxyCurves("X", {16: 2.0, 32: 1.0}, wide, 0.9, 1e5),
            ProxyCurves("Y", {16: 0.3, 32: 1.0}, off, 0.9, 1e5),
            ProxyCurves("Z", {16: 0.3, 32: 1.0}, off, 0.9, 1e5),
        ),
        1e5,
    )
    cands = {
        16: Choice("ours", 16, 921.6, 1.0e-3, 3.0, None, None, 5.0),
        32: Choice("ours", 32, 921.6, 0.8e-3, 3.2, None, None, 5.0),
    }
    for events, to in (((), 32), ((SimpleNamespace(from_batch_size=32),), 16)):
        rule = OnlineRule(data, 0.9, lambda limit: dict(cands))
        rule.count(16, 128)
        d = rule.observe(0.3, 16, 5.0, events)
        assert d is not None and d.batch_size == to and d.switch == (to == 32)


def test_train_from_selection_online_switches_and_records_a_segment(tmp_path, capsys) -> None:
    sel = write_selection(tmp_path, main, capsys)
    out = tmp_path / "train.json"
    assert main([*TRAIN, "--from-selection", sel, "--online", "-o", str(out)]) == 3  # not reached
    err = capsys.readouterr().err
    assert "online: switching b=32 -> b=16 at 921.6 MHz after 128 samples" in err
    res = json.loads(out.read_text())
    segs = res["segments"]
    assert [s["batch_size"] for s in segs] == [32, 16]
    assert segs[0]["samples"] == 128 and sum(s["samples"] for s in segs) == res["samples_trained"]
    assert all(s["peak_power_w"] <= 5.0 for s in segs)
    # off by default: the same command without --online never switches
    assert main([*TRAIN, "--from-selection", sel, "-o", str(out)]) == 3
    assert json.loads(out.read_text())["segments"] == []


def test_online_errors_are_one_line_exit_2(tmp_path, capsys) -> None:
    sel = write_selection(tmp_path, main, capsys)
    old = tmp_path / "old.json"
    obj = json.loads((tmp_path / "sel.json").read_text())
    del obj["online"]
    old.write_text(json.dumps(obj))
    assert load_selection(old).extra.get("online") is None
    for argv, needle in (
        ([*TRAIN, "--from-selection", str(old), "--online"], "has no online block"),
        ([*TRAIN, "--from-selection", sel, "--online", "--eval-every", "4096"], "at least every"),
        ([*TRAIN, "--model", "small-cnn", "--batch-size", "32", "--online"], "--from-selection"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1 and err.startswith("error:")


def _run_argv(tmp_path, *extra: str) -> list:  # type: ignore[no-untyped-def]
    from online_helpers import TABLE
    from select_helpers import make_profile

    from undercap.artifacts import save_efficiency, save_profile

    prof = save_profile(tmp_path / "p.json", make_profile(TABLE, model="small-cnn"))
    argv = ["run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes",
            "16,32", "--max-samples", "512", "--eval-every", "128", "--torch-device", "cpu",
            "--no-progress", "--target", "digits", "--target-limit", "600", "--power-limit",
            "5", "--target-accuracy", "0.99", "--profile", str(prof), *extra]  # fmt: skip
    for i, eff in enumerate(proxy_efficiencies()):
        argv += ["--efficiency", str(save_efficiency(tmp_path / f"e{i}.json", eff))]
    return argv


def test_run_online_carries_the_block_and_switches(tmp_path, capsys) -> None:
    out = tmp_path / "res"
    assert main([*_run_argv(tmp_path, "--online"), "-o", str(out)]) == 3  # not reached
    assert "online: switching b=32 -> b=16" in capsys.readouterr().err
    sel = json.loads((out / "selection.json").read_text())
    assert [p["name"] for p in sel["online"]["proxies"]] == ["proxy-A", "proxy-B", "proxy-C"]
    assert sel["online"]["proxies"][0]["curves"]["16"][1] == [[0.0, 0.9], [100_000.0, 0.9]]
    segs = json.loads((out / "train.json").read_text())["segments"]
    assert [s["batch_size"] for s in segs] == [32, 16]
    assert "the configuration changed under the cap: 2 segments" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--online", "--race"], "pick one"),
        (["--online", "--eval-every", "4096"], "at least every 2048 samples"),
    ],
)
def test_run_online_errors_exit_2(tmp_path, capsys, extra, needle) -> None:
    argv = _run_argv(tmp_path)
    argv[argv.index("--eval-every") : argv.index("--eval-every") + 2] = []
    assert main([*argv, *extra, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert main(["run", "--model", "small-cnn", "--proxy", "digits", "--target", "digits",
                 "--power-limit", "5", "--target-accuracy", "0.5", "--online", "-o",
                 str(tmp_path / "o")]) == 2  # fmt: skip
    assert "give --proxy twice or more" in capsys.readouterr().err


def test_online_under_a_changing_cap_switches_through_the_follower(tmp_path, capsys) -> None:
    """A cap that changes: the follower chose b = 32 (proxy B's r(b)); the rule's candidates
    come from the profile at the cap in force, and its switch is the follower's segment."""
    sel = write_selection(tmp_path, main, capsys)
    sched = tmp_path / "cap.csv"
    sched.write_text("time_s,power_limit_w\n0,5\n1000,6\n")  # changes after the run
    out = tmp_path / "train.json"
    argv = [*TRAIN, "--from-selection", sel, "--online", "--power-schedule", str(sched),
            "--profile", str(tmp_path / "p.json"), "--efficiency", str(tmp_path / "e1.json"),
            "-o", str(out)]  # fmt: skip
    assert main(argv) == 3  # not reached
    assert "online: switching b=32 -> b=16" in capsys.readouterr().err
    res = json.loads(out.read_text())
    assert [(s["batch_size"], s["power_limit_w"]) for s in res["segments"]] == [(32, 5), (16, 5)]


def test_killed_online_run_resumes_as_the_uninterrupted_one(tmp_path, capsys) -> None:
    """SIGKILL after the switch (checkpoints every 128 samples; killed at 352, so the
    steps after 256 are redone); the same command with --resume continues the rule's
    state (its prefix, its r(b)) and ends as the uninterrupted run, switch included."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import torch

    from undercap.train.repro import KILL_AFTER_SAMPLES_ENV

    sel = write_selection(tmp_path, main, capsys)
    base = [*TRAIN, "--from-selection", sel, "--online", "--checkpoint-every-samples", "128"]
    whole = tmp_path / "whole.json"
    assert main([*base, "--checkpoint-dir", str(tmp_path / "c0"), "-o", str(whole)]) == 3
    ref = json.loads(whole.read_text())
    ckpt = ["--checkpoint-dir", str(tmp_path / "c1")]
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS=str(torch.get_num_threads()),
               **{KILL_AFTER_SAMPLES_ENV: "352"})  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "undercap.cli", *base, *ckpt], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    out = tmp_path / "resumed.json"
    assert main([*base, *ckpt, "--resume", "-o", str(out)]) == 3
    res = json.loads(out.read_text())
    assert 128 < res["resumed_from"] <= 352
    assert res["curve"] == ref["curve"] and res["samples_trained"] == ref["samples_trained"]
    keep = ("batch_size", "freq_mhz", "samples", "power_limit_w")
    assert [{k: s[k] for k in keep} for s in res["segments"]] == [
        {k: s[k] for k in keep} for s in ref["segments"]
    ]
    assert [s["batch_size"] for s in ref["segments"]] == [32, 16]
    # the rule's own state went on: every evaluation's point, the switch it made
    from undercap.train.checkpoint import load_checkpoint

    end = [load_checkpoint(tmp_path / c)["online"] for c in ("c0", "c1")]
    assert end[1] == end[0] and len(end[0]["points"]) == 4 and len(end[0]["switches"]) == 1


@pytest.mark.parametrize("modality", ["image", "text"])
def test_rule_from_a_selection_block_decides_as_the_pure_rule_on_recorded_curves(modality) -> None:
    """The matrix's stored estimates: every dataset as the target, the others as the
    proxies. Carried through a selection's online block (JSON and back), the device's
    rule takes at every evaluation of the target's recorded run at b = 64 (seed 0) the
    decision select.online's functions take on the raw artifacts, up to its first
    switch (after it, the run is no longer that recording)."""
    from pathlib import Path

    from undercap.artifacts.efficiency import load_efficiency
    from undercap.select import online as O

    root = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "matrix"
    effs = {p.stem: load_efficiency(p) for p in sorted(root.glob(f"efficiency/{modality}-*.json"))}
    weighting = O.Weighting(defaults.ONLINE_SCHEME, "samples", defaults.ONLINE_SIGMA)
    switched = 0
    for target, eff in effs.items():
        names = [n for n in effs if n != target]
        block = json.loads(json.dumps(online_block(names, [effs[n] for n in names])))
        data = from_block({"online": block})
        common = sorted(data.proxies[0].relative)
        feasible = {b: (900.0, 1e-4 * (64 / b) ** 0.5) for b in common}  # small b: slower
        cands = {
            b: Choice("ours", b, f, t, 3.0, None, None, None) for b, (f, t) in feasible.items()
        }
        rule = OnlineRule(data, eff.target_accuracy, lambda limit, c=cands: dict(c))
        raw = [O.ProxyCurves(n, effs[n].relative, {b: [[tuple(p) for p in c] for c in
               effs[n].extra["curves"][str(b)].values()] for b in common},
               effs[n].target_accuracy, effs[n].samples_bmax) for n in names]  # fmt: skip
        prefix, done = [], 0
        for n, a in eff.extra["curves"]["64"]["0"]:
            rule.count(64, int(n) - done)
            done = int(n)
            got = rule.observe(a, 64, None)
            prefix.append((float(n), float(a)))
            if a >= eff.target_accuracy:
                assert got is None
                break
            w = O.proxy_weights(raw, 64, prefix, eff.target_accuracy, data.samples_bmax, weighting)
            rel = O.pooled_relative(raw, w.weights)
            want = O.decide(feasible, rel, 64, n, data.samples_bmax, defaults.ONLINE_MARGIN)
            assert got is not None  # switch, b and f exactly; the times to float noise
            assert (got.switch, got.batch_size, got.freq_mhz) == (
                want.switch,
                want.batch_size,
                want.freq_mhz,
            )
            assert (got.progress, got.remaining_s) == pytest.approx(
                (want.progress, want.remaining_s), rel=1e-12
            )
            if want.switch:
                switched += 1
                break
    # images: some target moves off b = 64, so the comparison reaches a switch (text, as
    # in the replay, stays; its decisions were still compared at every evaluation)
    assert switched >= (1 if modality == "image" else 0)
