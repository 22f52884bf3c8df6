#!/usr/bin/env bash
# Session 35's device call (three refused starts left budget for one): the torch-only diagnosis of graphed-region
# backward vs eager (benchmarks/s35/linear_graph_diag.py) beside the build, then every area's GPU suite at the
# commit: step (RF-DETR's new segmented step arm), capture and kit first, then the rest.
#   cp -a . /tmp/s35 && cd /tmp/s35 && (COMMIT=... setsid bash benchmarks/s35/final.sh > /tmp/s35_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s35_driver.log DRIVER_OUT=/tmp/s35out WAIT=<s> bash /tmp/s35/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s35out
driver_start
( timeout 200 python3 benchmarks/s35/linear_graph_diag.py > $OUT/diag.txt 2>&1; echo "diag rc=$?" >> $OUT/diag.txt ) &
diag=$!
driver_build
wait $diag; grep -v -i warn $OUT/diag.txt
first="step capture kit"
AREAS="$first" SUITE_TIMEOUT=240 bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
grep -E "TEST CASE|MESSAGE|ERROR" /tmp/gpu_areas/gpu_step.txt | grep -iE "rf-?detr" | cut -c1-400 | head -40
grep -E "TEST CASE|MESSAGE|ERROR" /tmp/gpu_areas/gpu_capture.txt | grep -v "^--" | cut -c1-260 | head -120
echo "first areas done $(date -u +%T)"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "driver done $(date -u +%FT%TZ)"
