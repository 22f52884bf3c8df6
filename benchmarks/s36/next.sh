#!/usr/bin/env bash
# For the next device call (written in session 36, not yet run): the capture and step areas' runners only (-O0, ~170 s
# on an H100), then the capture suite's lockstep diagnosis (the token net's region graphed vs eager at the same
# parameters: does the forward or the backward differ, in which parameters, with and without the loss scale) and its
# two float32 cases (float32 since 8334857), then RF-DETR-n's step arm with its parameter check against eager's own
# spread.
#   cp -a . /tmp/s36n && cd /tmp/s36n && (COMMIT=... setsid bash benchmarks/s36/next.sh > /tmp/s36n_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s36n_driver.log DRIVER_OUT=/tmp/s36nout WAIT=<s> bash /tmp/s36n/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s36nout
driver_start
driver_deps
t0=$(date +%s)
timeout ${BUILD_TIMEOUT:-300} scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_TEST_AREA_RUNNERS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS_RELEASE=${OPT:--O0} -DNDEBUG" -- test_step test_capture > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -10
# doctest splits -tc at commas: '?' stands for the comma in "float32, 30 steps".
timeout 150 build-cuda/tests/test_capture --test-suite=gpu -tc="*lockstep diagnosis*,*float32? 30 steps*" > $OUT/capture_diag.txt 2>&1
echo "capture diagnosis rc=$? $(grep -E '^\[doctest\] test cases' $OUT/capture_diag.txt) $(date -u +%T)"
grep -E "^TEST CASE|ERROR|MESSAGE" $OUT/capture_diag.txt | cut -c1-400 | head -40
timeout 200 build-cuda/tests/test_step --test-suite=gpu -tc="*RF-DETR-n (AMP)*" > $OUT/step_rfdetr.txt 2>&1
echo "step RF-DETR rc=$? $(grep -E '^\[doctest\] test cases' $OUT/step_rfdetr.txt) $(date -u +%T)"
grep -E "^TEST CASE|ERROR|MESSAGE" $OUT/step_rfdetr.txt | cut -c1-400 | head -30
echo "driver done $(date -u +%FT%TZ)"
