#!/usr/bin/env bash
# The next session's first device call (written in session 42, whose device budget went to six refused starts and a
# machine taken back mid-call). Carry .deps (and .orig for nothing here). In order:
#   1. benchmarks/gpu_suites.sh's build at -O1 (every test, the CLI, graph_speedup).
#   2. ISSUE41=1 (default on), beside the suites (no suite case times anything): issue 41 item 2's first question, on
#      the YOLOv9-t fidelity protocol (shapes set, 10 epochs, batch 8, seeds 0-3): ours at the instant heuristic
#      (today's default) and at cudnn_heuristic=b, eight runs at once. Session 42's conv_algos table found every
#      algorithm of both in the AMP path at the fp16 output-rounding floor (B's weight gradients 2.7x / 3.4x on two
#      layers, the instant heuristic's up to 1.4x), so session 20's one-seed gap (B 0.02-0.05 lower on three sets)
#      is either chaos or those two layers: four seeds each say which.
#   3. The suites: capture, kit and step first (session 42: kit 16/19 at 503ae1e, step cut, capture not run; the new
#      capture case "lockstep diagnosis: DEIMv2-atto's region..." names where DEIMv2's graph run leaves eager), then
#      the other areas.
#   cp -a . /tmp/s43 && cd /tmp/s43 && (COMMIT=... setsid bash benchmarks/s43/call.sh > /tmp/s43_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s43_driver.log DRIVER_OUT=/tmp/s43out WAIT=<s> PERIOD=15 bash /tmp/s43/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s43out
driver_start
driver_build > "$OUT/build_stage.log" 2>&1
tail -3 "$OUT/build_stage.log"
if [ "${ISSUE41:-1}" = 1 ]; then
  (
    . benchmarks/fidelity/common.sh   # $L, lane_arm, synth_set, pack
    for s in 0 1 2 3; do STYLE=shapes synth_set /tmp/shapes_$s $s & done
    wait
    for s in 0 1 2 3; do
      ARM_TIMEOUT=900 lane_arm yolo9t $s ours shapes &
      ARM_TIMEOUT=900 lane_arm yolo9t $s ours shapes "" _b cudnn_heuristic=b &
    done
    wait
    grep -h "^seed" $L/lanes/*.txt | sort
    pack
    echo "issue 41 lanes done $(date -u +%T)"
  ) > "$OUT/issue41.log" 2>&1 &
  apid=$!
fi
first="capture kit step"
driver_suites AREAS="$first"
driver_suites SKIP_AREAS="$first"
if [ "${ISSUE41:-1}" = 1 ]; then wait $apid; cat "$OUT/issue41.log"; fi
echo "driver done $(date -u +%FT%TZ)"
