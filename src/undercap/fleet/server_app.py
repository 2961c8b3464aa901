"""The Flower ServerApp. `flwr run` loads the app's ServerApp (`deployment_app`:
examples/fleet-app's with its own folder, `undercap.fleet.server_app:app` with the
working directory), which reads its settings from the run config and writes the results
folder (report.py) to its `out-dir`; `undercap fleet` builds the same app around a
FleetConfig (`build_server_app`). The server holds the global model and evaluates it on
the test split after every round (the nodes only train); PowerCapStrategy
(strategy.py) does the rest and stops at the target accuracy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, Union

import flwr
from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from undercap.errors import UndercapError
from undercap.fleet.config import FleetConfig
from undercap.fleet.plan import RoundPlan
from undercap.fleet.records import FleetResult, RoundRecord
from undercap.fleet.spec import FleetSpec

NODES_TIMEOUT_S = 300.0  # how long to wait for the fleet's SuperNodes to connect
ROUND_TIMEOUT_S = 3600.0

Sink = Callable[[FleetResult], None]


def build_server_app(cfg: FleetConfig, sink: Sink, *, progress: bool = True) -> ServerApp:
    """A ServerApp for `cfg` that hands the result to `sink` (simulation.py)."""
    server = ServerApp()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        sink(serve(grid, cfg, progress=progress))

    return server


def deployment_app(app_dir: Optional[Union[str, Path]] = None) -> ServerApp:
    """The ServerApp for `flwr run`: the run config names the fleet, model, data and
    r(b). `app_dir` as in config.from_run_config (examples/fleet-app/undercap_fleet_app.py
    passes its own folder); a relative `out-dir` is under the SuperLink's working directory
    (where `flower-superlink` was started)."""
    server = ServerApp()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        from undercap.fleet.config import from_run_config
        from undercap.fleet.report import write_results

        cfg = from_run_config(context.run_config, app_dir)
        out = Path(str(cfg.extra.get("out_dir") or "fleet-out")).expanduser().resolve()
        result = serve(grid, cfg, progress=True)
        write_results(result, out)
        reached = "reached" if result.reached else "did not reach"
        print(
            f"undercap fleet: {reached} {cfg.target_accuracy:g} in {len(result.rounds)} "
            f"round(s); results in {out}",
            flush=True,
        )

    return server


app = deployment_app()  # relative run-config paths from the working directory


def wait_for_nodes(grid: Grid, n: int, timeout_s: float = NODES_TIMEOUT_S) -> List[int]:
    t0 = time.monotonic()
    while True:
        ids = list(grid.get_node_ids())
        if len(ids) >= n:
            return ids
        if time.monotonic() - t0 > timeout_s:
            raise UndercapError(
                f"only {len(ids)} of the fleet's {n} nodes connected in {timeout_s:g} s; "
                "start a SuperNode per device (docs/fleet.md)"
            )
        time.sleep(0.2)


def serve(grid: Grid, cfg: FleetConfig, *, progress: bool = True) -> FleetResult:
    """Run the fleet to the target (or cfg.max_rounds) and return what it measured."""
    from undercap.artifacts.provenance import provenance
    from undercap.fleet.strategy import PowerCapStrategy
    from undercap.report.progress import bar

    wait_for_nodes(grid, len(cfg.fleet.nodes))
    model, evaluate, n_train = _global_model(cfg)
    state = model.state_dict()
    params = {name for name, _ in model.named_parameters()}
    trainable = [k in params for k in state]
    initial = ArrayRecord(
        {k: Array.from_numpy_ndarray(v.detach().cpu().numpy()) for k, v in state.items()}
    )
    acc0, _ = evaluate(initial)
    round_work = cfg.round_work or float(n_train)
    rounds_bar = bar(progress, desc=f"fleet {cfg.mode}", unit="round", total=cfg.max_rounds)

    def on_round(record: RoundRecord, plan: RoundPlan) -> None:
        rounds_bar.update(1)
        rounds_bar.set_postfix(
            acc=f"{record.accuracy:.3f}", round_s=f"{record.round_s:.2f}", refresh=False
        )

    strategy = PowerCapStrategy(cfg, trainable, round_work=round_work, on_round=on_round)
    try:
        strategy.start(
            grid, initial, num_rounds=cfg.max_rounds, timeout=ROUND_TIMEOUT_S, evaluate_fn=evaluate
        )
    finally:
        rounds_bar.close()
    rounds = tuple(strategy.rounds)
    simulated = all(n.simulated for r in rounds for n in r.nodes)
    # the nodes as they described themselves (a SuperNode's --node-config wins over
    # the fleet file; in simulation they are the fleet file's entries)
    fleet = FleetSpec(strategy.node_specs(), cfg.fleet.source) if strategy.nodes else cfg.fleet
    return FleetResult(
        mode=cfg.mode,
        target_accuracy=cfg.target_accuracy,
        reached=any(r.accuracy >= cfg.target_accuracy for r in rounds),
        rounds=rounds,
        config={**cfg.to_dict(), "round_work": round_work},
        fleet=fleet.to_dict(),
        simulated=simulated,
        provenance=provenance(seed=cfg.seed, flwr_version=flwr.__version__),
        initial_accuracy=acc0,
    )


def _global_model(
    cfg: FleetConfig,
) -> Tuple[Any, Callable[[ArrayRecord], Tuple[float, float]], int]:
    """The initial global model (seeded), the server's evaluation of a global state on
    the test split, and the fleet's training-set size."""
    from undercap.data.spec import load_splits
    from undercap.models.weights import initial_model
    from undercap.train.loop.scoring import evaluate

    data = load_splits(cfg.data)
    model, _ = initial_model(cfg.model, data, init_seed=cfg.seed, pretrained=None)
    x, y = data.x_test, data.y_test
    if cfg.eval_max_samples is not None:
        x, y = x[: cfg.eval_max_samples], y[: cfg.eval_max_samples]

    def evaluate_fn(arrays: ArrayRecord) -> Tuple[float, float]:
        model.load_state_dict(arrays.to_torch_state_dict())
        return evaluate(model, x, y)

    return model, evaluate_fn, int(data.n_train)
