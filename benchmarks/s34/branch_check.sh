#!/usr/bin/env bash
# Session 34's first device call (on the branch s33-autocast-cache, 5e4f734) and its closing one (main, after the
# merge; COMMIT= the commit; carry .deps):
#   1. benchmarks/gpu_suites.sh build (-O1);
#   2. the capture, kit and step GPU suites with nothing beside them (session 33's closing call ran out of budget
#      inside the step suite while training lanes shared the GPU): does keeping autocast's cast cache on end the
#      D-FINE line's graph-vs-eager differences (kit: DEIMv2-atto, EC-s; capture: D-FINE-n's region), and which of
#      the capture suite's diagnostic cases (D-FINE-n's region in float32, with and without its AIFI layer) still
#      differ; the capture cases' messages are printed;
#   3. every other area's GPU suite.
#   cp -a . /tmp/s34 && cd /tmp/s34 && (COMMIT=... setsid bash benchmarks/s34/branch_check.sh > /tmp/s34_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s34_driver.log DRIVER_OUT=/tmp/s34out WAIT=<s> bash /tmp/s34/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s34out
driver_start
driver_build
first="capture kit step"
AREAS="$first" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
grep -E "TEST CASE|MESSAGE|ERROR" /tmp/gpu_areas/gpu_capture.txt | grep -v "^--" | cut -c1-300 | head -160
echo "first areas done $(date -u +%T)"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "driver done $(date -u +%FT%TZ)"
