"""undercap-helper: the few privileged writes of clock control, in a small process of
their own, so that the training never runs as root.

Locking a Jetson's GPU clock writes a handful of sysfs files (devfreq `min_freq`,
`max_freq`, `governor`, `railgate_enable`); locking an NVIDIA GPU's is two NVML calls.
Everything else undercap does (reading power and clocks, training the model, reading the
user's data and code) needs no privilege. So a root process started by the admin
(`undercap-helper serve`, under systemd) owns the devices it is named at start and does
exactly these operations for a client on a Unix socket: acquire a device (its settings
are saved, in the same state file `undercap restore` reads), lock it at a frequency from
the device's own table, release it (the settings go back). The client is told apart by
the kernel (SO_PEERCRED: pid, uid, gid, read at connect); only members of the helper's
group may use it, one client controls a device at a time, and when the client's
connection closes, however it ends (exit, exception, SIGKILL, the OOM killer), the
helper puts the device back. The helper restores on its own SIGTERM, and a helper that
was itself killed restores at its next start from the state file.

The design follows Zeus's zeusd (a privileged daemon on a Unix socket serving a
minimal API, its systemd unit hardened) and what users of such tools ask for first:
settings restored when the controlling program goes away.

Layout: protocol.py (the wire format), server.py (the helper), client.py (what the
Jetson and NVML backends relay through), cli.py (`undercap-helper`). Python 3.6 and
the standard library (plus nvidia-ml-py for an NVIDIA GPU): it runs on JetPack 4.6.
"""
