#!/bin/bash
# A device run's evaluation on text, on one CUDA GPU, read-only (nothing on the GPU is
# changed): `undercap train` of the char transformer on tiny Shakespeare (1,742
# held-out windows of 64 characters: four of the GPU's evaluation batches of 512, so a
# look can stop after one, two or three), b = 64, at the device's default grid (every
# 2,000 samples), at the GPU's own power limit (700 W on an H200: the guard never
# changes the batch). Three schedules, alternating, ROUNDS times: dense; sparse (the
# default: a look's margin from the windows' own spread); sparse with every check at
# the Bhatia-Davis bound (the check before the spread, switched by patching
# SparseParams: no flag of the tool). Runs from the source tree, no install:
#
#   DATA_DIR=data OUT=out bash benchmarks/device_eval_text_gpu.sh
#
# DEV=sim:jetson-nano TD=cpu SMALL=1: a CPU rehearsal (400 training windows; with a
# python3 that has torch first on PATH, e.g. PATH=$PWD/.venv/bin:$PATH).
# Writes summary.md (evaluation seconds over training seconds, looks) and the runs'
# train.json files (all.tgz) to $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
O=$(mktemp -d); OUT=${OUT:-device-eval-text-gpu}; mkdir -p "$OUT"
D=${DEV:-nvml:0}; T=${TD:-cuda}; DATA=${DATA_DIR:-$PWD/.devcarry/data}
if [ "${SMALL:-0}" = 1 ]; then
  X="--limit 400 --max-samples 1200 --eval-every 200 --eval-max-samples 600"; TGT=0.2; TO=300; RO="";
else
  X="--max-samples ${MAX_SAMPLES:-250000}"; TGT=${TARGET:-0.45}; TO=100; RO="--read-only"
fi
BOUND='import dataclasses, sys
import undercap.train.loop.evalplan as E
real = E.SparseParams.default
E.SparseParams.default = classmethod(
    lambda cls, *a, **k: dataclasses.replace(real(*a, **k), item_spread=False))
from undercap.cli import main
sys.exit(main(sys.argv[1:]))'
summary(){  # after every run: a call cut short still brings its rows back
  python3 - "$O" > "$OUT/summary.md" <<'EOF'
import json, sys
from pathlib import Path
print("| run | time to target s | samples | train s | eval s | eval / train | looks | whole | screened windows |")
print("|---|---|---|---|---|---|---|---|---|")
for p in sorted(Path(sys.argv[1]).glob("train-*.json"), key=lambda p: (p.stem.split("-")[2], p.stem)):
    d = json.loads(p.read_text()); e = d.get("evaluation") or {}
    tr, ev = d.get("train_time_s") or 0.0, d.get("eval_time_s") or 0.0
    print(f"| {p.stem[6:]} | {d.get('time_to_accuracy_s')} | {d.get('samples_to_target')} | "
          f"{tr:.2f} | {ev:.3f} | {ev / tr if tr else 0:.1%} | {e.get('looks')} | "
          f"{e.get('full_evaluations')} | {e.get('screened_items')} |")
EOF
  tar czf "$OUT/all.tgz" -C "$O" . 2>/dev/null
}
t0=$(date +%s); log(){ echo "=== [$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm \
  --format=csv > "$O/nvidia-smi.csv" 2>&1
for i in $(seq "${ROUNDS:-2}"); do
  for s in dense sparse bound; do
    log "train $s $i"
    args=(train --device "$D" $RO --model char-transformer --dataset text:text/tinyshakespeare.txt
      --data-dir "$DATA" $X --batch-size 64 --power-limit ${LIMIT:-700} --target-accuracy $TGT
      --torch-device "$T" --eval-schedule "${s/bound/sparse}" --no-progress -o "$O/train-$s-$i.json")
    if [ $s = bound ]; then timeout $TO python3 -c "$BOUND" "${args[@]}" > "$O/$s-$i.log" 2>&1
    else timeout $TO python3 -m undercap.cli "${args[@]}" > "$O/$s-$i.log" 2>&1; fi
    echo "rc=$?"; tail -3 "$O/$s-$i.log"; summary
  done
done
log done
cat "$OUT/summary.md"; cp "$O/nvidia-smi.csv" "$OUT/" 2>/dev/null
