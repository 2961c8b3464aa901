"""undercap-helper: the few privileged writes of clock control, in a small process of
their own, so that the training never runs as root.

A root process started by the admin (`undercap-helper serve`, under systemd) owns the
devices it is named at start and, for members of its group on a Unix socket (the kernel
names the caller: SO_PEERCRED), acquires a device (its settings saved in the state file
`undercap restore` reads), locks it at a step of the device's own table and releases it.
One client controls a device at a time; when its connection closes, however it ends
(exit, SIGKILL, the OOM killer), the helper puts the device back, as it does on its own
SIGTERM and, after being killed, at its next start. The design follows Zeus's zeusd (a
privileged daemon on a Unix socket serving a minimal API, its systemd unit hardened);
what it does and does not do: docs/guides/helper.md.

Layout: protocol.py (the wire format), server.py (the helper), client.py (what the
Jetson and NVML backends relay through), cli.py (`undercap-helper`). Python 3.6 and
the standard library (plus nvidia-ml-py for an NVIDIA GPU): it runs on JetPack 4.6.
"""
