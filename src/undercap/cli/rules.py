"""`undercap run`'s selection rule and on-device cross-check of r(b) options
(recipes/gns_check.py, select/robust.py), and several proxies' options (`--proxy`
repeated, select/ensemble.py)."""

import argparse
from typing import Any, Callable, Dict, List, Optional

from undercap import defaults
from undercap.cli.common import add_online_arg, fraction, positive_int
from undercap.errors import UndercapError
from undercap.select.ensemble import ENSEMBLE

RULES = ("paper", "spread", "gns", ENSEMBLE)


def add_rule_args(p: argparse.ArgumentParser) -> None:
    """run's selection rule and the on-device cross-check of r(b) (recipes/gns_check.py)."""
    g = p.add_argument_group("selection rule and the r(b) cross-check")
    g.add_argument(
        "--rule",
        choices=RULES,
        default=None,
        help="which rule picks the trained (b, f): paper = Algorithm 1; spread = the smallest "
        "worst case over r(b)'s seeds among the choices within the noise; gns = r(b) corrected "
        "by the gradient noise scale measured on the target; ensemble = Algorithm 1 on the "
        "median r(b) over several proxies (default: ensemble with several proxies, else "
        f"{defaults.SELECTION_RULE})",
    )
    g.add_argument(
        "--gns-check",
        dest="gns_check",
        action="store_true",
        default=defaults.GNS_CHECK,
        help="measure the gradient noise scale on the target before training and show it "
        "beside r(b) (default on; one proxy only)",
    )
    g.add_argument("--no-gns-check", dest="gns_check", action="store_false")
    g.add_argument(
        "--gns-budget",
        type=fraction,
        default=defaults.GNS_BUDGET_FRACTION,
        metavar="FRACTION",
        help="the probe's device time at most this fraction of the predicted training time "
        f"(default {defaults.GNS_BUDGET_FRACTION:g}); skipped when its smallest form does not fit",
    )
    g.add_argument(
        "--race",
        dest="race",
        action="store_true",
        default=defaults.RACE,
        help="with several proxies: before training, race the candidates they disagree on "
        "on the target (each from the starting weights, for --race-budget of the predicted "
        "time, under the cap); the winner continues, the others' time counts (guides: A race on the target). "
        "Off by default: measured no better than the median on the matrix",
    )
    g.add_argument("--no-race", dest="race", action="store_false")
    add_race_budget_arg(g)
    add_online_arg(g)


def add_race_budget_arg(g: Any) -> None:
    """--race-budget, the same for `run --race` and `train --race`."""
    g.add_argument(
        "--race-budget",
        type=fraction,
        default=defaults.RACE_FRACTION,
        metavar="FRACTION",
        help="each candidate's device time in the race, as a fraction of the favourite's "
        f"predicted training time (default {defaults.RACE_FRACTION:g})",
    )


def race_fields(args: argparse.Namespace) -> Dict[str, Any]:
    """RunConfig's race and online fields from --race / --race-budget / --online, checked
    before any work: --online re-weighs several proxies, evaluated often enough."""
    if args.race_budget >= 1:
        raise UndercapError(f"--race-budget {args.race_budget:g}: give a fraction below 1")
    if args.online:
        from undercap.train.online import check_eval_every

        if args.race:
            raise UndercapError("--online and --race both re-decide on the target: pick one")
        if args.proxy is not None and len(args.proxy) < 2:
            raise UndercapError("--online re-weighs several proxies: give --proxy twice or more")
        check_eval_every(args.eval_every)
    return {"race": args.race, "race_fraction": args.race_budget, "online": args.online}


def resolve_rule(rule: Optional[str], several: bool) -> str:
    """--rule's default: ensemble with several proxies (benchmarks/results/matrix), the
    paper's rule with one; the ensemble of one proxy is Algorithm 1."""
    if rule is None:
        return ENSEMBLE if several else defaults.SELECTION_RULE
    return "paper" if rule == ENSEMBLE and not several else rule


def per_proxy(parse: Callable[[str], int]) -> Callable[[str], List[int]]:
    """'360' (every proxy) or '300,360,400' (one per --proxy, in order)."""

    def parse_list(text: str) -> List[int]:
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r}: give a number, or one per --proxy")
        return [parse(t) for t in items]

    parse_list.__name__ = parse.__name__  # argparse names the type in its errors
    return parse_list


def split_seed(text: str) -> int:
    try:
        return int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from e


def proxy_limit_types() -> Dict[str, Any]:
    """The types of --proxy-limit and --proxy-split-seed: one value or one per proxy."""
    return {"limit": per_proxy(positive_int), "split_seed": per_proxy(split_seed)}


def _nth(values: Any, i: int, n: int, flag: str) -> Any:
    """The i-th proxy's value of a per-proxy option (one value: every proxy's)."""
    if not isinstance(values, list):
        return values
    if len(values) == 1:
        return values[0]
    if len(values) != n:
        from undercap.errors import UndercapError

        raise UndercapError(f"{flag} has {len(values)} values for {n} proxies; give 1 or {n}")
    return values[i]


def proxy_specs(args: argparse.Namespace, proxies: Optional[List[str]]) -> List[Any]:
    """A DataSpec per --proxy, with its own --proxy-limit and --proxy-split-seed."""
    from undercap.data.spec import DataSpec

    n = len(proxies or [])
    return [
        DataSpec(
            dataset=name,
            data_dir=args.data_dir,
            input_shape=args.input_shape,
            context=args.context,
            limit=_nth(args.proxy_limit, i, n, "--proxy-limit"),
            seed=_nth(args.proxy_split_seed, i, n, "--proxy-split-seed"),
        )
        for i, name in enumerate(proxies or [])
    ]


def add_proxy_arg(p: argparse.ArgumentParser, *, required: bool) -> None:
    """--proxy, repeatable (run and compare)."""
    p.add_argument(
        "--proxy",
        action="append",
        required=required,
        default=None,
        help="dataset r(b) is estimated on"
        + ("" if required else " (not needed with --efficiency)")
        + "; repeat it for several proxies (then the ensemble rule: Algorithm 1 on the median "
        "r(b); --proxy-limit and --proxy-split-seed take one value or one per proxy)",
    )


def add_efficiency_arg(p: argparse.ArgumentParser) -> None:
    """run's --efficiency, repeatable."""
    p.add_argument(
        "--efficiency",
        action="append",
        default=None,
        help="reuse this efficiency artifact; repeat it (or give an efficiency set) for "
        "several proxies",
    )


def proxy_fields(args: argparse.Namespace, *, single: bool = False) -> Dict[str, Any]:
    """Run/CompareConfig's proxy fields: one proxy (or artifact) as before, several as
    tuples. `single`: compare's (a proxy always, no artifacts)."""
    specs = proxy_specs(args, args.proxy)
    several = tuple(specs) if len(specs) > 1 else ()
    if single:
        return {"proxy": specs[0], "proxies": several}
    effs = getattr(args, "efficiency", None) or []
    return {
        "proxy": specs[0] if len(specs) == 1 else None,
        "proxies": several,
        "efficiency": effs[0] if len(effs) == 1 else None,
        "efficiencies": tuple(effs) if len(effs) > 1 else (),
    }
