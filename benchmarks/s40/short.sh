#!/usr/bin/env bash
# Session 40, the second call (carry .deps): the capture and kit runners only, the capture area's GPU suite and the kit
# graph case of LingBot, SegFormer, RT-DETRv4 and DEIMv2, after the test changes that followed the first call; first
# benchmarks/s40/pool_streams.py (does a shared graph pool reuse memory across captures on different streams?).
set -uo pipefail
source benchmarks/device_lib.sh
export OUT=${OUT:-/tmp/out}
driver_start
driver_deps
timeout 60 python3 benchmarks/s40/pool_streams.py | tee $OUT/pool_streams.jsonl
BUILD_TIMEOUT=330 driver_build_runners test_capture test_kit
driver_cases capture test_capture gpu_capture.txt 120
driver_cases kit test_kit gpu_kit_sel.txt 200 '-tc=*LingBot*,*Segformer*,*RTDETRv4V*,*DEIMv2*'
echo "driver done"
