"""What the device path needs from Python 3.7 and 3.8, for JetPack 4.6's Python 3.6.

The Jetson Nano, TX2 and TX2 NX end at JetPack 4.6 (Ubuntu 18.04, Python 3.6, torch
1.10): the modules a board runs (tests/device_path.py) use these names. On Python >= 3.8
each is the standard library's own; the fallbacks compute the same values (CPython's own
formulas). `vermin -t=3.6-` checks the device path: lines using the newer names say `novermin`.
"""

import contextlib
import functools
import math
import operator
import subprocess
import sys
import types
from typing import Any, Callable, Iterable, Iterator, List, Sequence


def _prod(xs: Iterable[Any]) -> Any:
    return functools.reduce(operator.mul, xs, 1)


def _fmean(xs: Iterable[float]) -> float:
    data = list(xs)  # statistics.fmean: fsum / n
    return math.fsum(data) / len(data)


@contextlib.contextmanager
def _nullcontext(enter_result: Any = None) -> Iterator[Any]:
    yield enter_result


def _as241_inv_cdf(p: float) -> float:
    """The standard normal's quantile: CPython 3.8's statistics._normal_dist_inv_cdf,
    Wichura's AS241 (Applied Statistics 37(3), 1988), term for term."""
    q = p - 0.5
    if math.fabs(q) <= 0.425:
        r = 0.180625 - q * q
        return q * _horner(_AS241_A, r) / _horner(_AS241_B, r)
    r = math.sqrt(-math.log(p if q <= 0.0 else 1.0 - p))
    if r <= 5.0:
        x = _horner(_AS241_C, r - 1.6) / _horner(_AS241_D, r - 1.6)
    else:
        x = _horner(_AS241_E, r - 5.0) / _horner(_AS241_F, r - 5.0)
    return -x if q < 0.0 else x


def _horner(coefs: Sequence[float], r: float) -> float:
    acc = coefs[0]
    for c in coefs[1:]:
        acc = acc * r + c
    return acc


# fmt: off
_AS241_A = (2.50908_09287_30122_6727e+3, 3.34305_75583_58812_8105e+4,
            6.72657_70927_00870_0853e+4, 4.59219_53931_54987_1457e+4,
            1.37316_93765_50946_1125e+4, 1.97159_09503_06551_4427e+3,
            1.33141_66789_17843_7745e+2, 3.38713_28727_96366_6080e+0)
_AS241_B = (5.22649_52788_52854_5610e+3, 2.87290_85735_72194_2674e+4,
            3.93078_95800_09271_0610e+4, 2.12137_94301_58659_5867e+4,
            5.39419_60214_24751_1077e+3, 6.87187_00749_20579_0830e+2,
            4.23133_30701_60091_1252e+1, 1.0)
_AS241_C = (7.74545_01427_83414_07640e-4, 2.27238_44989_26918_45833e-2,
            2.41780_72517_74506_11770e-1, 1.27045_82524_52368_38258e+0,
            3.64784_83247_63204_60504e+0, 5.76949_72214_60691_40550e+0,
            4.63033_78461_56545_29590e+0, 1.42343_71107_49683_57734e+0)
_AS241_D = (1.05075_00716_44416_84324e-9, 5.47593_80849_95344_94600e-4,
            1.51986_66563_61645_71966e-2, 1.48103_97642_74800_74590e-1,
            6.89767_33498_51000_04550e-1, 1.67638_48301_83803_84940e+0,
            2.05319_16266_37758_82187e+0, 1.0)
_AS241_E = (2.01033_43992_92288_13265e-7, 2.71155_55687_43487_57815e-5,
            1.24266_09473_88078_43860e-3, 2.65321_89526_57612_30930e-2,
            2.96560_57182_85048_91230e-1, 1.78482_65399_17291_33580e+0,
            5.46378_49111_64114_36990e+0, 6.65790_46435_01103_77720e+0)
_AS241_F = (2.04426_31033_89939_78564e-15, 1.42151_17583_16445_88870e-7,
            1.84631_83175_10054_68180e-5, 7.86869_13114_56132_59100e-4,
            1.48753_61290_85061_48525e-2, 1.36929_88092_27358_05310e-1,
            5.99832_20655_58879_37690e-1, 1.0)
# fmt: on


if sys.version_info >= (3, 8):
    from contextlib import nullcontext  # novermin
    from math import prod  # novermin
    from statistics import NormalDist, fmean  # novermin
    from typing import Protocol  # novermin

    def normal_inv_cdf(p: float) -> float:
        """The standard normal's quantile."""
        return NormalDist().inv_cdf(p)

else:  # pragma: no cover - Python 3.6 (scripts/ci/jetpack4.sh runs it there)
    Protocol = object
    nullcontext, prod, fmean, normal_inv_cdf = _nullcontext, _prod, _fmean, _as241_inv_cdf


def isascii(text: str) -> bool:
    """str.isascii (Python 3.7), O(1) where it exists."""
    if hasattr(text, "isascii"):
        return text.isascii()
    try:
        text.encode("ascii")
    except UnicodeEncodeError:
        return False
    return True


def run_captured(args: List[str], **kwargs: Any) -> "subprocess.CompletedProcess[str]":
    """subprocess.run with stdout and stderr captured as text (capture_output= and
    text= are Python 3.7's names for these)."""
    return subprocess.run(  # noqa: UP022 - Python 3.6 has no capture_output=
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,  # noqa: UP021 - Python 3.6 has no text=
        **kwargs,
    )


def lazy_module_attributes(module_name: str, getattr_: Callable[[str], Any]) -> None:
    """PEP 562 (a module's `__getattr__`) arrived in Python 3.7: on 3.6 the module gets
    a class whose `__getattr__` is the module's own, so its lazy names load the same way."""
    if sys.version_info >= (3, 7):
        return
    module = sys.modules[module_name]

    class _LazyModule(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            return getattr_(name)

    module.__class__ = _LazyModule
