#!/usr/bin/env bash
# Session 35's short device call (six refused starts left 524 s of device time, too little for every suite): the
# torch-only diagnosis (benchmarks/s35/linear_graph_diag.py) beside a build of the step area's runner only (-O1),
# then the step GPU suite: RF-DETR's new segmented step arm and the segmented machinery first, then its other cases.
#   cp -a . /tmp/s35 && cd /tmp/s35 && (COMMIT=... setsid bash benchmarks/s35/partial.sh > /tmp/s35_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s35out
driver_start
driver_deps
( timeout 200 python3 benchmarks/s35/linear_graph_diag.py > $OUT/diag.txt 2>&1; echo "diag rc=$?" >> $OUT/diag.txt ) &
diag=$!
t0=$(date +%s)
timeout ${BUILD_TIMEOUT:-330} scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_TEST_AREA_RUNNERS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- test_step > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "error:|FAILED" $OUT/build.log | head -10
wait $diag; grep -v -i warn $OUT/diag.txt
timeout 200 build-cuda/tests/test_step --test-suite=gpu -tc="*RF-DETR-n (AMP)*,*segmented step graph (part A*" -s > $OUT/step_rfdetr.txt 2>&1
echo "step RF-DETR rc=$? $(grep -E '^\[doctest\] test cases' $OUT/step_rfdetr.txt)"
grep -E "^TEST CASE|ERROR|MESSAGE|values|CHECK" $OUT/step_rfdetr.txt | cut -c1-500 | head -60
timeout 240 build-cuda/tests/test_step --test-suite=gpu -tce="*RF-DETR-n (AMP)*,*segmented step graph (part A*" > $OUT/step_rest.txt 2>&1
echo "step other cases rc=$? $(grep -E '^\[doctest\] test cases' $OUT/step_rest.txt)"
grep -E "^TEST CASE|ERROR" $OUT/step_rest.txt | cut -c1-300 | head -40
echo "driver done $(date -u +%FT%TZ)"
