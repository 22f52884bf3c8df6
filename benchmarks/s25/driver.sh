#!/usr/bin/env bash
# The next device session's measurement run (planned in session 24, not yet run), started as session 24's was:
#   cp -a . /tmp/s25repo && cd /tmp/s25repo && (setsid bash benchmarks/s25/driver.sh > /tmp/s25_driver.log 2>&1 < /dev/null &)
# then read with `LOG=/tmp/s25_driver.log DRIVER_OUT=/tmp/s25out benchmarks/s24/poll.sh` in the following calls (carry
# .deps and .orig).
# ARMS (default: all below, in this order) picks a subset, e.g. ARMS="rtdetr atto".
#   rtdetr : issue 43's RT-DETR-r18 and RT-DETRv2-r18 originals again (scenes set, seeds 0 1), each checkpoint read by
#            its own validator, by our val (letterbox) and by our val_resize=stretch: does stretch reproduce its number?
#   atto   : issue 39's DEIMv2-atto (shapes set, seeds 0 1 2): ours train_resize=stretch (validated stretched now),
#            and the originals, read by our val in both geometries
#   deimv2s: DEIMv2-s seed 0: ours train_resize=stretch; the original read in both geometries (at least 420 s alone)
#   yolo9  : YOLOv9-t seeds 2 and 3 on the scenes set, both libraries (session 18 had seeds 0 1: -0.013)
#   rfdetr : the RF-DETR fixtures (scripts/fixtures/make_fixture.py --model rfdetr, CPU, transformers is there)
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s25out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
has() { [[ " ${ARMS:-rtdetr atto deimv2s yolo9 rfdetr} " == *" $1 "* ]]; }
echo "driver start $(date -u +%FT%TZ) ARMS=${ARMS:-all}"
coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"
export PYTHONPATH
if has rfdetr; then
  (mkdir -p $L/rfdetr; for s in n s m l; do
     HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 timeout 600 python3 scripts/fixtures/make_fixture.py --original .orig/libreyolo \
       --model rfdetr --size $s --out $OUT/rfdetr-$s --topk-out $OUT/rfdetr-$s.topk.bin > $L/rfdetr/$s.log 2>&1
     echo "rfdetr fixture $s rc=$?"
   done) &
fi
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1 2 3; do synth_set /tmp/scenes_$s $s & done
for s in 0 1 2; do STYLE=shapes synth_set /tmp/shapes_$s $s & done
wait; echo "sets written $(date -u +%T)"
has deimv2s && { lane_arm deimv2s 0 original shapes & lane_arm deimv2s 0 ours shapes "" _stretch train_resize=stretch & }
has rtdetr && for s in 0 1; do lane_arm rtdetr-r18 $s original scenes pretrained_backbone=false & lane_arm rtdetrv2-r18 $s original scenes & done
has atto && for s in 0 1 2; do lane_arm deimv2atto $s original shapes & lane_arm deimv2atto $s ours shapes "" _stretch train_resize=stretch & done
has yolo9 && for s in 2 3; do lane_arm yolo9t $s original scenes & lane_arm yolo9t $s ours scenes & done
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
echo "driver done $(date -u +%FT%TZ)"
pack
