#!/usr/bin/env bash
# Session 51's measurement driver: benchmarks/s48/driver.sh with an explicit arm list, so that the original's arms
# and ours can take different seeds. ARMS: "MODEL:SEED:ours|original[:scenes|shapes] ..." (default below); the set is
# scenes unless named (issue 43's protocol: data synth --style scenes --images 600 --imgsz 960 --classes 12 --seed S;
# shapes: issue 39's, data synth --task detect --images 400 --imgsz 640 --classes 8 --seed S); 10 epochs, 640 px,
# no_aug_epochs=2, each library's defaults; all at once on the one GPU: wall times are under that one load.
#   default: YOLOv9-t, YOLOX-t, YOLO-NAS-s, ours and the original at seed 0 (wall time under one load; ours' accuracy
#   at these families is unchanged in code since e501584 / 634494f); D-FINE-n and DEIM-n ours at seeds 0-1 (fidelity
#   row 36 changes their training; row 38 does not reach their float32 default).
# Logs /tmp/s43_driver.log and outputs /tmp/s43out, as s48's driver, so benchmarks/s48/suites.sh runs beside it.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s43out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
. benchmarks/device_lib.sh
mkdir -p $L/lanes
driver_start
ARMS=${ARMS:-"yolo9t:0:ours yolo9t:0:original yoloxt:0:ours yoloxt:0:original yolonass:0:ours yolonass:0:original dfinen:0:ours dfinen:1:ours deimn:0:ours deimn:1:ours"}
case " $ARMS " in *:original[:\ ]*) coco_shim > $L/coco_shim.log 2>&1; echo "coco_shim rc=$?"; export PYTHONPATH ;; esac
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for set in $(for a in $ARMS; do IFS=: read -r m s side st <<< "$a"; echo "${st:-scenes}_$s"; done | sort -u); do
  STYLE=${set%_*} synth_set /tmp/$set ${set##*_} &
done
wait; echo "sets written $(date -u +%T)"
export ARM_TIMEOUT=${ARM_TIMEOUT:-1100}
for a in $ARMS; do
  IFS=: read -r m s side st <<< "$a"
  lane_arm $m $s $side ${st:-scenes} &
done
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
cat $OUT/lanes.txt
pack
echo "driver done $(date -u +%FT%TZ)"
