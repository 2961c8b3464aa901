#!/bin/bash
# Dense vs sparse evaluation of an estimate on one CUDA GPU, read-only (nothing on the
# GPU is changed), alternating dense / sparse twice, then device `train`s
# (dense, sparse, twice) that report their evaluation time. ResNet-18 on a CIFAR-10
# quarter, b = 32..512, seed 0, target 0.6, --jobs 5 on the one GPU: the job measured
# on an H200 (benchmarks/results/estimate_cost_h200/). Runs from the source tree, no
# install:
#
#   DATA_DIR=path/with/cifar10-quarter-a.npz OUT=out-dir bash benchmarks/estimate_cost_gpu.sh
#
# SMALL=1 DEV=sim:jetson-nano TD=cpu: a CPU rehearsal (small CNN, 400 training images).
# TRAIN=0 leaves out the `train` step; PAIRS=1 runs one dense / sparse pair; EXTRA adds
# estimate flags to both (EXTRA="--eval-max-samples 1000": a split of two GPU batches).
# Writes summary.md (python3 benchmarks/estimate_cost_gpu_summary.py) and the runs'
# records (all.tgz) to $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
U="python3 -m undercap.cli"; O=$(mktemp -d); OUT=${OUT:-estimate-cost-gpu}; mkdir -p "$OUT"
D=${DEV:-nvml:0}; T=${TD:-cuda}; DATA=${DATA_DIR:-$PWD/.devcarry/data}
if [ "${SMALL:-0}" = 1 ]; then
  L="--limit 400"; BS=32..64; TGT=0.2; TO=120; M=small-cnn; MX=2000
else
  L=""; BS=32..512; TGT=0.6; TO=150; M=resnet18; MX=400000
fi
t0=$(date +%s); log(){ echo "=== [$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm \
  --format=csv > "$O/nvidia-smi.csv" 2>&1
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())" > "$O/env.txt"
for i in $(seq "${PAIRS:-2}"); do
  [ $i = 2 ] && [ $(( $(date +%s)-t0 )) -gt 300 ] && { log "skip pair 2"; break; }
  for s in dense sparse; do
    log "estimate $s $i"
    a=$(date +%s.%N)
    timeout $TO $U estimate --model $M --dataset npz:cifar10-quarter-a.npz --data-dir "$DATA" $L \
      --batch-sizes $BS --seeds 1 --target-accuracy $TGT --max-samples $MX --torch-device $T \
      --jobs 5 ${EXTRA:-} --eval-schedule $s --work-dir "$O/w-$s-$i" --no-progress \
      -o "$O/eff-$s-$i.json" > "$O/est-$s-$i.log" 2>&1
    rc=$?; b=$(date +%s.%N)
    echo "$s,$i,$rc,$(python3 -c "print(round($b-$a,2))")" >> "$O/walls.csv"; tail -3 "$O/est-$s-$i.log"
  done
done
if [ "${TRAIN:-1}" = 1 ]; then  # at the H200's own 700 W: the guard never steps in
  for i in 1 2; do for s in dense sparse; do
    log "train read-only b=128, $s $i"
    timeout 90 $U train --device $D --read-only --model $M --dataset npz:cifar10-quarter-a.npz \
      --data-dir "$DATA" $L --batch-size 128 --power-limit ${LIMIT:-700} --target-accuracy $TGT \
      --torch-device $T --eval-schedule $s --no-progress -o "$O/train128-$s-$i" \
      > "$O/train-$s-$i.log" 2>&1
    echo "train $s $i rc=$?"; tail -6 "$O/train-$s-$i.log"
  done; done
fi
log done
python3 benchmarks/estimate_cost_gpu_summary.py "$O" > "$OUT/summary.md" 2>&1; cat "$OUT/summary.md"
cp "$O/walls.csv" "$O/nvidia-smi.csv" "$O/env.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C "$O" . 2>/dev/null
