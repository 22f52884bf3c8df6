#!/usr/bin/env bash
# Session 37's device call: every area's GPU suite at the commit, after the region backward's autocast fix
# (capture/graphed_callable.hpp): capture first (its bit-for-bit cases), then kit and step (step at gpu_suites.sh's
# own limit, >= 480 s), then the rest. Longer than one call: poll it across calls on the warm machine.
#   cp -a . /tmp/s37 && cd /tmp/s37 && (COMMIT=... setsid bash benchmarks/s37/final.sh > /tmp/s37_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s37_driver.log DRIVER_OUT=/tmp/s37out WAIT=<s> bash /tmp/s37/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s37out
driver_start
driver_build
AREAS="capture" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
grep -E "TEST CASE|MESSAGE|ERROR" /tmp/gpu_areas/gpu_capture.txt | cut -c1-300 | head -60
echo "capture done $(date -u +%T)"
AREAS="kit step" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "kit, step done $(date -u +%T)"
SKIP_AREAS="capture kit step" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "driver done $(date -u +%FT%TZ)"
