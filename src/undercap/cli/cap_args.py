"""The cap's flags: --power-limit (fixed), --power-schedule and --power-source (a cap
that changes), --power-margin-w; `cap_of` makes the run's one cap (train/cap.py)."""

import argparse
from typing import Any, List, Optional

from undercap import defaults
from undercap.cli.common import non_negative_float, positive_float


def power_limit(text: str) -> Optional[float]:
    """'5' -> 5.0 W, 'none' -> no limit."""
    if text.strip().lower() in ("none", "no", "off", "inf"):
        return None
    return positive_float(text)


def fixed_cap(text: str) -> Any:
    """--power-limit: '5' -> a 5 W cap, 'none' -> no cap (train/cap.FixedCap)."""
    from undercap.train.cap import FixedCap

    return FixedCap(power_limit(text))


def power_limits(text: str) -> List[Optional[float]]:
    """'5,7,none' -> [5.0, 7.0, None]."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give power limits such as 5,7,none")
    out = [power_limit(t) for t in items]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text!r}: power limits must be distinct")
    return out


def add_schedule_args(p: Any) -> None:
    """A cap that changes during training (train/cap.py); `cap_of` makes the one cap."""
    p.add_argument(
        "--power-schedule",
        metavar="CSV",
        help="the cap changes during training: CSV time_s,power_limit_w (each row holds "
        "until the next; device-clock seconds from the start of training; none = no cap, "
        "0 = no power); (b, f) is re-selected at every change, training pauses when "
        "nothing fits (`undercap solar` makes one from irradiance)",
    )
    p.add_argument(
        "--power-source",
        metavar="FILE",
        help="live cap: a file another program rewrites with the current limit in W "
        "(or none), read every --poll-s seconds",
    )
    p.add_argument(
        "--poll-s",
        type=positive_float,
        default=defaults.POWER_SOURCE_POLL_S,
        help=f"how often --power-source is read (default {defaults.POWER_SOURCE_POLL_S:g} s)",
    )
    p.add_argument(
        "--max-wait-s",
        type=positive_float,
        default=defaults.MAX_POWER_WAIT_S,
        metavar="S",
        help="when the changing cap lets no configuration run, training pauses (asleep) "
        "for at most this many seconds at a time, then stops with exit 4 after a "
        f"checkpoint (default {defaults.MAX_POWER_WAIT_S:g} s)",
    )


def cap_of(args: argparse.Namespace, *, default_w: Optional[float] = None) -> Any:
    """The run's one cap (train/cap.py) from --power-limit (a FixedCap, None: not
    given), --power-schedule or --power-source, at most one of them; none given: a
    fixed `default_w` (a selection's limit; None: no cap)."""
    from undercap.train.cap import FixedCap, cap_from

    if args.power_limit is None and not (args.power_schedule or args.power_source):
        return FixedCap(default_w)
    return cap_from(
        args.power_limit, args.power_schedule, args.power_source, args.poll_s, args.max_wait_s
    )


def add_margin_arg(p: Any) -> None:
    """--power-margin-w, for every command that selects (select, run, compare, train)."""
    p.add_argument(
        "--power-margin-w",
        type=non_negative_float,
        metavar="W",
        help="safety margin added to every profiled peak power before comparing it with "
        "the limit (default: each configuration's own, sized while profiling from the "
        "sensor's noise and the peak's spread; 0: none, the paper's test)",
    )
