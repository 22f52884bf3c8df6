#!/usr/bin/env bash
# The YOLOv9 fidelity run of the original's comparison (issue: fidelity to the original): the synthetic
# set `data synth --task detect --images 400 --imgsz 640 --classes 8 --seed 0` (320 train / 80 val),
# YOLOv9-t from scratch, 10 epochs, batch 8, 640 px, 8 workers, no_aug_epochs=2, validation after epoch
# 10; everything else our defaults. Eager and cuda_graph=true, each timed end to end (wall s).
#   benchmarks/fidelity/run.sh BUILD_DIR OUT_DIR [extra key=value ...]
# With LY9T_CKPT=path, also validates the original's own checkpoint on the same set.
set -uo pipefail
B=${1:?usage: run.sh BUILD_DIR OUT_DIR [key=value ...]}; O=${2:?}; shift 2
CLI=$B/tools/libreyolo; mkdir -p "$O"; D=/tmp/fid_det; R=/tmp/fid_runs
[ -f $D/data.yaml ] || $CLI data synth --task detect --out $D --images 400 --imgsz 640 --classes 8 --seed 0 > "$O/synth.log" 2>&1
common=(model=yolo9t data=$D/data.yaml epochs=10 batch=8 imgsz=640 workers=8 no_aug_epochs=2 eval_interval=10
        project=$R exist_ok=true "$@")
for arm in ${ARMS:-eager graph}; do
  extra=(); [ $arm = graph ] && extra=(cuda_graph=true)
  t0=$(date +%s.%N)
  timeout -k 10 300 $CLI train "${common[@]}" name=$arm "${extra[@]}" > "$O/train_$arm.log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "$arm rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(grep -E '^metrics:' "$O/train_$arm.log" | tail -1)"
  cp $R/$arm/results.csv "$O/results_$arm.csv" 2>/dev/null
done
if [ -n "${LY9T_CKPT:-}" ]; then
  timeout -k 10 300 $CLI val model="$LY9T_CKPT" data=$D/data.yaml imgsz=640 batch=16 > "$O/val_ly9t.log" 2>&1
  echo "val original ckpt rc=$? $(tail -2 "$O/val_ly9t.log" | tr '\n' ' ')"
fi
