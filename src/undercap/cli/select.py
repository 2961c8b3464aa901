"""`undercap select`: the batch size and GPU frequency to train with (Algorithm 1),
compared with Baselines 1 and 2 (recipes/selection.py). Never imports torch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from undercap.cli.cap_args import add_margin_arg
from undercap.cli.common import add_objective_choice, add_precision_arg, positive_float, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "select",
        help="pick the batch size and GPU frequency that reach the target fastest under a cap",
        description="Apply Algorithm 1 to a device profile and a batch-size efficiency "
        "estimate, and compare with the fixed-frequency baselines.",
    )
    p.add_argument("--profile", type=Path, required=True, help="profile JSON (undercap profile)")
    p.add_argument(
        "--efficiency",
        type=Path,
        action="append",
        required=True,
        help="efficiency JSON (undercap estimate); repeat it, or give an efficiency set, for "
        "several proxies: then the ensemble rule (Algorithm 1 on the median r(b)) chooses and "
        "the summary shows each proxy's own choice and the regret under it",
    )
    p.add_argument(
        "--power-limit", type=positive_float, required=True, metavar="W", help="power cap in W"
    )
    p.add_argument(
        "--safe-freq-mhz",
        type=positive_float,
        metavar="F",
        help="the baselines' fixed safe frequency (default: derived from this profile alone; "
        "the paper uses the highest frequency safe for every supported model)",
    )
    p.add_argument(
        "--proxy-efficiency",
        type=Path,
        metavar="E2",
        help="efficiency JSON Baseline 2 picks its batch size from (default: --efficiency)",
    )
    add_objective_choice(p)
    add_margin_arg(p)
    add_precision_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_select)


def cmd_select(args: argparse.Namespace) -> int:
    from undercap.artifacts import load_efficiency, load_profile
    from undercap.artifacts.efficiency import load_efficiencies
    from undercap.errors import UndercapError
    from undercap.recipes.ensemble import ensemble_selection
    from undercap.report.text import selection_summary
    from undercap.select.pooling import pooled_efficiency, several

    profile = load_profile(args.profile)
    effs = load_efficiencies(args.efficiency)
    for member in effs.members:
        _same_model(profile, member, args.profile, ", ".join(map(str, args.efficiency)))
    eff = pooled_efficiency(effs)  # several proxies: their median r(b) (select/pooling.py)
    if several(eff) and args.objective != "time":
        raise UndercapError("several proxies rank time to accuracy only; use --objective time")
    proxy = eff
    if args.proxy_efficiency is not None:
        proxy = load_efficiency(args.proxy_efficiency)
        _same_model(profile, proxy, args.profile, args.proxy_efficiency)
    selection = ensemble_selection(
        profile,
        eff,
        args.power_limit,
        proxy=proxy,
        safe_freq_mhz=args.safe_freq_mhz,
        objective=args.objective,
        energy_budget_j=args.energy_budget_j,
        margin_w=args.power_margin_w,
        precision=args.precision,
    )
    files = [str(f) for f in args.efficiency]
    result, used = selection.to_dict(), files[0] if len(files) == 1 else files
    result.update(
        profile=str(args.profile),
        efficiency=used,
        proxy_efficiency=str(args.proxy_efficiency) if args.proxy_efficiency else used,
    )
    if args.json:
        print_json(result)
    else:
        print(selection_summary(result))
    return 0


def _same_model(profile: Any, eff: Any, profile_path: Path, eff_path: Any) -> None:
    from undercap.errors import ArtifactError

    if profile.model != eff.model:
        raise ArtifactError(
            f"{profile_path} profiles model {profile.model!r} but {eff_path} is for "
            f"{eff.model!r}; use artifacts made for the same model"
        )
