#!/usr/bin/env bash
# JetPack 4.6's floor (Jetson Nano, TX2, TX2 NX; issue 37): the device side on Python
# 3.6 with torch 1.10.2 and numpy 1.19, from the built wheel as a board installs it.
# Called by `make test-jetpack4` and CI; needs the dev venv (.venv) to build the wheel,
# run vermin and play the server in the round trip.
#
# 1. vermin: the device path (tests/device_path.py) and its tests need Python <= 3.6
# 2. the device-side tests on Python 3.6, importing the installed wheel (not src/)
# 3. the round trip: a profile made on 3.6 selects on the server, a server `run`'s
#    selection trains on 3.6, the train result reads back (tests/test_jetpack4.py)
#
# torch 1.10.2's cp36 wheel is ~880 MB (CUDA 10.2 inside): it is kept in pip's cache
# folder (the index's responses are not cached), and the venv (.venv-jp4) is reused
# while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV_JP4:-.venv-jp4}
OUT=${OUT_JP4:-build/ci-jetpack4}
TORCH_JP4=${TORCH_JP4:-1.10.2}
export PYENV_VERSION=${PYENV_VERSION_JP4:-3.6.15}  # pyenv's 3.6, where pyenv is used
STAMP="$VENV/.stamp-$(sha1sum pyproject.toml | cut -c1-12)"
t0=$(date +%s)
if [ ! -f "$STAMP" ]; then
    rm -rf "$VENV"
    python3.6 -m venv "$VENV"
    "$VENV/bin/pip" install -q "pip==21.3.1"  # the last pip for Python 3.6, as on a board
    WHEELS="$("$VENV/bin/pip" cache dir)/undercap-jetpack4"
    if ! ls "$WHEELS"/torch-"$TORCH_JP4"-cp36-*.whl >/dev/null 2>&1; then
        "$VENV/bin/pip" download -q --no-deps -d "$WHEELS" "torch==$TORCH_JP4"
    fi
    "$VENV/bin/pip" install -q "$WHEELS"/torch-"$TORCH_JP4"-cp36-*.whl "numpy>=1.19,<1.20" \
        "pytest>=7,<7.1" pytest-timeout hypothesis
    touch "$STAMP"
fi
rm -rf "$OUT" && mkdir -p "$OUT/dist"
.venv/bin/pip wheel -q --no-deps --no-build-isolation . -w "$OUT/dist"
WHEEL=$(ls "$OUT"/dist/undercap-*.whl)
"$VENV/bin/pip" uninstall -q -y undercap 2>/dev/null || true
"$VENV/bin/pip" install -q "$WHEEL[digits,images]"
t1=$(date +%s)
"$VENV/bin/python" -c 'import sys, torch, numpy; print("JetPack 4.6 floor: Python {}, torch {}, numpy {}".format(sys.version.split()[0], torch.__version__, numpy.__version__))'

# shellcheck disable=SC2046  # one file a line, no spaces in the repository's paths
.venv/bin/vermin -q -t=3.6- --backport dataclasses --violations --no-tips \
    $(.venv/bin/python tests/device_path.py) $(.venv/bin/python tests/device_path.py --test-sources)
echo "vermin: the device path and its tests run on Python 3.6"
# shellcheck disable=SC2046
"$VENV/bin/python" -m pytest -q -p no:cacheprovider $(.venv/bin/python tests/device_path.py --tests)
t2=$(date +%s)
UNDERCAP_JP4_PYTHON="$PWD/$VENV/bin/python" .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/test_jetpack4.py
t3=$(date +%s)
echo "JetPack 4.6 floor: set-up $((t1 - t0)) s, device tests on 3.6 $((t2 - t1)) s, round trip $((t3 - t2)) s"
