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
OPT=${OPT:--O0} BUILD_TIMEOUT=${BUILD_TIMEOUT:-300} driver_build_runners test_step test_capture
driver_cases "capture diagnosis" test_capture capture_diag.txt 150 -tc="*lockstep diagnosis*,*float32? 30 steps*"
driver_cases "step RF-DETR" test_step step_rfdetr.txt 200 -tc="*RF-DETR-n (AMP)*"
echo "driver done $(date -u +%FT%TZ)"
