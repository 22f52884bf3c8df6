#!/usr/bin/env bash
# Session 26's measurement run (planned in session 25; ran 2026-12-04, results in benchmarks/RESULTS.md "session 26"), started as session 25's was:
#   cp -a . /tmp/s26repo && cd /tmp/s26repo && (setsid bash benchmarks/s26/driver.sh > /tmp/s26_driver.log 2>&1 < /dev/null &)
# then read with `LOG=/tmp/s26_driver.log benchmarks/s24/poll.sh` in the following calls (carry .deps and .orig).
# Session 25 changed what a detection training tile is (data/detect-inl.hpp load_tile: the image resized to its long
# side imgsz, as the original's pull_item gives it, not the decoded image; benchmarks/s25/yolo9_audit.md D1). These
# arms measure it, each library in the same call and under the same load:
#   yolo9  : YOLOv9-t seeds 0-3 on the scenes set, both libraries (before the change: ours 0.572, the original 0.585)
#   cnn    : YOLOX-t and YOLO-NAS-s seeds 0 1, ours only (their pipelines load the same tiles; before: RESULTS.md
#            session 18 / side-by-side)
#   rtdetr : RT-DETR-r18 seed 0, ours only (its pipeline, YOLOv9's transform, loads them too; before: 0.457 / 0.484)
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s26out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
has() { [[ " ${ARMS:-yolo9 cnn rtdetr} " == *" $1 "* ]]; }
echo "driver start $(date -u +%FT%TZ) ARMS=${ARMS:-all}"
coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"
export PYTHONPATH
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1 2 3; do synth_set /tmp/scenes_$s $s & done
wait; echo "sets written $(date -u +%T)"
has yolo9 && for s in 0 1 2 3; do lane_arm yolo9t $s original scenes & lane_arm yolo9t $s ours scenes & done
has cnn && for s in 0 1; do lane_arm yoloxt $s ours scenes & lane_arm yolonass $s ours scenes & done
has rtdetr && lane_arm rtdetr-r18 0 ours scenes &
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
echo "driver done $(date -u +%FT%TZ)"
pack
