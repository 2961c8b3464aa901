"""The Flower ServerApp: `flwr run` loads `undercap.fleet.server_app:app`, which reads
its settings from the app's run config (config.from_run_config) and writes the
results folder (report.py) to its `out-dir`. `undercap fleet` builds the same app
around a FleetConfig (`build_server_app`) for Flower's simulation runtime.

The server holds the global model and evaluates it on the test split after every
round (the nodes only train); PowerCapStrategy (strategy.py) does the rest and stops
at the target accuracy.
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Tuple

from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from undercap.fleet.config import FleetConfig
from undercap.fleet.plan import RoundPlan
from undercap.fleet.records import FleetResult, RoundRecord

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


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """`flwr run`: the run config names the fleet, model, data and r(b)."""
    from undercap.fleet.config import from_run_config
    from undercap.fleet.report import write_results

    cfg = from_run_config(context.run_config)
    write_results(serve(grid, cfg, progress=True), cfg.extra.get("out_dir", "fleet-out"))


def wait_for_nodes(grid: Grid, n: int, timeout_s: float = NODES_TIMEOUT_S) -> List[int]:
    from undercap.errors import UndercapError

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
    rounds_bar = bar(progress, desc=f"fleet {cfg.mode}", unit="round", total=cfg.max_rounds)
    strategy = PowerCapStrategy(
        cfg,
        trainable,
        round_work=cfg.round_work or float(n_train),
        on_round=_progress(rounds_bar),
    )
    try:
        strategy.start(
            grid, initial, num_rounds=cfg.max_rounds, timeout=ROUND_TIMEOUT_S, evaluate_fn=evaluate
        )
    finally:
        rounds_bar.close()
    rounds = tuple(strategy.rounds)
    simulated = all(n.simulated for r in rounds for n in r.nodes)
    return FleetResult(
        mode=cfg.mode,
        target_accuracy=cfg.target_accuracy,
        reached=any(r.accuracy >= cfg.target_accuracy for r in rounds),
        rounds=rounds,
        config={**cfg.to_dict(), "round_work": cfg.round_work or float(n_train)},
        fleet=cfg.fleet.to_dict(),
        simulated=simulated,
        provenance=provenance(seed=cfg.seed, flwr_version=_flwr_version()),
        initial_accuracy=acc0,
    )


def _progress(rounds_bar: Any) -> Callable[[RoundRecord, RoundPlan], None]:
    def on_round(record: RoundRecord, plan: RoundPlan) -> None:
        rounds_bar.update(1)
        rounds_bar.set_postfix(
            acc=f"{record.accuracy:.3f}", round_s=f"{record.round_s:.2f}", refresh=False
        )

    return on_round


def _global_model(
    cfg: FleetConfig,
) -> Tuple[Any, Callable[[ArrayRecord], Tuple[float, float]], int]:
    """The initial global model (seeded), the server's evaluation of a global state on
    the test split, and the fleet's training-set size."""
    from undercap.data.spec import load_splits
    from undercap.models.weights import initial_model
    from undercap.train.loop import evaluate

    data = load_splits(cfg.data)
    model, _ = initial_model(cfg.model, data, init_seed=cfg.seed, pretrained=None)
    x, y = data.x_test, data.y_test
    if cfg.eval_max_samples is not None:
        x, y = x[: cfg.eval_max_samples], y[: cfg.eval_max_samples]

    def evaluate_fn(arrays: ArrayRecord) -> Tuple[float, float]:
        model.load_state_dict(arrays.to_torch_state_dict())
        return evaluate(model, x, y)

    return model, evaluate_fn, int(data.n_train)


def _flwr_version() -> Optional[str]:
    try:
        from importlib.metadata import version

        return version("flwr")
    except Exception:  # pragma: no cover
        return None
