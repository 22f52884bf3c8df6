#!/usr/bin/env bash
# The next measurement run (written in session 46, not yet run). Session 46 measured, after the D-FINE line's resize
# change (fidelity rows 23-24), that stretched training (the originals' geometry) helps DEIMv2-s at three of three
# seeds but lowers DEIMv2-atto at two of three and EC-s at its one seed; and RT-DETRv2-r18 at −0.014 of the original
# over two seeds. This run asks the questions those leave, before any default is changed:
#   stretch : the D-FINE line under train_resize=stretch (validated stretched) beside the default letterbox, on
#             the families not yet measured so: D-FINE-n and DEIM-n (scenes seeds 0-1), EC-s (shapes seeds 1-2,
#             both geometries; seed 0 ran in session 46), and the original's EC-s at shapes seeds 1-2 (its own
#             validator reads it in its own geometry)
#   rtdetrv2: RT-DETRv2-r18 at scenes seeds 2 and 3, ours and the original (from scratch), so each side has four
#             runs at one commit of ours
#   plain   : fidelity rows 33-34 (session 46, after e501584: the YOLOv9 pipeline's image alone flips within its
#             rectangle with unjittered padding, mixup after a mosaic only, RT-DETR and YOLOv7 top-left): ours
#             YOLOv9-t, YOLOv7-b, RT-DETR-r18, RT-DETRv2-r18 at scenes seeds 0-1, against session 46's numbers
# ARMS (default "stretch rtdetrv2 plain") picks. All arms at once on the one GPU (wall times are under that load):
# 18 of ours and 4 originals. Estimate, not measured: ~20-25 min from the start, bound by the originals (session
# 24's RT-DETRv2 originals took ~1080 s beside 22 other arms; ours ~450-540 s). ARMS="stretch plain" (ours and the
# original's EC-s) is the shorter call.
#   cp -a . /tmp/s43 && cd /tmp/s43 && (COMMIT=... setsid bash benchmarks/s47/driver.sh > /tmp/s43_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s43_driver.log DRIVER_OUT=/tmp/s43out WAIT=<s> PERIOD=15 bash /tmp/s43/benchmarks/s31/poll.sh
# Carry .deps and .orig.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s43out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
has() { [[ " ${ARMS:-stretch rtdetrv2 plain} " == *" $1 "* ]]; }
echo "driver start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown} ARMS=${ARMS:-all}"
nvidia-smi --query-gpu=name --format=csv,noheader
coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"; export PYTHONPATH
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1 2 3; do synth_set /tmp/scenes_$s $s & done
for s in 1 2; do STYLE=shapes synth_set /tmp/shapes_$s $s & done
wait; echo "sets written $(date -u +%T)"
export ARM_TIMEOUT=${ARM_TIMEOUT:-1500}
if has stretch; then
  for s in 0 1; do for m in dfinen deimn; do lane_arm $m $s ours scenes "" _stretch train_resize=stretch & done; done
  for s in 1 2; do
    lane_arm ec-s $s ours shapes & lane_arm ec-s $s ours shapes "" _stretch train_resize=stretch &
    lane_arm ec-s $s original shapes &
  done
fi
if has rtdetrv2; then
  for s in 2 3; do lane_arm rtdetrv2-r18 $s ours scenes & lane_arm rtdetrv2-r18 $s original scenes & done
fi
if has plain; then
  for s in 0 1; do for m in yolo9t yolo7b rtdetr-r18 rtdetrv2-r18; do lane_arm $m $s ours scenes & done; done
fi
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
cat $OUT/lanes.txt
pack
echo "driver done $(date -u +%FT%TZ)"
