#!/usr/bin/env bash
# JetPack 6's floor, as a user installs it: the built wheel (not the tree) on Python
# 3.10 with torch 2.1.0, running the demo's `undercap run`. Called by
# `make test-jetpack6` and CI; needs the dev venv (.venv) to build the wheel.
#
# torch 2.1 was built against numpy 1.x, but pip gives Python 3.10 numpy 2 (torch
# declares no numpy requirement). So first the install as pip resolves it must stop
# with the one line naming the fix, then, after that fix, the run must pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV_JP6:-.venv-jp6}
OUT=${OUT_JP6:-build/ci-jetpack6}
export PYENV_VERSION=${PYENV_VERSION_JP6:-3.10.13}
t0=$(date +%s)
if ! "$VENV/bin/python" -c 'import torch; assert torch.__version__.startswith("2.1.0")' 2>/dev/null; then
    rm -rf "$VENV"
    python3.10 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "torch==2.1.0"
fi
rm -rf "$OUT" && mkdir -p "$OUT/dist"
.venv/bin/pip wheel -q --no-deps --no-build-isolation . -w "$OUT/dist"
WHEEL=$(ls "$OUT"/dist/undercap-*.whl)
"$VENV/bin/pip" uninstall -q -y undercap 2>/dev/null || true
"$VENV/bin/pip" install -q "$WHEEL[digits]" "numpy>=2"  # what a fresh install resolves to
t1=$(date +%s)
"$VENV/bin/python" -c 'import sys, torch, numpy; print(f"JetPack 6 floor: Python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}")'

set +e
UNDERCAP="$VENV/bin/undercap" DEMO_ONLY_RUN=1 bash scripts/demo.sh "$OUT/numpy2" >"$OUT/numpy2.out" 2>&1
rc=$?
set -e
line=$(tail -n 1 "$OUT/numpy2/run.log")
echo "with numpy 2: exit $rc: $line"
if [ "$rc" != 2 ] || [[ "$line" != "error: "*"torch 2.1.0"*"pip install 'numpy<2'"* ]]; then
    echo "expected exit 2 and one line naming pip install 'numpy<2'" >&2
    exit 1
fi
# ... and nothing above it: no numpy warning, no traceback (torch is not imported first)
if [ "$(wc -l < "$OUT/numpy2/run.log")" != 1 ]; then
    echo "expected the error line alone on stderr, got:" >&2
    cat "$OUT/numpy2/run.log" >&2
    exit 1
fi

"$VENV/bin/pip" install -q "numpy<2"
"$VENV/bin/python" -c 'import numpy; print(f"after pip install numpy<2: numpy {numpy.__version__}")'
UNDERCAP="$VENV/bin/undercap" DEMO_ONLY_RUN=1 bash scripts/demo.sh "$OUT/demo"
python3 - "$OUT/demo/run-3.5W/train.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["reached"] and r["simulated"] and r["peak_power_w"] <= 3.5, r
print(f"wheel on JetPack 6's floor: batch {r['batch_size']} at {r['freq_mhz_start']} MHz, "
      f"{r['time_to_accuracy_s']:.2f} s to target (simulated), peak {r['peak_power_w']:.2f} W")
PY
t2=$(date +%s)
echo "JetPack 6 floor: set-up $((t1 - t0)) s, runs $((t2 - t1)) s"
