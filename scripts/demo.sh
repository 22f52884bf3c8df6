#!/usr/bin/env bash
# The main job on an embedded default: build, generate a small synthetic dataset, train with the
# profiler on (CPU when there is no GPU) and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build --target libreyolo_cli -j"$(nproc)"
device=cpu; command -v nvidia-smi >/dev/null 2>&1 && device=""
# YOLOv9-t on a generated detection set (textured shapes on cluttered backgrounds), small images so that
# a CPU trains it in a few minutes; the profiler measures a window of steps and prints its report.
[ -f runs/demo-det/data.yaml ] || build/tools/libreyolo data synth --task detect --out runs/demo-det \
  --images 240 --imgsz 160 --classes 4 --seed 0
build/tools/libreyolo train model=yolo9t data=runs/demo-det/data.yaml imgsz=160 epochs=15 batch=16 nbs=16 \
  workers=2 optimizer=AdamW lr0=0.002 warmup_epochs=1 no_aug_epochs=3 eval_interval=1 profile=true profile_warmup=3 \
  profile_steps=8 device="$device" project=runs/train name=demo exist_ok=true "$@"
echo "results (mAP50, mAP50-95 per epoch): runs/train/demo/results.csv; profile: runs/train/demo/profile.json, timeline.html"
