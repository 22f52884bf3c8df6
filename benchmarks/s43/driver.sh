#!/usr/bin/env bash
# Issue 43's table at one commit (written in session 42 for the next device session): ours, every family the issue
# names, on the scenes set (`data synth --task detect --style scenes --images 600 --imgsz 960 --classes 12 --seed S`,
# 480 / 120 images), seeds 0 and 1, 10 epochs, 640 px, no_aug_epochs=2, batch 8 (CNNs) / 4 (DETRs), from scratch,
# each arm through benchmarks/fidelity/side_by_side.sh (common.sh lane_arm), all at once on the one GPU.
# The original's side is optional (ORIG=1): its code does not change with ours and it is not reproducible from its
# seed (RESULTS.md session 25), so the earlier sessions' runs of it (18, 24, 25, 26) are its reference; ORIG=1 adds
# one more run of each of its families at both seeds (its DETRs take ~20 minutes under this load).
#   cp -a . /tmp/s43 && cd /tmp/s43 && (COMMIT=... setsid bash benchmarks/s43/driver.sh > /tmp/s43_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s43_driver.log DRIVER_OUT=/tmp/s43out WAIT=<s> PERIOD=15 bash /tmp/s43/benchmarks/s31/poll.sh
# Carry .deps and .orig.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s43out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
echo "driver start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown} ORIG=${ORIG:-0}"
nvidia-smi --query-gpu=name --format=csv,noheader
[ "${ORIG:-0}" = 1 ] && { coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"; export PYTHONPATH; }
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1; do synth_set /tmp/scenes_$s $s & done
wait; echo "sets written $(date -u +%T)"
FAMS=${FAMS:-"yolo9t yoloxt rtmdett yolonass yolo7b rtdetr-r18 rtdetrv2-r18 dfinen deimn"}
for s in 0 1; do
  for m in $FAMS; do
    ARM_TIMEOUT=${ARM_TIMEOUT:-900} lane_arm $m $s ours scenes &
    if [ "${ORIG:-0}" = 1 ] && [ $m != yolo7b ]; then   # c41461e has no YOLOv7
      keys=""; [ $m = rtdetr-r18 ] || [ $m = rtdetrv2-r18 ] && keys=pretrained_backbone=false
      ARM_TIMEOUT=${ARM_TIMEOUT:-1500} lane_arm $m $s original scenes "$keys" &
    fi
  done
done
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
cat $OUT/lanes.txt
pack
echo "driver done $(date -u +%FT%TZ)"
