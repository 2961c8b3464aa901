"""`undercap run`'s selection rule and on-device cross-check of r(b) options
(recipes/gns_check.py, select/robust.py)."""

from __future__ import annotations

import argparse

from undercap import defaults
from undercap.cli.common import fraction


def add_rule_args(p: argparse.ArgumentParser) -> None:
    """run's selection rule and the on-device cross-check of r(b) (recipes/gns_check.py)."""
    g = p.add_argument_group("selection rule and the r(b) cross-check")
    g.add_argument(
        "--rule",
        choices=("paper", "spread", "gns"),
        default=defaults.SELECTION_RULE,
        help="which rule picks the trained (b, f): paper = Algorithm 1; spread = the smallest "
        "worst case over r(b)'s seeds among the choices within the noise; gns = r(b) corrected "
        f"by the gradient noise scale measured on the target (default {defaults.SELECTION_RULE})",
    )
    g.add_argument(
        "--gns-check",
        dest="gns_check",
        action="store_true",
        default=defaults.GNS_CHECK,
        help="measure the gradient noise scale on the target before training and show it "
        "beside r(b) (default on)",
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
