#!/usr/bin/env bash
# Session 35's first full device call: the torch-only diagnosis of graphed-region backward vs eager
# (benchmarks/s35/linear_graph_diag.py), then test_step and test_capture built (-O1) and the step suite's DETR
# cases (RF-DETR's new segmented step arm first) run.
#   cp -a . /tmp/s35 && cd /tmp/s35 && (COMMIT=... setsid bash benchmarks/s35/check.sh > /tmp/s35_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s35out
driver_start
driver_deps
( timeout 150 python3 benchmarks/s35/linear_graph_diag.py 2>&1 | grep -v -i warn > $OUT/diag.txt; echo "diag rc=$?" >> $OUT/diag.txt ) &
diag=$!
t0=$(date +%s)
timeout ${BUILD_TIMEOUT:-400} scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_TEST_AREA_RUNNERS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS_RELEASE=${OPT:--O1} -DNDEBUG" -- test_step test_capture > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "error:|FAILED" $OUT/build.log | head -10
wait $diag; cat $OUT/diag.txt
timeout 240 build-cuda/tests/test_step --test-suite=gpu -tc="*RF-DETR*,*segmented step graph*" -s > $OUT/step_rfdetr.txt 2>&1
echo "step RF-DETR rc=$? $(grep -E '^\[doctest\] test cases' $OUT/step_rfdetr.txt)"
grep -E "^TEST CASE|ERROR|MESSAGE|values" $OUT/step_rfdetr.txt | cut -c1-400 | head -60
echo "driver done $(date -u +%FT%TZ)"
