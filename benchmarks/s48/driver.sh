#!/usr/bin/env bash
# Session 48's measurement call (ours only: the originals' code does not change with ours, and its RT-DETRv2 runs of
# ~900-1080 s do not fit beside ours in what device time was left). At f81dd3a ours has two changes no GPU has
# measured: fidelity rows 33-34 (session 46: the YOLOv9 pipeline's image alone, mixup after a mosaic only, RT-DETR and
# YOLOv7 top-left) and row 35 (this session: modules the originals deep-copy start as copies, the whole DETR line).
#   scenes seeds 0-1 (issue 43's protocol): YOLOv9-t, YOLOv7-b (rows 33-34), RT-DETR-r18, RT-DETRv2-r18 (33-35),
#                D-FINE-n, DEIM-n (35), and D-FINE-n, DEIM-n under train_resize=stretch (the geometry question)
#   shapes seeds 0-2 (issue 39's protocol): DEIMv2-atto, DEIMv2-s (35); with EC=1, EC-s seeds 1-2 letterbox and stretch
#   (left out of the session's call: four refused starts left 1169 s of device time)
# FAMILIES="rtdetr;rtdetrv2" builds a CLI of those families only. SHAPES_SEEDS (default 0 1 2) picks DEIMv2-s's seeds.
# SCENES_MODELS picks the scenes arms' models (default all six above).
# STRETCH=1 adds the D-FINE-n / DEIM-n stretch arms, ATTO=1 DEIMv2-atto (both left out after a fifth refusal: 989 s).
# ORIG_MODELS (session 49) adds the original's arms of those models at scenes seeds 0-1 beside ours, for wall time under
# one load (its CNNs: ~150-220 s each; its DETRs ~1100-1340 s, too long for one session's device time).
# All arms at once on the one GPU; wall times are under that load. Same launch and poll as benchmarks/s47/driver.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s43out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
. benchmarks/device_lib.sh
mkdir -p $L/lanes
driver_start
# FAMILIES: a CLI of those families only (-DLIBREYOLO_FAMILIES, families/list.hpp; tests and benchmarks off), a shorter build
[ -n "${FAMILIES:-}" ] && export BUILD_CONF="-DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF -DLIBREYOLO_FAMILIES=$FAMILIES"
[ -n "${ORIG_MODELS:-}" ] && { coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"; export PYTHONPATH; }
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1; do synth_set /tmp/scenes_$s $s & done
for s in ${SHAPES_SEEDS-0 1 2}; do STYLE=shapes synth_set /tmp/shapes_$s $s & done
wait; echo "sets written $(date -u +%T)"
export ARM_TIMEOUT=${ARM_TIMEOUT:-1100}
for s in 0 1; do
  for m in ${SCENES_MODELS:-yolo9t yolo7b rtdetr-r18 rtdetrv2-r18 dfinen deimn}; do lane_arm $m $s ours scenes & done
  for m in ${ORIG_MODELS:-}; do lane_arm $m $s original scenes & done
  [ -n "${STRETCH:-}" ] && for m in dfinen deimn; do lane_arm $m $s ours scenes "" _stretch train_resize=stretch & done
done
for s in ${SHAPES_SEEDS-0 1 2}; do [ -n "${ATTO:-}" ] && lane_arm deimv2atto $s ours shapes & lane_arm deimv2s $s ours shapes & done
[ -n "${EC:-}" ] && for s in 1 2; do lane_arm ec-s $s ours shapes & lane_arm ec-s $s ours shapes "" _stretch train_resize=stretch & done
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
cat $OUT/lanes.txt
pack
echo "driver done $(date -u +%FT%TZ)"
