#!/usr/bin/env bash
# Every area's "gpu" test suite on the CUDA machine, in one command, and one log stamped with the commit.
#
#   COMMIT=$(git rev-parse HEAD) benchmarks/gpu_suites.sh [STAGE...]      (stages: build suites graphs; default all)
#
# On the device (carry .deps: Debian 12's yaml-cpp, CLI11, nlohmann-json, doctest, Boost 1.74, libpng and
# zlib debs, benchmarks/s12/README.md): builds libreyolo_tests, the CLI its tests drive and graph_speedup
# against the machine's PyTorch LibTorch (Release, LIBREYOLO_GPU_OPT replaces -O3, e.g. -O1 to fit the
# build into one call), then runs `libreyolo_tests --test-suite=gpu` once per area (tests/<area>/, the
# conformance suite's generated units under "kit"), each under a timeout. The log, $OUT/gpu_suites.log,
# starts with the commit, the date, the GPU and the LibTorch version, has one line per area with doctest's
# counts, and ends with the totals; commit it as benchmarks/results/gpu-suites/<date>-<commit>.log.
# AREAS="a b ..." runs only those areas' suites (a second call on the warm machine finishes what a first,
# cut by the call limit, left: pass the same OUT log's areas split across calls; the total line is per call).
# SKIP_AREAS="a b ..." runs every area but those (the rest after a first call's AREAS="a b ...").
# `graphs` runs benchmarks/graph_speedup at today's defaults (NCHW, cuDNN autotuning off), fp16.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
L=$OUT/gpu_suites.log
B=${B:-build-cuda}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
stages=" ${*:-build suites graphs} "; has() { [[ "$stages" == *" $1 "* ]]; }
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr

if [ ! -f "$L" ]; then
  {
    echo "# libreyolo GPU suites"
    echo "commit: $commit"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "torch: $(python3 -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null)"
    echo "command: COMMIT=$commit benchmarks/gpu_suites.sh ${*:-build suites graphs}"
  } > "$L"
fi

if has build; then
  t0=$(date +%s)
  opt=(); [ -n "${LIBREYOLO_GPU_OPT:-}" ] && opt=(-DCMAKE_CXX_FLAGS_RELEASE="$LIBREYOLO_GPU_OPT -DNDEBUG")
  timeout "${BUILD_TIMEOUT:-540}" scripts/build-cuda.sh "$B" -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_BENCHMARKS=ON \
    -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_TEST_AREA_RUNNERS=OFF "${opt[@]}" -- -k 0 \
    libreyolo_tests libreyolo_cli graph_speedup > "$OUT/build.log" 2>&1
  rc=$?
  echo "build: rc=$rc in $(( $(date +%s) - t0 )) s (${LIBREYOLO_GPU_OPT:--O3})" | tee -a "$L"
  grep -E "error:|FAILED" "$OUT/build.log" | head -20 | tee -a "$L"
fi

if has suites; then
  A=/tmp/gpu_areas; rm -rf $A; mkdir -p $A  # each area's whole output, packed into $OUT/gpu_areas.tgz
  bin=$B/tests/libreyolo_tests
  pass=0; fail=0; skip=0; asserts=0; afail=0
  for dir in tests/*/; do
    area=$(basename "$dir")
    [ -n "${AREAS:-}" ] && [[ " $AREAS " != *" $area "* ]] && continue  # a subset: one call's share
    [ -n "${SKIP_AREAS:-}" ] && [[ " $SKIP_AREAS " == *" $area "* ]] && continue  # the areas another call ran
    compgen -G "$dir*.cpp" > /dev/null || compgen -G "$dir*.inc" > /dev/null || continue
    # An area none of whose files opens a "gpu" suite (LRY_GPU_SUITE, tests/support.hpp) has no case to run:
    # one line says so, without starting the runner (a CUDA start each, ~20 of the 35 areas).
    if ! grep -lqE 'LRY_GPU_SUITE|TEST_SUITE\("gpu"|test_suite\("gpu"' "$dir"*.cpp "$dir"*.inc 2>/dev/null; then
      echo "$area: no gpu suite in its files (not run)" | tee -a "$L"; continue
    fi
    log=$A/gpu_$area.txt
    # The step area's DETR and RF-DETR arms train seven runs each: it hit 240 s inside the DETR case (session 36,
    # H200), so it gets at least 480 s whatever SUITE_TIMEOUT says.
    t=${SUITE_TIMEOUT:-300}; [ "$area" = step ] && [ "$t" -lt 480 ] && t=480
    timeout "$t" "$bin" --test-suite=gpu --source-file="*/tests/$area/*" > "$log" 2>&1
    rc=$?
    line=$(grep -E "^\[doctest\] test cases:" "$log" | tail -1)
    aline=$(grep -E "^\[doctest\] assertions:" "$log" | tail -1)
    echo "$area: rc=$rc ${line#\[doctest\] } | ${aline#\[doctest\] }" | tee -a "$L"
    # "test cases: N | N passed | N failed | N skipped": the skipped count includes the cases of the other
    # areas and suites that the filters left out, so only passes and failures are summed.
    read -r p f <<< "$(sed -E 's/.*\| *([0-9]+) passed *\| *([0-9]+) failed.*/\1 \2/' <<< "$line")"
    read -r ap af <<< "$(sed -E 's/.*\| *([0-9]+) passed *\| *([0-9]+) failed.*/\1 \2/' <<< "$aline")"
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); asserts=$((asserts + ${ap:-0})); afail=$((afail + ${af:-0}))
    [ "$rc" -ne 0 ] && { grep -E "ERROR|FATAL|TEST CASE" -A6 "$log" | head -60 | tee -a "$L"; [ "${f:-0}" -eq 0 ] && fail=$((fail + 1)); }
  done
  echo "total: $pass passed, $fail failed (gpu suite test cases); assertions: $asserts passed, $afail failed" | tee -a "$L"
  tar czf "$OUT/gpu_areas.tgz" -C "$A" .
fi

if has graphs; then
  MODELS=${MODELS:-resnet18:16:224 yolo9t:8:640} PRECISIONS=${PRECISIONS:-fp16} \
    timeout "${GRAPHS_TIMEOUT:-300}" benchmarks/graph_speedup/run.sh "$B" "$OUT/graph_speedup.jsonl" > "$OUT/graph_speedup.txt" 2>&1
  echo "graph_speedup: rc=$?" | tee -a "$L"
  cat "$OUT/graph_speedup.txt" >> "$L"
fi
