"""A fleet of power-capped devices training one model, on Flower (paper Sec. 6's future
work: "distributed learning settings where heterogeneous devices with different
constraints contribute to the training"). See docs/guides/fleet.md.

Each node runs undercap's local round under its own cap; the server plans every round
so that nodes finish together, and aggregates updates from unequal local work without
bias (FedNova, Wang et al., NeurIPS 2020).

    spec.py        the fleet file (nodes, devices, caps, schedules); torch-free
    config.py      a run's settings, from flags or Flower's run config; torch-free
    plan.py        per-node (b, f) and local work for a round; pure, torch-free
    aggregate.py   FedNova-style normalised averaging; numpy only
    partition.py   IID and non-IID (Dirichlet) splits of the training data; numpy only
    records.py     per-round, per-node results (frozen, JSON); torch-free
    local.py       one local round on one device under its cap (torch, no Flower)
    client_app.py  the Flower ClientApp (`@app.query()` profiles, `@app.train()` trains)
    strategy.py    the Flower strategy: per-node configuration, balancing, FedNova
    server_app.py  the Flower ServerApp (global evaluation, stop at the target)
    simulation.py  `undercap fleet`: N simulated devices in Flower's simulation runtime
    inprocess.py   the same apps in this process, without Ray
    report.py      rounds/nodes CSV and JSON, the summary and the figure

Only the Flower modules (client_app, strategy, server_app, simulation, inprocess)
import Flower (the `fleet` extra); `import undercap` and the CLI never do.
"""
