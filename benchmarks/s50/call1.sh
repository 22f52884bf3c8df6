#!/usr/bin/env bash
# Session 50's plan for the next session's first device call (carry .deps .orig), as one script:
#   issue 43's wall time under one load: ours and the original's YOLOv9-t, YOLOX-t, YOLO-NAS-s at scenes seeds 0-1
#   (and ours alone for D-FINE-n and DEIM-n, which fidelity row 36 changed on the scenes set)
#   (16 arms at once; SCENES_MODELS / ORIG_MODELS / SHAPES_SEEDS override), beside the GPU suites of the areas not
#   run at 634494f plus capture again (its DEIMv2-atto case's diagnostics; AREAS overrides).
# Both run in the background from a copy at /tmp/s43 (the driver in build-cuda, the suites in build-suites); this
# script polls for up to WAIT seconds (default 540) and leaves $OUT/driver_out.tgz (the driver's outputs, the suites'
# under suites/). A later call on the warm machine polls on with:
#   T0=$(date +%s); while [ $(( $(date +%s) - T0 )) -lt 500 ] && ! { grep -q "driver done" /tmp/s43_driver.log && \
#     grep -q "suites done" /tmp/s48_suites.log; }; do sleep 5; done; cd /tmp/s43out && tar czf $OUT/driver_out.tgz .; \
#   tail -5 /tmp/s43_driver.log; cat /tmp/s48_suites.log
set -uo pipefail
cd "$(dirname "$0")/../.."
head=$(git log -1 --format=%h)
rm -rf /tmp/s43 /tmp/s43out; cp -a . /tmp/s43 && cd /tmp/s43 || exit 1
echo "copy of $head at /tmp/s43"
(COMMIT=$head SCENES_MODELS="${SCENES_MODELS-yolo9t yoloxt yolonass dfinen deimn}" ORIG_MODELS="${ORIG_MODELS-yolo9t yoloxt yolonass}" \
  SHAPES_SEEDS="${SHAPES_SEEDS-}" setsid bash benchmarks/s48/driver.sh > /tmp/s43_driver.log 2>&1 < /dev/null &)
(COMMIT=$head AREAS="${AREAS-capture kit dfine_net precision profile rtmdet segformer yolox}" \
  setsid bash benchmarks/s48/suites.sh > /tmp/s48_suites.log 2>&1 < /dev/null &)
sleep 2
LOG=/tmp/s43_driver.log DRIVER_OUT=/tmp/s43out WAIT=${WAIT:-540} PERIOD=15 bash benchmarks/s31/poll.sh
cd /tmp/s43out && tar czf $OUT/driver_out.tgz .
cat /tmp/s48_suites.log
