"""`undercap solar`: a device's power cap from measured sunlight, as a schedule.

From global horizontal irradiance G(t) (W/m^2; e.g. ../shared/data/power, one value
a minute) to the power the training device may draw (W; its board input power, its
own idle draw included), with SolarSystem's fields:

    PV(t)  = G(t) * area_m2 * efficiency * derate
    free(t) = PV(t) - rest_w                        what the panel leaves for the device

derate is everything between module and load (wiring, MPPT conversion, temperature,
soiling): 0.86, PVWatts' default of 14% system losses (NREL, Dobos 2014). Without a
battery the cap is max(free, 0): a cloud is an outage. With one, simulated minute by
minute assuming the device draws its whole cap (the worst case for the battery),
greedily: what the sun gives is used now, the battery fills the gaps, and surplus sun
(also beyond `device_max_w`) charges it.

Time compression (training on a simulated device takes minutes, a solar day hours):
daylight (the first to the last minute with G > 1 W/m^2) becomes schedule time
(day time - sunrise) / compress, so `compress=60` turns each minute of the day into
one second of training; `duration_s` picks the factor that fits daylight into that
many seconds instead. With `repeat` the whole day, night included, repeats (the
battery carrying charge through the night): training that outlasts a day waits for
the next sunrise. See docs/guides/changing-caps.md.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

from undercap.artifacts.io import read_text
from undercap.errors import ArtifactError, UndercapError
from undercap.train.cap import PowerSchedule

DAYLIGHT_W_M2 = 1.0  # below this the station reads night (sensor offsets are negative)


@dataclass(frozen=True)
class SolarSystem:
    """The panel, the battery and the rest of the system (units in the names)."""

    area_m2: float = 0.05  # a 10 W (STC) panel at 20%: sized for a 5-10 W Jetson
    efficiency: float = 0.20  # the module's: mono-Si at standard test conditions
    derate: float = 0.86
    rest_w: float = 0.5  # what the rest of the system draws (a camera, a radio)
    battery_wh: float = 0.0  # 0: no battery
    battery_w: float = 5.0  # the most the battery may deliver
    reserve: float = 0.1  # never discharged below this fraction of capacity
    charge_eff: float = 0.9  # charging efficiency (Li-ion)
    initial_soc: float = 0.5  # state of charge at sunrise, a fraction of capacity
    device_max_w: Optional[float] = None  # no cap above this (None: unbounded)

    def check(self) -> None:
        for name in ("area_m2", "efficiency", "derate", "charge_eff"):
            if not getattr(self, name) > 0:
                raise UndercapError(f"solar: {name} must be positive")
        if not (0 <= self.reserve <= self.initial_soc <= 1) or self.battery_wh < 0:
            raise UndercapError(
                "solar: need 0 <= reserve <= initial SoC <= 1 and a battery >= 0 Wh"
            )


def read_irradiance(path: Union[str, Path]) -> List[Tuple[float, float]]:
    """(time_s, ghi_w_m2) rows of a CSV like ../shared/data/power/*.csv."""
    path = Path(path)
    try:
        rows = list(csv.DictReader(read_text(path, what="irradiance file").splitlines()))
        out = [(float(r["time_s"]), float(r["ghi_w_m2"])) for r in rows]
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise ArtifactError(
            f"{path}: expected a CSV with columns time_s,ghi_w_m2 ({type(e).__name__})"
        ) from e
    if len(out) < 2 or any(b[0] <= a[0] for a, b in zip(out, out[1:])):
        raise ArtifactError(f"{path}: needs two or more rows with increasing time_s")
    return out


def daylight(rows: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    lit = [i for i, (_, g) in enumerate(rows) if g > DAYLIGHT_W_M2]
    if not lit:
        raise UndercapError("solar: the irradiance never rises above night level")
    return rows[lit[0] : lit[-1] + 1]


def caps_w(rows: List[Tuple[float, float]], s: SolarSystem) -> List[float]:
    """The cap for each interval [t_i, t_i+1) of the day (module docstring)."""
    s.check()
    capacity_j = s.battery_wh * 3600.0
    soc_j = s.initial_soc * capacity_j
    caps = []
    for (t, g), (t_next, _) in zip(rows, rows[1:] + [(rows[-1][0] + 60.0, 0.0)]):
        dt = t_next - t
        free = max(g, 0.0) * s.area_m2 * s.efficiency * s.derate - s.rest_w
        usable = max(0.0, min(s.battery_w, (soc_j - s.reserve * capacity_j) / dt))
        cap = max(0.0, free) + (usable if capacity_j else 0.0)
        if s.device_max_w is not None:
            cap = min(cap, s.device_max_w)
        surplus = free - cap  # > 0 charges, < 0 discharges the battery
        soc_j += surplus * dt * (s.charge_eff if surplus > 0 else 1.0)
        soc_j = min(max(soc_j, 0.0), capacity_j)
        caps.append(round(cap, 3))
    return caps


def _from_sunrise(rows: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """The whole day starting at sunrise: the night before it moved to the end."""
    first = rows.index(daylight(rows)[0])
    day = rows[-1][0] - rows[0][0] + (rows[1][0] - rows[0][0])
    return rows[first:] + [(t + day, g) for t, g in rows[:first]]


def solar_schedule(
    irradiance: Union[str, Path],
    system: SolarSystem,
    *,
    compress: Optional[float] = None,
    duration_s: Optional[float] = None,
    repeat: bool = False,
) -> Tuple[PowerSchedule, float]:
    """The daylight part of a day (or, with `repeat`, the whole day from sunrise,
    repeating) as a power schedule, and the compression used."""
    all_rows = read_irradiance(irradiance)
    lit = daylight(all_rows)
    rows = _from_sunrise(all_rows) if repeat else lit
    span_s = lit[-1][0] - lit[0][0] + (lit[1][0] - lit[0][0])
    if (compress is None) == (duration_s is None):
        raise UndercapError("solar: give exactly one of --compress or --duration-s")
    factor = float(compress) if compress is not None else span_s / float(duration_s)  # type: ignore[arg-type]
    if not factor > 0:
        raise UndercapError("solar: the time compression must be positive")
    times = tuple((t - rows[0][0]) / factor for t, _ in rows)
    caps = caps_w(rows, system)
    keep = [0] + [i for i in range(1, len(caps)) if caps[i] != caps[i - 1]]
    period = (rows[-1][0] - rows[0][0] + (rows[1][0] - rows[0][0])) / factor if repeat else None
    schedule = PowerSchedule(
        tuple(times[i] for i in keep), tuple(caps[i] for i in keep), str(irradiance), period
    )
    return schedule, factor
