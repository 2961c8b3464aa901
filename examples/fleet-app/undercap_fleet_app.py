"""This Flower app's ServerApp: undercap's fleet ServerApp (undercap.fleet.server_app),
reading the run config's relative paths (fleet-file, efficiency) from this folder,
which `flwr run` ships to the SuperLink with the app (docs/fleet.md)."""

from pathlib import Path

from undercap.fleet.server_app import deployment_app

app = deployment_app(Path(__file__).resolve().parent)
