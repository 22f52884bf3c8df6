#!/usr/bin/env bash
# Session 42's last device minutes: the capture area at the merged head (not reached by call_min.sh: the machine was
# taken back during the step area), its DEIMv2-atto cases first (the kit's DEIMv2 graph case failed at 503ae1e with
# eager now bit-reproducible in its losses). Carry .deps.
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s42out
driver_start
driver_deps
BUILD_TIMEOUT=300 driver_build_runners test_capture
driver_cases capture_deimv2 test_capture gpu_capture_deimv2.txt 90 '-tc=*DEIMv2*'
driver_cases capture test_capture gpu_capture.txt 200 '-tce=*DEIMv2*'
echo "driver done $(date -u +%FT%TZ)"
