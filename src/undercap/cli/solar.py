"""`undercap solar`: a power schedule for --power-schedule from measured sunlight."""

from __future__ import annotations

import argparse
from pathlib import Path

from undercap.cli.common import positive_float
from undercap.cli.outputs import add_output


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "solar",
        help="turn a day of irradiance into a power schedule for --power-schedule",
        description="Map global horizontal irradiance (CSV time_s,ghi_w_m2) to the power "
        "a solar-powered device may draw: panel area x efficiency x derate, minus the rest "
        "of the system, with an optional battery; compress the daylight hours to the "
        "length of a training run and write the schedule CSV (recipes/solar.py).",
    )
    p.add_argument("irradiance", type=Path, help="CSV time_s,ghi_w_m2 (one row a minute)")
    p.add_argument("--panel-area-m2", type=positive_float, default=0.05, help="default 0.05")
    p.add_argument(
        "--panel-efficiency", type=positive_float, default=0.20, help="module efficiency (0.20)"
    )
    p.add_argument(
        "--derate",
        type=positive_float,
        default=0.86,
        help="system losses between module and load (PVWatts default 0.86)",
    )
    p.add_argument(
        "--rest-w",
        type=float,
        default=0.5,
        help="what the rest of the system draws from the panel (W, default 0.5)",
    )
    p.add_argument("--battery-wh", type=float, default=0.0, help="battery capacity (0: none)")
    p.add_argument(
        "--battery-w", type=positive_float, default=5.0, help="most the battery delivers (W)"
    )
    p.add_argument(
        "--initial-soc", type=float, default=0.5, help="battery charge at sunrise (0..1)"
    )
    p.add_argument(
        "--device-max-w",
        type=positive_float,
        help="never cap above this (the device's maximum draw)",
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--compress",
        type=positive_float,
        help="day seconds per schedule second (60: a minute of the day is a second)",
    )
    g.add_argument(
        "--duration-s",
        type=positive_float,
        help="fit the daylight hours into this many seconds of training",
    )
    p.add_argument(
        "--repeat",
        action="store_true",
        help="the whole day, night included, repeating day after day (training that "
        "outlasts a day waits for the next sunrise)",
    )
    p.add_argument("--plot", type=Path, help="also draw the schedule (PNG)")
    add_output(p, "schedule CSV to write", cmd_solar, files=("output", "plot"))


def cmd_solar(args: argparse.Namespace) -> int:
    from undercap.artifacts.io import write_atomic
    from undercap.recipes.solar import SolarSystem, solar_schedule
    from undercap.report.text import schedule_summary

    system = SolarSystem(
        area_m2=args.panel_area_m2,
        efficiency=args.panel_efficiency,
        derate=args.derate,
        rest_w=args.rest_w,
        battery_wh=args.battery_wh,
        battery_w=args.battery_w,
        initial_soc=args.initial_soc,
        device_max_w=args.device_max_w,
    )
    schedule, factor = solar_schedule(
        args.irradiance,
        system,
        compress=args.compress,
        duration_s=args.duration_s,
        repeat=args.repeat,
    )
    write_atomic(args.output, schedule.to_csv())
    print(schedule_summary(schedule, factor))
    if args.plot is not None:
        from undercap.report.schedule import plot_cap

        plot_cap(schedule, args.plot, title=f"power cap from {args.irradiance.name}")
    print(f"  wrote {args.output}")
    return 0
