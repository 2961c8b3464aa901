#!/usr/bin/env bash
# JetPack 5's floor: the default test suite on Python 3.8 with torch 2.0.1 and numpy 1.x
# (NVIDIA's JetPack 5 wheels are torch 2.0/2.1 for Python 3.8). Called by
# `make test-jetpack5` and CI. The venv is kept (.venv-jp5) and reused while
# pyproject.toml is unchanged: torch 2.0.1 from PyPI is a CUDA build of a few GB.
#
# The wheel test is left out here (UNDERCAP_WHEEL_TORCH=skip): it would install torch
# 2.0.1 a second time; the JetPack 6 job installs the wheel for real.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV_JP5:-.venv-jp5}
export PYENV_VERSION=${PYENV_VERSION_JP5:-3.8.18}  # pyenv's 3.8, where pyenv is used
STAMP="$VENV/.stamp-$(sha1sum pyproject.toml | cut -c1-12)"
t0=$(date +%s)
if [ ! -f "$STAMP" ]; then
    rm -rf "$VENV"
    python3.8 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "torch==2.0.1" "numpy<2"
    "$VENV/bin/pip" install -q -e ".[all,dev]"
    touch "$STAMP"
fi
t1=$(date +%s)
"$VENV/bin/python" -c 'import sys, torch, numpy; print(f"JetPack 5 floor: Python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}")'
UNDERCAP_WHEEL_TORCH=skip "$VENV/bin/python" -m pytest -q -p no:cacheprovider
t2=$(date +%s)
echo "JetPack 5 floor: set-up $((t1 - t0)) s, test suite $((t2 - t1)) s"
