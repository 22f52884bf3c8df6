#!/usr/bin/env bash
# Session 24's measurement run on the CUDA machine, started once in its own process session so that it outlives
# the call that starts it (the device keeps setsid processes running while the machine is held):
#   setsid bash benchmarks/s24/driver.sh > /tmp/s24_driver.log 2>&1 < /dev/null &
# and read by later calls with benchmarks/s24/poll.sh. Carry .deps and .orig (the original's c41461e package
# and cocoapi's coco.py/cocoeval.py for the shim). Logs under /tmp/L (common.sh); lines under /tmp/L/lanes.
#
# Issue 43, the scenes set (480/120 images, 12 classes, 640 px, 10 epochs, no_aug_epochs=2, batch 4 for the DETRs
# and 8 for the CNNs, from scratch), seeds 0 and 1, ours and the original side by side, the original's checkpoint
# validated by our `val` and by its own validator: RT-DETR-r18 (the original truly from scratch:
# pretrained_backbone=false), RT-DETRv2-r18, D-FINE-n, DEIM-n, RTMDet-t (the original with allow_experimental).
# Issue 39, the shapes set (400 images, 8 classes, 640 px): the original's DEIMv2-atto at seeds 1 and 2 and its
# DEIMv2-s at seed 0 (ours: sessions 22-23).
# Everything runs at once on the one GPU and its 16 cores after the build: wall times are under that shared load.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s24out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
echo "driver start $(date -u +%FT%TZ)"
coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$? PYTHONPATH=${PYTHONPATH:-}"
export PYTHONPATH
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1; do synth_set /tmp/scenes_$s $s & done
for s in 0 1 2; do STYLE=shapes synth_set /tmp/shapes_$s $s & done
wait; echo "sets written $(date -u +%T)"; ls /tmp/scenes_0 /tmp/shapes_0
T=${ARM_TIMEOUT:-1500}
# arm MODEL SEED ours|original STYLE [ORIG_KEYS]
arm() {
  local skip=SKIP_ORIGINAL; [ "$3" = original ] && skip=SKIP_OURS
  env $skip=1 SKIP_BUILD=1 STYLE=$4 SEEDS=$2 ARM_TIMEOUT=$T ORIG_KEYS="${5:-}" \
    bash benchmarks/fidelity/side_by_side.sh $1 > $L/lanes/${4}_${1}_$2_$3.txt 2>&1
  echo "arm done $4 $1 $2 $3 $(date -u +%T)"
}
# The longest first: the original's DEIMv2-s (at least 420 s alone), then the original's DETRs (~245 s alone).
arm deimv2s 0 original shapes &
for s in 0 1; do
  arm rtdetr-r18 $s original scenes pretrained_backbone=false &
  for m in rtdetrv2-r18 dfinen deimn rtmdett; do arm $m $s original scenes & done
done
for s in 1 2; do arm deimv2atto $s original shapes & done
for s in 0 1; do for m in rtdetr-r18 rtdetrv2-r18 dfinen deimn rtmdett; do arm $m $s ours scenes & done; done
wait
cat $L/lanes/*.txt | grep -E "^seed" > $L/lanes/ALL.txt
echo "driver done $(date -u +%FT%TZ)"
pack
