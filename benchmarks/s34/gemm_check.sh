#!/usr/bin/env bash
# Session 34's short device call (what a refused start left of the session's device time): builds only the
# capture area's test runner (test_capture, -O1) and runs the capture suite's session-34 cases: a Linear's GEMMs
# eager / side stream / graph replay, the token nets, the AIFI nets and the D-FINE line's regions.
#   OPT= the optimisation flag (-O1), CASES= the doctest case filter (the four groups above).
#   cp -a . /tmp/s34 && cd /tmp/s34 && (COMMIT=... setsid bash benchmarks/s34/gemm_check.sh > /tmp/s34_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s34out
driver_start
driver_deps
t0=$(date +%s)
timeout ${BUILD_TIMEOUT:-330} scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_TEST_AREA_RUNNERS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS_RELEASE=${OPT:--O1} -DNDEBUG" -- test_capture > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "error:|FAILED" $OUT/build.log | head -10
timeout 120 build-cuda/tests/test_capture --test-suite=gpu -tc="${CASES:-*GEMM*,*token net*,*AIFI*,*region alone*}" -s > $OUT/capture_s34.txt 2>&1
echo "capture cases rc=$? $(grep -E '^\[doctest\] test cases' $OUT/capture_s34.txt)"
grep -E "^TEST CASE|ERROR|MESSAGE" $OUT/capture_s34.txt | cut -c1-260 | head -120
echo "driver done $(date -u +%FT%TZ)"
