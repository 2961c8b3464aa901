"""Several proxies end to end: the efficiency set artifact, `select` / `run` / `compare`
/ `estimate` / capped() with several proxies, and their one-line errors."""

from __future__ import annotations

import json

import pytest
from select_helpers import make_efficiency, make_profile

from undercap.artifacts import save_efficiency, save_profile
from undercap.artifacts.efficiency import (
    EfficiencySet,
    load_efficiencies,
    load_efficiency,
    save_efficiency_set,
)
from undercap.cli import main
from undercap.errors import ArtifactError
from undercap.select.pooling import as_set, pooled_efficiency, proxies_relative

QUICK = [
    "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes", "16,64",
    "--max-samples", "2000", "--eval-every", "128", "--torch-device", "cpu", "--no-progress",
]  # fmt: skip
TABLE = {(8, 100.0): (1.0e-3, 2.0), (16, 100.0): (0.7e-3, 2.5), (32, 100.0): (0.5e-3, 3.0)}


def _effs(tmp_path):  # type: ignore[no-untyped-def]
    """Three proxies: two agree (b=16 wins), one outlier (b=8 wins)."""
    rels = [{8: 0.6, 16: 0.5, 32: 1.0}, {8: 0.62, 16: 0.5, 32: 1.0}, {8: 0.2, 16: 0.6, 32: 1.0}]
    paths = []
    for i, rel in enumerate(rels):
        eff = make_efficiency(rel, model="small-cnn")
        eff = EfficiencySet.of([eff]).members[0]
        paths.append(save_efficiency(tmp_path / f"e{i}.json", eff))
    return paths


def test_efficiency_set_round_trips_and_single_files_stay_as_they_were(tmp_path) -> None:
    paths = _effs(tmp_path)
    effs = load_efficiencies(paths)
    assert len(effs.names) == 3 and len(set(effs.names)) == 3  # same dataset: made distinct
    out = save_efficiency_set(tmp_path / "set.json", effs)
    obj = json.loads(out.read_text())
    assert obj["schema"] == "undercap.efficiency-set/1" and len(obj["proxies"]) == 3
    assert obj["proxies"][0]["efficiency"]["schema"] == "undercap.efficiency/1"
    again = load_efficiencies([out])
    assert again.names == effs.names and again.relatives == effs.relatives
    # one proxy: the single-proxy artifact, unchanged
    one = save_efficiency_set(tmp_path / "one.json", EfficiencySet.of([effs.members[0]]))
    assert json.loads(one.read_text())["schema"] == "undercap.efficiency/1"
    assert load_efficiency(one).relative == effs.members[0].relative
    with pytest.raises(ArtifactError, match="holds 3 proxies"):
        load_efficiency(out)
    # pooled: the median r(b), and the set behind it
    pooled = pooled_efficiency(effs)
    assert pooled.relative == {8: 0.6, 16: 0.5, 32: 1.0}
    assert as_set(pooled).relatives == effs.relatives
    assert proxies_relative(paths) == proxies_relative(effs.relatives) == pooled.relative


def test_set_of_mixed_models_is_refused(tmp_path) -> None:
    a = make_efficiency({8: 0.5, 16: 1.0}, model="small-cnn")
    b = make_efficiency({8: 0.5, 16: 1.0}, model="resnet18")
    with pytest.raises(ArtifactError, match="mixes models"):
        EfficiencySet.of([a, b])


def test_select_with_several_efficiencies(tmp_path, capsys) -> None:
    prof = save_profile(tmp_path / "p.json", make_profile(TABLE, model="small-cnn"))
    paths = _effs(tmp_path)
    argv = ["select", "--profile", str(prof), "--power-limit", "5"]
    for p in paths:
        argv += ["--efficiency", str(p)]
    assert main([*argv, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["method"], res["batch_size"]) == ("ensemble", 16)  # the outlier is outvoted
    views = res["ensemble"]["proxies"]
    assert [v["preferred"]["batch_size"] for v in views] == [16, 16, 8]
    assert views[2]["regret"] == pytest.approx(0.7 * 0.6 / (1.0 * 0.2) - 1)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "several proxies (3)" in text and "worst regret +110.0%" in text
    # one efficiency: as before, no ensemble block
    assert main(["select", "--profile", str(prof), "--power-limit", "5", "--efficiency",
                 str(paths[2]), "--json"]) == 0  # fmt: skip
    one = json.loads(capsys.readouterr().out)
    assert one["batch_size"] == 8 and "ensemble" not in one
    assert main([*argv, "--objective", "energy"]) == 2
    assert capsys.readouterr().err.startswith("error: several proxies rank time")


def test_run_with_three_proxies_end_to_end(tmp_path, capsys) -> None:
    """The demo's job (small CNN on digits, simulated Nano, 3.5 W) with three proxies:
    digits subsets of different sizes and split seeds."""
    out = tmp_path / "res"
    args = ["run", *QUICK, "--proxy", "digits", "--proxy", "digits", "--proxy", "digits",
            "--proxy-limit", "300,360,420", "--proxy-split-seed", "1,2,3", "--target", "digits",
            "--target-limit", "600", "--power-limit", "3.5", "--target-accuracy", "0.7",
            "--estimate-seeds", "1", "-o", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "several proxies (3)" in printed and "worst regret" in printed
    eff = json.loads((out / "efficiency.json").read_text())
    assert eff["schema"] == "undercap.efficiency-set/1"
    assert [p["name"] for p in eff["proxies"]] == [
        f"digits [{n}-sample subset, split seed {s}]" for n, s in ((300, 1), (360, 2), (420, 3))
    ]
    sel = json.loads((out / "selection.json").read_text())
    train = json.loads((out / "train.json").read_text())
    assert sel["method"] == "ensemble" and len(sel["ensemble"]["proxies"]) == 3
    assert (train["batch_size"], train["freq_mhz_start"]) == (sel["batch_size"], sel["freq_mhz"])
    assert train["reached"] and sel["peak_power_w"] <= 3.5
    # the set reused with --efficiency (no estimate): the same choice
    out2 = tmp_path / "res2"
    args2 = ["run", *QUICK, "--target", "digits", "--target-limit", "600", "--power-limit",
             "3.5", "--target-accuracy", "0.7", "--efficiency", str(out / "efficiency.json"),
             "--profile", str(out / "profile.json"), "-o", str(out2)]  # fmt: skip
    assert main(args2) == 0
    sel2 = json.loads((out2 / "selection.json").read_text())
    assert (sel2["method"], sel2["batch_size"], sel2["freq_mhz"]) == (
        "ensemble",
        sel["batch_size"],
        sel["freq_mhz"],
    )


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--rule", "spread"], "--rule (rule=) was removed"),
        (["--proxy-limit", "300,360"], "--proxy-limit has 2 values for 3 proxies"),
        (["--objective", "energy"], "rank time to accuracy only"),
    ],
)
def test_run_several_proxies_errors_exit_2(tmp_path, capsys, extra, needle) -> None:
    argv = ["run", *QUICK, "--proxy", "digits", "--proxy", "digits", "--proxy", "digits",
            "--target", "digits", "--power-limit", "3.5", "--target-accuracy", "0.5",
            "--estimate-seeds", "1", "-o", str(tmp_path / "o"), *extra]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]


def test_compare_uses_the_ensemble_as_ours(tmp_path) -> None:
    from undercap.artifacts.comparison import RunRecord
    from undercap.data.spec import DataSpec
    from undercap.recipes.common import TrainingSetup
    from undercap.recipes.compare import CompareConfig, run_comparison

    def fake(b, f, seed, lim, precision="fp32"):  # type: ignore[no-untyped-def]
        # as tests/test_compare.py's: method, limit, seed, b, f, reached, time, energy, ...
        return RunRecord("", lim, seed, b, f, True, 1000.0 / (b * f), 1.0, 3.0, 3.0, 100, 100, 0.9)

    specs = tuple(DataSpec("digits", limit=n, seed=s) for n, s in ((300, 1), (360, 2), (420, 3)))
    setup = TrainingSetup(model="small-cnn", batch_sizes=(16, 64), max_samples=2000,
                          eval_every_samples=128, torch_device="cpu")  # fmt: skip
    cfg = CompareConfig(device="sim:jetson-nano", model="small-cnn", proxy=specs[0],
                        proxies=specs, target=DataSpec("digits", limit=600),
                        power_limits_w=(3.5,), setup=setup, seeds=(0,), target_accuracy=0.7,
                        estimate_seeds=(0,))  # fmt: skip
    comp = run_comparison(cfg, tmp_path / "c", train_fn=fake, progress=False, log=lambda m: None)
    assert comp.proxy.count(" + ") == 2
    sel = json.loads((tmp_path / "c" / "selection-3.5W.json").read_text())
    ours = next(c for c in comp.choices if c.method == "ours")
    assert sel["method"] == "ensemble" and (sel["batch_size"], sel["freq_mhz"]) == (
        ours.batch_size,
        ours.freq_mhz,
    )
    saved = json.loads((tmp_path / "c" / "efficiency-proxy.json").read_text())
    assert saved["schema"] == "undercap.efficiency-set/1" and len(saved["proxies"]) == 3


def test_capped_takes_several_proxies() -> None:
    from undercap.artifacts.workload import Workload
    from undercap.devices import open_device
    from undercap.train.api import capped

    work = Workload("resnet18", (3, 32, 32), 3.329e9, 4.70e6, 43.0e6, 11_173_962, 297)

    profile = make_profile(TABLE, model="small-cnn")
    rels = {"a": {8: 0.6, 16: 0.5, 32: 1.0}, "b": {8: 0.62, 16: 0.5, 32: 1.0},
            "c": {8: 0.2, 16: 0.6, 32: 1.0}}  # fmt: skip
    with open_device("sim:jetson-nano") as device:
        cap = capped(device, profile=profile, proxies=rels, power_limit_w=5.0, workload=work)
        assert (cap.spec.batch_size, cap.spec.freq_mhz) == (16, 100.0)
        with pytest.raises(Exception, match="not both"):
            capped(device, profile=profile, proxies=rels, relative=rels["a"], workload=work)


def test_estimate_over_several_datasets_writes_one_set(tmp_path, capsys) -> None:
    """Two proxies of the same task in one call: digits, and a half of it as an npz."""
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    half = tmp_path / "digits-half.npz"
    np.savez(half, x=(d.images[::2] * 16).astype("uint8"), y=d.target[::2])
    out = tmp_path / "effs.json"
    argv = ["estimate", "--model", "small-cnn", "--dataset", "digits", "--dataset",
            f"npz:{half}", "--input-shape", "1x8x8", "--batch-sizes", "16,64", "--seeds", "1",
            "--max-samples", "1500", "--eval-every", "128", "--target-accuracy", "0.5",
            "--limit", "400", "--torch-device", "cpu", "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "2 proxies' estimates" in capsys.readouterr().out
    effs = load_efficiencies([out])
    assert len(effs.members) == 2 and effs.members[1].dataset == f"npz:{half}"
    assert all(max(e.relative) == 64 for e in effs.members)
