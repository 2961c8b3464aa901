"""`undercap fleet`: a local simulation of a fleet of (simulated) power-capped devices
training one model, with the same ServerApp and ClientApp that run on real devices.
Backends: "ray", Flower's simulation runtime (`flwr.simulation.run_simulation`; Ray
actors run the ClientApp, one virtual SuperNode per node), and "inprocess", the same
apps in this process, node after node (inprocess.py). Simulated devices keep their own
virtual clocks, so the measured round times do not depend on how many run at once.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, List, Optional, Union

from undercap.errors import UndercapError
from undercap.fleet.config import FleetConfig
from undercap.fleet.records import FleetResult

BACKENDS = ("ray", "inprocess")


def run_fleet(
    cfg: FleetConfig,
    out_dir: Optional[Union[str, Path]] = None,
    *,
    backend: str = "ray",
    progress: bool = True,
    log: Optional[Callable[[str], None]] = None,
) -> FleetResult:
    """Train the fleet to the target accuracy (or cfg.max_rounds); write the results
    folder (report.py) when `out_dir` is given."""
    from undercap.fleet.server_app import build_server_app

    cfg = cfg.check()
    if backend not in BACKENDS:
        raise UndercapError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    results: List[FleetResult] = []
    server = build_server_app(cfg, results.append, progress=progress)
    run = _run_ray if backend == "ray" else _run_inprocess
    run(server, len(cfg.fleet.nodes))
    if not results:
        raise UndercapError("the fleet simulation ended without a result (see the log above)")
    if out_dir is not None:
        from undercap.fleet.report import write_results

        write_results(results[0], out_dir, log=log)
    return results[0]


def _run_inprocess(server: Any, n: int) -> None:
    from flwr.app import Context, RecordDict

    from undercap.fleet.client_app import app as client_app
    from undercap.fleet.inprocess import InProcessGrid

    grid = InProcessGrid(client_app, n)
    try:  # newer Flower: what its runtime sets for a ServerApp process
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    except ImportError:  # pragma: no cover - Flower 1.30 has no task identity
        pass
    server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))


def _run_ray(server: Any, n: int) -> None:
    """Flower's simulation runtime; its log kept to warnings (the bar shows rounds).
    One CPU per virtual node, at most as many at once as the host has cores."""
    import warnings

    from flwr.simulation import run_simulation

    from undercap.fleet.client_app import app as client_app

    cores = os.cpu_count() or 1
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    logging.getLogger("flwr").setLevel(logging.WARNING)
    backend_config = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": cores, "include_dashboard": False, "log_to_driver": False},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_simulation(server, client_app, num_supernodes=n, backend_config=backend_config)
