"""Does r(b) from an fp32 estimate hold for a bf16 run? The matrix's jobs, both ways.

    .venv/bin/python benchmarks/precision_rb.py              # cifar-a and shakespeare
    .venv/bin/python benchmarks/precision_rb.py --datasets cifar-a,mnist,shakespeare,austen

For each dataset, the proxy-sensitivity matrix's own estimate (benchmarks/matrix_data.py:
the model, batch sizes, budget, evaluation grid, pre-trained weights and three seeds;
dense evaluation) run again under bf16 autocast on the CPU, beside the fp32 estimate the
matrix stored (benchmarks/results/matrix/efficiency/). Two readings:

* r(b) itself: bf16's mean r(b) at each batch size against the range of fp32's per-seed
  r(b) (N_s(b) / N_s(b_max), seed s) - "within the seed spread";
* what it costs Algorithm 1, on the matrix's simulated devices and caps: the (b, f)
  chosen from bf16's r(b), timed with fp32's N(b), against the fastest on fp32's N(b)
  (and the other way round), exactly as the matrix scores a proxy.

If both hold, one estimate serves every precision (what `undercap run` does: r(b) is
estimated once, in fp32); otherwise the estimate must run in the run's precision
(`undercap estimate --precision`, cached apart).

Writes benchmarks/results/precision/rb-bf16.md, rb-bf16-cells.csv and the bf16 estimates
(efficiency/). Resumable: finished runs are in the benchmarks' cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import harness as H
import matrix as MX
import matrix_cells as MC
import matrix_data as M

STORED = H.RESULTS / "matrix"


def bf16_estimate(name: str, args, cache):  # type: ignore[no-untyped-def]
    from undercap.artifacts.efficiency import save_efficiency
    from undercap.estimate import estimate

    ds = M.DATASETS[name]
    mod = M.MODALITIES[ds.modality]
    weights = M.pretrained_weights(mod, args.data_dir, cache)
    cfg = M.estimate_config(ds, args.data_dir, weights, range(3))
    cfg = dataclasses.replace(cfg, eval_schedule="dense", precision="bf16")
    elapsed = H.stopwatch()
    eff = estimate(cfg, cache_dir=cache.root, jobs=args.jobs, torch_device="cpu", progress=False,
                   threads=1, log=lambda _m: None)  # fmt: skip
    save_efficiency(args.out / "efficiency" / f"{ds.modality}-{name}-bf16.json", eff)
    print(f"  {name}: bf16 estimate ({elapsed():.0f} s)", file=sys.stderr)
    return eff


def spread_rows(name: str, fp32, bf16) -> list[list]:  # type: ignore[no-untyped-def]
    """Per batch size: fp32's mean r(b) and per-seed range, bf16's mean, inside or not."""
    runs32, runs16 = MX.usable(fp32), MX.usable(bf16)
    common = sorted(set(runs32) & set(runs16))
    rel32, spread = MX.relative_from({b: runs32[b] for b in common})
    rel16, _ = MX.relative_from({b: runs16[b] for b in common})
    b_ref = max(common)
    per_seed = {b: [runs32[b][i] / runs32[b_ref][i] for i in range(len(runs32[b]))] for b in common}
    out = []
    for b in common:
        lo, hi = min(per_seed[b]), max(per_seed[b])
        inside = lo - 1e-9 <= rel16[b] <= hi + 1e-9
        out.append([name, b, rel32[b], lo, hi, rel16[b], "yes" if inside else "no"])
    return out


def cells(name: str, fp32, bf16, args, cache) -> list:  # type: ignore[no-untyped-def]
    """Algorithm 1 on one precision's r(b), timed with the other's N(b) (both ways)."""
    from undercap.select import select_ours

    ds = M.DATASETS[name]
    mod = M.MODALITIES[ds.modality]
    ns = {
        p: {b: sum(n) / len(n) for b, n in MX.usable(e).items()}
        for p, e in (("fp32", fp32), ("bf16", bf16))
    }
    rel = {p: MX.relative_from(MX.usable(e))[0] for p, e in (("fp32", fp32), ("bf16", bf16))}
    out = []
    for device in MX.DEVICES:
        profile, caps = MX.device_side(mod, device, args, cache, [name])
        for cap in caps:
            for r_from, n_from in (("bf16", "fp32"), ("fp32", "bf16")):
                choice = select_ours(profile, rel[r_from], cap)
                out.append(MC.make_cell(profile, choice, ns[n_from], proxy=f"{name} ({r_from})",
                                        target=f"{name} ({n_from})", device=device,
                                        power_limit_w=cap, rule="paper"))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    from undercap.artifacts.cache import Cache
    from undercap.artifacts.efficiency import load_efficiency

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="cifar-a,shakespeare")
    ap.add_argument("--data-dir", type=Path, default=H.DATA)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=H.RESULTS / "precision")
    ap.add_argument("--cap-fractions", type=lambda s: [float(x) for x in s.split(",")],
                    default=[1 / 3, 2 / 3])  # fmt: skip
    args = ap.parse_args(argv)
    if not H.have_data(args.data_dir):
        return 0
    cache = Cache(H.CACHE)
    spreads, all_cells = [], []
    for name in args.datasets.split(","):
        ds = M.DATASETS[name]
        fp32 = load_efficiency(STORED / "efficiency" / f"{ds.modality}-{name}.json")
        bf16 = bf16_estimate(name, args, cache)
        spreads += spread_rows(name, fp32, bf16)
        all_cells += cells(name, fp32, bf16, args, cache)
    gaps = [c.gap_pct for c in all_cells]
    header = [
        "dataset",
        "b",
        "fp32 r(b), mean",
        "fp32 per seed, min",
        "max",
        "bf16 r(b), mean",
        "inside",
    ]
    text = "\n".join([
        "# r(b) in bf16 against fp32 (the matrix's jobs, SIMULATED devices for the cells)", "",
        f"`.venv/bin/python benchmarks/precision_rb.py --datasets {args.datasets}`", "",
        H.md_table(header, spreads, [None, None, "{:.3f}", "{:.3f}", "{:.3f}", "{:.3f}", None]), "",
        f"Inside fp32's per-seed range: {sum(r[-1] == 'yes' for r in spreads)} of {len(spreads)} "
        "batch sizes.", "",
        f"Algorithm 1 on one precision's r(b), timed with the other's N(b), on {len(all_cells)} "
        f"cells (devices x caps x both directions): worst gap to the fastest "
        f"{max(gaps):+.1f}%, mean {sum(gaps) / len(gaps):+.2f}%, {sum(c.hit for c in all_cells)} "
        "of them the fastest.", "",
    ])  # fmt: skip
    H.write_text(args.out / "rb-bf16.md", text)
    H.write_csv(args.out / "rb-bf16-cells.csv", [c.to_dict() for c in all_cells])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
