#!/usr/bin/env bash
# Session 36's second device call: the first (benchmarks/s35/final.sh at 53ee4aa) ran every area's GPU suite, but
# the step suite hit its 240 s limit inside the DETR case, before RF-DETR's arm. This builds the step area's runner
# and capture areas' runners only (-O0 unless OPT: device time was short); runs RF-DETR-n's segmented step arm, then the capture suite's two float32 cases (they had run AMP: the test's
# precision policy was AmpHalf whatever amp said; now Fp32), then the step suite's DETR case.
#   cp -a . /tmp/s36 && cd /tmp/s36 && (COMMIT=... setsid bash benchmarks/s36/step.sh > /tmp/s36_driver.log 2>&1 < /dev/null &)
# (As run at 9aa4b9e its capture filter read "*float32, 30 steps*": doctest splits filters at commas, so it matched
# no case; '?' stands for the comma now.)
#   LOG=/tmp/s36_driver.log DRIVER_OUT=/tmp/s36out WAIT=<s> bash /tmp/s36/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s36out
driver_start
driver_deps
OPT=${OPT:--O0} BUILD_TIMEOUT=${BUILD_TIMEOUT:-250} driver_build_runners test_step test_capture
driver_cases "step RF-DETR" test_step step_rfdetr.txt 160 -tc="*RF-DETR-n (AMP)*" -s
driver_cases "capture fp32" test_capture capture_fp32.txt 90 -tc="*float32? 30 steps*"
driver_cases "step DETR" test_step step_detr.txt 300 -tc="*D-FINE-n (fp32 and AMP) and RT-DETR*"
echo "driver done $(date -u +%FT%TZ)"
