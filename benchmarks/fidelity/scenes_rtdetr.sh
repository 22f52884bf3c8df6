#!/usr/bin/env bash
# RT-DETR-r18 on the scenes set (issue 43's protocol, ours only): `data synth --task detect --style scenes
# --images 600 --imgsz 960 --classes 12 --seed S` (480 train / 120 val, long sides 400-960), from scratch,
# 10 epochs, batch 4, 640 px, no_aug_epochs=2; the default (multi_scale=false since b0ffbfc, as the
# original) beside multi_scale=true (the default before). Prints each arm's final mAP50-95 and wall time.
#   OUT=dir benchmarks/fidelity/scenes_rtdetr.sh [SEED]     (on the CUDA machine, .deps carried)
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/fidelity/common.sh
seed=${1:-0}
build_cuda 300 libreyolo_cli
D=/tmp/scenes_$seed
timeout 120 $CLI data synth --task detect --style scenes --out $D --images 600 --imgsz 960 --classes 12 --seed $seed > $L/synth.log 2>&1
echo "synth rc=$? $(tail -1 $L/synth.log)"
for arm in multi_scale=false multi_scale=true; do
  t0=$(date +%s)
  timeout ${ARM_TIMEOUT:-150} $CLI train model=rtdetr-r18 data=$D/data.yaml epochs=10 batch=4 imgsz=640 workers=8 \
    no_aug_epochs=2 $arm project=/tmp/runs name=${arm/=/_} exist_ok=true > $L/train_${arm/=/_}.log 2>&1
  rc=$?
  echo "rtdetr-r18 $arm rc=$rc wall=$(( $(date +%s) - t0 ))s $(grep -E 'mAP50-95' $L/train_${arm/=/_}.log | tail -1)"
  cp /tmp/runs/${arm/=/_}/results.csv $L/results_${arm/=/_}.csv 2>/dev/null; pack
done
