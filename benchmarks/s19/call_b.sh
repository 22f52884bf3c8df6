#!/usr/bin/env bash
# Session 19's last device call (same machine as `benchmarks/gpu_suites.sh build suites` for the first areas;
# carry .deps and .bt/4b65701): the remaining areas' GPU suites and issue 42's inference table
# (benchmarks/s19/infer.sh) on the GPU and cores 4-15, while the command line's clean build on 2 cores runs
# before (4b65701) and after (this tree) on cores 0-3 (benchmarks/build_time/run.sh).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD
export CMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)');/tmp/deps/usr"
( timeout 420 benchmarks/build_time/run.sh "$OUT/build_time" "before=$here/.bt/4b65701|-DLIBREYOLO_FAMILIES=yolo9;resnet" \
    "after=$here|-DLIBREYOLO_FAMILIES=yolo9;resnet" > "$OUT/build_time.txt" 2>&1 ) &
bt=$!
SUITE_TIMEOUT=${SUITE_TIMEOUT:-150} AREAS="$AREAS" taskset -c 4-15 bash benchmarks/gpu_suites.sh suites
taskset -c 4-15 bash benchmarks/s19/infer.sh > "$OUT/infer.log" 2>&1
wait $bt
tar czf "$OUT/build_time_logs.tgz" -C "$OUT" build_time && rm -rf "$OUT/build_time"
cat "$OUT/build_time.txt"; tail -30 "$OUT/infer/infer.txt"
