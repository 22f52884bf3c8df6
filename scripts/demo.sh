#!/usr/bin/env bash
# The main job on an embedded default: build, generate a small synthetic detection dataset, train
# YOLOv9-t on it with the profiler on (CPU when there is no GPU), then predict on its validation images.
# It ends with the validation mAP50 / mAP50-95 and the paths of results.png and an annotated prediction.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The demo trains YOLOv9 only, so its command line compiles that family alone (DEMO_FAMILIES="" = every
# family): on 2 cores a few minutes instead of the ~25 that all fifteen take. Its own build folder, so
# scripts/test.sh (every family, the tests) does not reconfigure it.
cmake -S . -B build-demo -G Ninja -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_EXAMPLES=OFF \
  -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DLIBREYOLO_FAMILIES=${DEMO_FAMILIES-yolo9}" >/dev/null
cmake --build build-demo --target libreyolo_cli -j"$(nproc)"
device=cpu; command -v nvidia-smi >/dev/null 2>&1 && device=""
ly=build-demo/tools/libreyolo
# The recipe: the original's YOLOv9 defaults (SGD lr0 0.01, linear schedule, batch 8) with a 1-epoch
# warm-up, on a set and an image size small enough for a CPU: 2 classes of textured shapes on cluttered
# backgrounds at 128 px, 24 epochs. One deliberate difference: no mosaic. At 128 px the mosaic (four
# images on a 2S canvas resized to S) halves objects whose median side is 16 px; measured on this set
# (seed 0, 24 epochs): mAP50 0.60 without mosaic, 0.39 with it for the first 12 epochs, 0.38 after 12
# epochs with the original's no_aug_epochs schedule (benchmarks/RESULTS.md, "demo"). The profiler
# measures a window of steps of the first epoch and prints its report; training goes on.
# DEMO_IMAGES / DEMO_EPOCHS change the size; extra key=value arguments go to `train`.
data=runs/demo-det
[ -f $data/data.yaml ] || $ly data synth --task detect --out $data --images ${DEMO_IMAGES:-240} --imgsz 128 --classes 2 --seed 0
start=$(date +%s)
# An extra key=value replaces the default of its key (`libreyolo` refuses a key given twice).
defaults=(model=yolo9t data=$data/data.yaml imgsz=128 epochs=${DEMO_EPOCHS:-24} batch=8 workers=2 mosaic=0
  warmup_epochs=1 eval_interval=6 profile=true profile_warmup=3 profile_steps=8 device="$device" project=runs/train name=demo
  exist_ok=true)
args=()
for d in "${defaults[@]}"; do
  keep=1
  for a in "$@"; do if [ "${a%%=*}" = "${d%%=*}" ]; then keep=0; fi; done
  if [ $keep = 1 ]; then args+=("$d"); fi
done
$ly train "${args[@]}" "$@"
trained=$(( $(date +%s) - start ))
$ly predict model=runs/train/demo/weights/best.ckpt source=$data/images/val conf=0.25 device="$device" \
  project=runs/predict name=demo exist_ok=true >/dev/null
first=$(ls runs/predict/demo/*.jpg | head -n 1)
# The last validation of results.csv: its mAP50 and mAP50-95 columns.
python_free_map() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) { if ($i == "val/mAP50") a = i; if ($i == "val/mAP50-95") b = i } }
           NR > 1 && $a != "" { m50 = $a; m = $b } END { printf "mAP50 %s  mAP50-95 %s", m50, m }' runs/train/demo/results.csv
}
echo
echo "trained in ${trained} s; final validation: $(python_free_map)"
echo "training curves:      runs/train/demo/results.png (also confusion_matrix.png, PR_curve.png, val_batch0_pred.jpg)"
echo "an annotated image:   $first"
echo "profile:              runs/train/demo/profile.json, timeline.html"
