#!/usr/bin/env bash
# Session 48: the GPU suites of the areas the head's changes since e501584 touch (the plain data pipeline: detect_data,
# data, yolo9) and the capture area, run beside benchmarks/s47/driver.sh on the one GPU once that driver's own build is
# done (it builds the CLI in build-cuda; these runners go to build-suites, so the two builds never share a tree).
# Output under /tmp/s43out/suites (packed with the driver's outputs by benchmarks/s31/poll.sh).
#   (COMMIT=... setsid bash benchmarks/s48/suites.sh > /tmp/s48_suites.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s43out/suites; mkdir -p $OUT
. benchmarks/device_lib.sh
driver_deps
# AREAS (session 49): the areas whose GPU suites run (default the four above; session 49 adds step and train, whose
# GPU cases count the training loader's batches).
AREAS=${AREAS:-detect_data data yolo9 capture}
# The driver's CLI build is over; a driver that stopped without a CLI ("no CLI: stop", session 49) ends this too.
until grep -q "sets written" /tmp/s43_driver.log 2>/dev/null; do
  grep -qE "no CLI: stop|driver done" /tmp/s43_driver.log 2>/dev/null && { echo "the driver stopped before its sets: no suites"; echo "suites done"; exit 1; }
  sleep 5
done
echo "suites start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
t0=$(date +%s)
timeout "${BUILD_TIMEOUT:-600}" scripts/build-cuda.sh build-suites -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_TEST_AREA_RUNNERS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- -k 0 \
  $(for a in $AREAS; do echo test_$a; done) > "$OUT/build.log" 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" "$OUT/build.log" | head -10
# Each area under 400 s (SUITE_TIMEOUT); step under 700 s (STEP_TIMEOUT): at 634494f (session 50) its nine cases ran
# past 400 s beside the driver's arms and the last one was killed.
for a in $AREAS; do
  to=${SUITE_TIMEOUT:-400}; [ "$a" = step ] && to=${STEP_TIMEOUT:-700}
  timeout "$to" build-suites/tests/test_$a --test-suite=gpu > "$OUT/gpu_$a.txt" 2>&1
  echo "$a rc=$? $(grep -E '^\[doctest\] test cases' "$OUT/gpu_$a.txt") $(date -u +%T)"
  grep -E "ERROR|FATAL" -A3 "$OUT/gpu_$a.txt" | cut -c1-300 | head -20
done
echo "suites done $(date -u +%FT%TZ)"
