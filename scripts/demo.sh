#!/usr/bin/env bash
# The main job on an embedded default: build, generate a small synthetic dataset, train with the
# profiler on (CPU when there is no GPU) and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build --target libreyolo_cli -j"$(nproc)"
device=cpu; command -v nvidia-smi >/dev/null 2>&1 && device=""
[ -d runs/demo-data/train ] || build/tools/libreyolo data synth --task classify --out runs/demo-data \
  --images 600 --imgsz 64 --classes 10 --seed 0
build/tools/libreyolo train model=resnet18 data=runs/demo-data epochs=12 imgsz=64 batch=16 nbs=16 workers=2 \
  optimizer=AdamW lr0=0.001 scheduler=cos warmup_epochs=1 profile=true profile_warmup=3 profile_steps=8 device="$device" \
  project=runs/train name=demo exist_ok=true "$@"
echo "results: runs/train/demo/results.csv, profile: runs/train/demo/profile.json (timeline.html)"
