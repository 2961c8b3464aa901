"""A loop of your own (capped(), the trainer callbacks, fleet nodes) takes the same
TrainSpec a device run does (train/spec.chosen): made once, taken as it is."""

from __future__ import annotations

import dataclasses

import pytest
from select_helpers import make_profile

from undercap.artifacts.workload import Workload
from undercap.devices import open_device
from undercap.errors import UndercapError
from undercap.train.api import capped
from undercap.train.cap import NO_CAP, FixedCap
from undercap.train.spec import TrainSpec, chosen

WORK = Workload("resnet18", (3, 32, 32), 3.329e9, 4.70e6, 43.0e6, 11_173_962, 297)
TABLE = {(8, 100.0): (1.0e-3, 2.0), (16, 100.0): (0.7e-3, 2.5), (32, 100.0): (0.5e-3, 3.0)}


def test_every_way_of_choosing_gives_one_train_spec() -> None:
    profile = make_profile(TABLE, model="small-cnn")
    rel = {8: 0.6, 16: 0.5, 32: 1.0}
    cap = FixedCap(5.0)
    picked, reselector = chosen(
        None, power_limit_w=cap, profile=profile, relative=rel, target_accuracy=0.5
    )
    assert reselector is None  # a fixed cap: nothing to follow
    given, _ = chosen(None, power_limit_w=cap, batch_size=8, freq_mhz=100.0, max_batch_size=32)
    for spec in (picked, given):
        assert isinstance(spec, TrainSpec) and spec.model is None and spec.cap is cap
    assert (picked.batch_size, picked.max_batch_size, picked.target_accuracy) == (16, 32, 0.5)
    assert picked.batch_ladder and given.batch_ladder == ()
    assert (given.batch_size, given.freq_mhz, given.b_max) == (8, 100.0, 32)
    made, _ = chosen(given)
    assert made is given  # made already: taken as it is


def test_capped_takes_a_train_spec_as_it_is() -> None:
    spec = TrainSpec(None, 16, 0.9, freq_mhz=None, cap=FixedCap(4.0), max_batch_size=64)
    with open_device("sim:jetson-nano") as device:
        cap = capped(device, spec, workload=WORK)
        assert cap.spec is spec and cap.target_accuracy == 0.9
        assert cap.batch_size == 16 and cap.lr(1.0) == pytest.approx(0.5)  # sqrt(16 / 64)
        with cap:
            cap.step(16)
        assert cap.result().power_limit_w == 4.0
        with pytest.raises(UndercapError, match="not as keywords too"):
            capped(device, spec, batch_size=32, workload=WORK)
        with pytest.raises(UndercapError, match="not as keywords too"):
            capped(device, spec, power_limit_w=5.0, workload=WORK)


def test_a_device_run_needs_the_model_and_target_a_loop_of_your_own_does_not() -> None:
    mine = TrainSpec(None, 16, None, cap=NO_CAP)
    with pytest.raises(UndercapError, match="needs a model"):
        mine.validate()
    with pytest.raises(UndercapError, match="--target-accuracy is required"):
        dataclasses.replace(mine, model="small-cnn").validate()
    dataclasses.replace(mine, model="small-cnn", target_accuracy=0.5).validate()
