#!/usr/bin/env bash
# Session 46's measurement run: ours at one commit, after session 45's D-FINE-line resize change (fidelity rows 23
# and 24: one antialiased resize of the unresized image; multi-scale samples made at imgsz and then resized).
#   issue 43: every family the issue names, scenes set, seeds 0 and 1 (as benchmarks/s43/driver.sh, ORIG=0: the
#             original's runs of sessions 18 and 24-26 are its reference; its code does not change with ours)
#   issue 39: DEIMv2-atto seeds 0-2, DEIMv2-s seeds 0-2, EC-s seed 0 on the shapes set (its protocol)
# All arms at once on the one GPU (wall times are under that load, not speed measures).
#   cp -a . /tmp/s43 && cd /tmp/s43 && (COMMIT=... setsid bash benchmarks/s46/driver.sh > /tmp/s43_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s43_driver.log DRIVER_OUT=/tmp/s43out WAIT=<s> PERIOD=15 bash /tmp/s43/benchmarks/s31/poll.sh
# Carry .deps and .orig. FAMS / SEEDS39 narrow it.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s43out; mkdir -p $OUT
. benchmarks/fidelity/common.sh
mkdir -p $L/lanes
echo "driver start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
nvidia-smi --query-gpu=name --format=csv,noheader
build_cuda ${BUILD_TIMEOUT:-420} libreyolo_cli
[ -x $CLI ] || { echo "no CLI: stop"; exit 1; }
for s in 0 1; do synth_set /tmp/scenes_$s $s & done
for s in 0 1 2; do STYLE=shapes synth_set /tmp/shapes_$s $s & done
wait; echo "sets written $(date -u +%T)"
export ARM_TIMEOUT=${ARM_TIMEOUT:-900}
for s in 0 1; do
  for m in ${FAMS-yolo9t yoloxt rtmdett yolonass yolo7b rtdetr-r18 rtdetrv2-r18 dfinen deimn}; do lane_arm $m $s ours scenes & done
done
for s in ${SEEDS39-0 1 2}; do lane_arm deimv2atto $s ours shapes & lane_arm deimv2s $s ours shapes & done
[ -n "${SEEDS39-0}" ] && lane_arm ec-s 0 ours shapes &
wait
cat $L/lanes/*.txt | grep -E "^seed" | sort > $OUT/lanes.txt
cat $OUT/lanes.txt
pack
echo "driver done $(date -u +%FT%TZ)"
