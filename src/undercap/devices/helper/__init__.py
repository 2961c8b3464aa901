"""undercap-helper: the few privileged writes of clock control, in a small process of
their own, so that the training never runs as root.

A root process (`undercap-helper serve`, under systemd) serves the devices it is named
at start to the members of its group on a Unix socket: one client at a time acquires a
device, locks it at a step of its table and releases it, and the device goes back to its
saved settings when that client's connection closes, however the client ends. The design
follows Zeus's zeusd (a privileged daemon on a Unix socket serving a minimal API, its
systemd unit hardened); what it does and does not do: docs/guides/helper.md.

Layout: protocol.py (the wire format), server.py (the helper), client.py (what the
Jetson and NVML backends relay through), cli.py (`undercap-helper`). Python 3.6 and
the standard library (plus nvidia-ml-py for an NVIDIA GPU): it runs on JetPack 4.6.
"""
