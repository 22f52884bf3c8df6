#!/usr/bin/env bash
# Session 19, device call 1 (carry .deps and .bt: `git archive` of 4b65701 and 285d6c9 under .bt/<commit>):
# (a) the command line's clean build on 2 cores (benchmarks/build_time/run.sh, -DLIBREYOLO_FAMILIES=yolo9;resnet
#     as the earlier arms), before (4b65701: the compiled core in two units of cmake/) and after (this tree:
#     src/, one unit per area), pinned to cores 0-1 and 2-3;
# (b) graph_speedup built at 285d6c9 (before issue 37's capture-scope type and fit split) and at this tree,
#     each on 6 other cores, then both binaries' graph and step arms, alternating, pinned to cores 4-15.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr
export CMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)');/tmp/deps/usr"
here=$PWD
{ echo "date: $(date -u +%FT%TZ)"; echo "commit: ${COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > "$OUT/env.txt"
( timeout 560 benchmarks/build_time/run.sh "$OUT/build_time" "before=$here/.bt/4b65701|-DLIBREYOLO_FAMILIES=yolo9;resnet" \
    "after=$here|-DLIBREYOLO_FAMILIES=yolo9;resnet" > "$OUT/build_time.txt" 2>&1 ) &
bt=$!
build_gs() {  # build_gs NAME SRC CORES
  ( cd "$2" && timeout 330 taskset -c "$3" scripts/build-cuda.sh "/tmp/gs_$1" -DLIBREYOLO_BUILD_TESTS=OFF \
      -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      -- graph_speedup > "$OUT/gs_build_$1.log" 2>&1; echo "gs build $1 rc=$?" >> "$OUT/gs.txt" )
}
t0=$(date +%s)
build_gs before "$here/.bt/285d6c9" 4-9 & b1=$!
build_gs after "$here" 10-15 & b2=$!
wait $b1 $b2
echo "gs builds done in $(( $(date +%s) - t0 )) s" >> "$OUT/gs.txt"
for entry in yolo9t:8:640 resnet18:16:224; do
  IFS=: read -r model b sz <<< "$entry"
  for arm in graph step; do
    for name in before after after before; do  # alternate, twice each
      bin=/tmp/gs_$name/benchmarks/graph_speedup/graph_speedup
      [ -x "$bin" ] || continue
      st=/tmp/gs_state_${name}_$model; mkdir -p $st
      echo -n "$name " >> "$OUT/gs.jsonl"
      timeout 90 taskset -c 4-15 "$bin" --arm $arm --model $model --batch $b --imgsz $sz --precision fp16 \
        --state "$st/state" >> "$OUT/gs.jsonl" 2>> "$OUT/gs_err.txt" || echo "$name $entry $arm failed" >> "$OUT/gs.txt"
    done
  done
done
echo "gs runs done at $(( $(date +%s) - t0 )) s" >> "$OUT/gs.txt"
wait $bt
cat "$OUT/build_time.txt" "$OUT/gs.txt"
