"""The demo's numbers, kept with the machine that printed them.

    .venv/bin/python benchmarks/demo.py          # about a minute on 2 cores

Runs `scripts/demo.sh` (what `make demo` runs) into a temporary folder and writes
benchmarks/results/demo/: `comparison.md` (compare's tables, as printed), `run.md` (the
`run` step's summary, as printed) and `machine.json` (CPU, cores, Python, torch, the
demo's wall time). The site's demo page and home page show these files (docs/hooks.py),
and tests/test_docs.py checks the README's copy of them, so no page quotes numbers that
the tree no longer makes.

Why the machine matters: the device times are the simulated Nano's, but how many samples
each run needs to reach 90% comes from real training on the host's CPU, whose
floating-point paths (vector width, the BLAS kernels torch picks) round differently
from one CPU model to the next; a seed's run can then cross the target one evaluation
earlier or later. On two machines of the same kind the demo's Baseline 1 at 3.5 W read
2.41 +- 0.30 s and 2.44 +- 0.24 s.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import harness as H

OUT = H.RESULTS / "demo"


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform says."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or platform.machine()
    found = re.search(r"^model name\s*:\s*(.+)$", text, flags=re.M)
    return found.group(1).strip() if found else platform.machine()


def run_summary(printed: str) -> str:
    """The `run` step's summary block from the demo's stdout."""
    start = printed.index("# undercap run:")
    return printed[start : printed.index("\nwrote ", start)].rstrip() + "\n"


def machine(wall_s: float) -> dict:
    import numpy
    import torch

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "demo_wall_s": round(wall_s, 1),
    }


def main() -> int:
    elapsed = H.stopwatch()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["bash", str(H.REPO / "scripts" / "demo.sh"), tmp]
        proc = subprocess.run(cmd, cwd=H.REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
            return proc.returncode
        wall_s = elapsed()
        comparison = (Path(tmp) / "compare" / "comparison.md").read_text(encoding="utf-8")
    OUT.mkdir(parents=True, exist_ok=True)
    H.write_text(OUT / "comparison.md", comparison)
    H.write_text(OUT / "run.md", run_summary(proc.stdout))
    H.write_json(OUT / "machine.json", machine(wall_s))
    print(comparison)
    print(f"demo finished in {wall_s:.0f} s; wrote {OUT}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
