#!/bin/bash
# Mixed precision on one CUDA GPU, read-only (nothing on the GPU is changed), in one run:
#
#  1. the resnet18 profile (b = 32..512) in fp32 and in bf16, side by side: t(b), P(b);
#  2. the ResNet-18 estimate of benchmarks/estimate_cost_gpu.sh (a CIFAR-10 quarter,
#     b = 32..512, target 0.6, the sparse schedule), with two seeds: twice in fp32 (the
#     baseline, and the spread of two fp32 estimates) and once in bf16, each timed end to
#     end. The goals: the bf16 estimate in at most 30 s, its N(b) within the spread of the
#     two fp32 ones.
#
# Runs from the source tree, no install; results into $OUT (commit them under
# benchmarks/results/gpu/<gpu>/):
#
#   DATA_DIR=path/with/cifar10-quarter-a.npz OUT=out-dir bash benchmarks/precision_gpu.sh
#
# SMALL=1 DEV=sim:jetson-nano TD=cpu: a CPU rehearsal (small CNN, 400 images; fp16, the
# Nano's 16-bit precision, in place of bf16). Writes summary.md and all.tgz to $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
U="python3 -m undercap.cli"; O=$(mktemp -d); OUT=${OUT:-precision-gpu}; mkdir -p "$OUT"
D=${DEV:-nvml:0}; T=${TD:-cuda}; DATA=${DATA_DIR:-$PWD/.devcarry/data}
if [ "${SMALL:-0}" = 1 ]; then
  L="--limit 400"; BS=32..64; TGT=0.2; M=small-cnn; MX=2000; MIXED=fp16; SHAPE="--input-shape 3x32x32"
else
  L=""; BS=32..512; TGT=0.6; M=resnet18; MX=400000; MIXED=${MIXED:-bf16}; SHAPE=""
fi
t0=$(date +%s); log(){ echo "=== [$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm \
  --format=csv > "$O/nvidia-smi.csv" 2>&1
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())" > "$O/env.txt"
for p in fp32 $MIXED; do
  log "profile $p"
  timeout 120 $U profile --device $D --read-only --model $M $SHAPE --batch-sizes $BS \
    --precision $p --torch-device $T --no-progress -o "$O/profile-$p.json" > "$O/profile-$p.log" 2>&1
  echo "profile,$p,$?" >> "$O/rc.csv"
done
for run in fp32:1 fp32:2 $MIXED:1; do
  p=${run%%:*}; i=${run##*:}
  log "estimate $p $i"
  a=$(date +%s.%N)
  timeout 150 $U estimate --model $M --dataset npz:cifar10-quarter-a.npz --data-dir "$DATA" $L \
    --batch-sizes $BS --seeds 2 --target-accuracy $TGT --max-samples $MX --torch-device $T \
    --precision $p --jobs 4 --work-dir "$O/w-$p-$i" --no-progress -o "$O/eff-$p-$i.json" \
    > "$O/est-$p-$i.log" 2>&1
  rc=$?; b=$(date +%s.%N)
  echo "estimate,$p-$i,$rc,$(python3 -c "print(round($b-$a,2))")" >> "$O/rc.csv"; tail -2 "$O/est-$p-$i.log"
done
log done
python3 - "$O" "$MIXED" > "$OUT/summary.md" <<'EOF'
import csv, json, sys
from pathlib import Path
o, mixed = Path(sys.argv[1]), sys.argv[2]
def load(name):
    p = o / name
    return json.loads(p.read_text()) if p.is_file() else None
gpu = (o / "nvidia-smi.csv").read_text().strip().splitlines()[-1]
print(f"# Mixed precision on one GPU, read-only\n\n{gpu}; {(o / 'env.txt').read_text().strip()}\n")
a, b = load("profile-fp32.json"), load(f"profile-{mixed}.json")
if a and b:
    ra = {r["batch_size"]: r for r in a["rows"]}
    rb = {r["batch_size"]: r for r in b["rows"]}
    print(f"| b | fp32 t (us/sample) | {mixed} t | ratio | fp32 peak (W) | {mixed} peak | ratio |\n|---|---|---|---|---|---|---|")
    for k in sorted(set(ra) & set(rb)):
        ta, tb = ra[k]["time_per_sample_s"] * 1e6, rb[k]["time_per_sample_s"] * 1e6
        pa, pb = ra[k]["peak_power_w"], rb[k]["peak_power_w"]
        print(f"| {k} | {ta:.1f} | {tb:.1f} | {tb / ta:.2f} | {pa:.1f} | {pb:.1f} | {pb / pa:.2f} |")
walls = {row[1]: (row[2], row[3]) for row in csv.reader(open(o / "rc.csv")) if row[0] == "estimate"}
effs = {k: load(f"eff-{k}.json") for k in walls}
print("\n| estimate | exit | wall (s) | N(b) |\n|---|---|---|---|")
for k, (rc, wall) in walls.items():
    n = (effs[k] or {}).get("samples_to_target_mean") or {}
    print(f"| {k} | {rc} | {wall} | " + ", ".join(f"{b}: {v:.0f}" for b, v in sorted(n.items(), key=lambda x: int(x[0])) if v) + " |")
f1, f2, m = effs.get("fp32-1"), effs.get("fp32-2"), effs.get(f"{mixed}-1")
if f1 and f2 and m:
    inside = []
    for b, v in (m.get("samples_to_target_mean") or {}).items():
        lo = min(f1["samples_to_target_mean"].get(b) or 0, f2["samples_to_target_mean"].get(b) or 0)
        hi = max(f1["samples_to_target_mean"].get(b) or 0, f2["samples_to_target_mean"].get(b) or 0)
        inside.append(v is not None and lo <= v <= hi)
    print(f"\n{mixed} N(b) inside the two fp32 estimates' range: {sum(inside)} of {len(inside)} batch sizes; "
          f"{mixed} estimate {walls[f'{mixed}-1'][1]} s (goal: at most 30 s)")
EOF
cat "$OUT/summary.md"
cp "$O/rc.csv" "$O/nvidia-smi.csv" "$O/env.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C "$O" . 2>/dev/null
