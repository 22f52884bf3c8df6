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
driver_build_runners test_step
wait $diag; grep -v -i warn $OUT/diag.txt
driver_cases "step RF-DETR" test_step step_rfdetr.txt 200 -tc="*RF-DETR-n (AMP)*,*segmented step graph (part A*" -s
driver_cases "step other cases" test_step step_rest.txt 240 -tce="*RF-DETR-n (AMP)*,*segmented step graph (part A*"
echo "driver done $(date -u +%FT%TZ)"
