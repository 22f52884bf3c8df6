#!/usr/bin/env bash
# Clean build time of the command-line program (`libreyolo_cli`: its own unit, the per-family units and the
# precompiled header) on 2 cores, for several source trees at once: each tree configures first (not timed),
# then builds pinned to its own pair of cores (taskset; ninja -j2), so the arms share the machine equally.
#   benchmarks/build_time/run.sh OUT_DIR NAME=SRC_DIR[|CMAKE_ARG...] [NAME=SRC_DIR[|CMAKE_ARG...] ...]
# ('|'-separated configure arguments of that arm, e.g. 'kit2=/src|-DLIBREYOLO_FAMILIES=yolo9;resnet')
# Needs CMAKE_PREFIX_PATH (LibTorch and the other dependencies). Prints one line per arm: wall seconds of the
# build step, and the user+sys CPU seconds of the compilers; OUT_DIR/<name>.ninja_log keeps per-unit times.
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR NAME=SRC_DIR ...}; shift
mkdir -p "$out"
core=0; pids=()
for arm in "$@"; do
  name=${arm%%=*}; spec=${arm#*=}; IFS='|' read -r -a parts <<< "$spec"; src=${parts[0]}; extra=("${parts[@]:1}")
  bdir=/tmp/build_time_$name
  rm -rf "$bdir"
  cmake -S "$src" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH" \
    -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "${extra[@]}" > "$out/$name.configure.log" 2>&1 \
    || { echo "$name: configure failed (see $name.configure.log)"; continue; }
  (
    TIMEFORMAT='%R %U %S'
    { time taskset -c $core,$((core + 1)) cmake --build "$bdir" -j2 --target libreyolo_cli > "$out/$name.build.log" 2>&1; } 2> "$out/$name.time"
    rc=$(grep -c "FAILED" "$out/$name.build.log")
    cp "$bdir/.ninja_log" "$out/$name.ninja_log" 2>/dev/null
    read -r r u s < "$out/$name.time"
    echo "$name failed_units=$rc wall_s=$r cpu_s=$(awk -v u="$u" -v s="$s" 'BEGIN{print u + s}') cores=$core,$((core + 1))"
  ) &
  pids+=($!); core=$((core + 2))
done
wait "${pids[@]}"
