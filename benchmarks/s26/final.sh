#!/usr/bin/env bash
# Session 26's closing device run, on one fresh machine (carry .deps and .orig; COMMIT= the commit under test):
#   cp -a . /tmp/s26f && cd /tmp/s26f && (COMMIT=... setsid bash benchmarks/s26/final.sh > /tmp/s26f_driver.log 2>&1 < /dev/null &)
# read with `LOG=/tmp/s26f_driver.log DRIVER_OUT=/tmp/s26fout benchmarks/s24/poll.sh`.
#   1. benchmarks/gpu_suites.sh build: the tests, the CLI and graph_speedup against the machine's LibTorch 2.11 (-O1);
#      the first CUDA build of RF-DETR's trainer (issue 40);
#   2. the GPU suites of every area (in the background), RF-DETR's kit cases among them;
#   3. beside them, RF-DETR-n on issue 40's protocol (shapes set: `data synth --task detect --images 400 --imgsz 640
#      --classes 8 --seed 0`, from scratch, 10 epochs, batch 4, no_aug_epochs=2, 640 px), ours and the original's own
#      trainer (c41461e, LibreRFDETR({}, size="n"): no downloaded weights), seed 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s26fout; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
echo "final start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-540} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"; cp $OUT/build.log $L/ 2>/dev/null; pack
[ -x $CLI ] || { echo "no CLI: stop"; echo "driver done"; exit 1; }
( bash benchmarks/gpu_suites.sh suites > $L/suites_stdout.log 2>&1; echo "suites done $(date -u +%T)" ) &
coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"
export PYTHONPATH
STYLE=shapes synth_set /tmp/shapes_0 0; echo "set written $(date -u +%T)"
# VALCHECK=1 (benchmarks/s27/final.sh): issue 43's val check after fidelity rows 17, 18 and 20: the original trains
# YOLOv9-t and YOLOX-t on the scenes set (seeds 0-1); each lane prints our `val` of its checkpoint beside its own validator's.
# Our arms of the same models and seeds run beside them (session 27's training changes: the non-mosaic samples top-left,
# training validation clamped before NMS), each pair in the same call under the same load. The sets are written first
# (two arms of one seed would write the same folder at once). Model names are ours without a hyphen (yolo9t, yoloxt):
# original_train.py splits the size off after the family prefix.
if [ "${VALCHECK:-0}" = 1 ]; then
  for s in 0 1; do synth_set /tmp/scenes_$s $s & done; wait; echo "scenes sets written $(date -u +%T)"
  for s in 0 1; do for m in yolo9t yoloxt; do for side in original ours; do
    ARM_TIMEOUT=${ARM_TIMEOUT:-540} lane_arm $m $s $side scenes & done; done; done
fi
[ "${ARMS:-1}" = 1 ] && { ARM_TIMEOUT=${ARM_TIMEOUT:-480} lane_arm rfdetr-n 0 ours shapes & ARM_TIMEOUT=${ARM_TIMEOUT:-480} lane_arm rfdetr-n 0 original shapes & }
wait
cat $L/lanes/*.txt 2>/dev/null | grep -E "^seed" | sort > $OUT/lanes.txt
cp $OUT/gpu_suites.log $L/ 2>/dev/null
echo "driver done $(date -u +%FT%TZ)"
pack
