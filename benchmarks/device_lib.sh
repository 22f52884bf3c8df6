# The device drivers' shared steps (benchmarks/sNN/*.sh, run on the CUDA machine from the repository root):
#   source benchmarks/device_lib.sh
# driver_start: $OUT made (the caller's, else /tmp/out), the start line (date, COMMIT) and the GPU's name.
driver_start() {
  export OUT=${OUT:-/tmp/out}
  mkdir -p "$OUT"
  echo "driver start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
  nvidia-smi --query-gpu=name --format=csv,noheader
}
# driver_build: benchmarks/gpu_suites.sh's build (every test, the CLI, graph_speedup) at LIBREYOLO_GPU_OPT (-O1).
driver_build() {
  LIBREYOLO_GPU_OPT=${LIBREYOLO_GPU_OPT:--O1} BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
  echo "build stage done $(date -u +%T)"
}
# driver_suites [AREAS=...|SKIP_AREAS=...]: benchmarks/gpu_suites.sh's suites stage for those areas (SUITE_TIMEOUT, 600 s, per
# area), each area's log copied into $OUT, then the failed cases' errors and messages of the areas that ran.
driver_suites() {
  env SUITE_TIMEOUT="${SUITE_TIMEOUT:-600}" "$@" bash benchmarks/gpu_suites.sh suites
  cp /tmp/gpu_areas/*.txt "$OUT/" 2>/dev/null
  grep -h -B2 -A3 "ERROR" /tmp/gpu_areas/*.txt 2>/dev/null | cut -c1-300 | head -40
  echo "suites ($*) done $(date -u +%T)"
}
# driver_deps: the carried .deps debs unpacked under /tmp/deps, on the library path and the CMake prefixes.
driver_deps() {
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
}
# driver_build_runners RUNNER...: only these per-area test runners (test_step, test_capture, ...) into build-cuda, at
# OPT (-O1) under BUILD_TIMEOUT (330 s); the log in $OUT/build.log, one line with the time and the errors.
driver_build_runners() {
  local t0
  t0=$(date +%s)
  timeout "${BUILD_TIMEOUT:-330}" scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_TEST_AREA_RUNNERS=ON \
    -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS_RELEASE=${OPT:--O1} -DNDEBUG" -- "$@" > "$OUT/build.log" 2>&1
  echo "build: rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" "$OUT/build.log" | head -10
}
# driver_cases LABEL RUNNER LOG SECONDS DOCTEST_ARGS...: a runner's "gpu" suite with the given doctest arguments
# (-tc=... / -tce=...: doctest splits a filter at commas, '?' stands for one), its log in $OUT/LOG; then one line with
# the exit code and doctest's count, and the cases, errors and messages.
driver_cases() {
  local label=$1 runner=$2 log=$OUT/$3 secs=$4
  shift 4
  timeout "$secs" "build-cuda/tests/$runner" --test-suite=gpu "$@" > "$log" 2>&1
  echo "$label rc=$? $(grep -E '^\[doctest\] test cases' "$log") $(date -u +%T)"
  grep -E "^TEST CASE|ERROR|MESSAGE" "$log" | cut -c1-400 | head -60
}
# gs TAG "MODEL:BATCH[:IMGSZ] PRECISION" ...: graph_speedup's three arms of each entry (each its own process, under
# GS_TIMEOUT, 300 s), the rows in $OUT/gs_TAG_MODEL_PRECISION.{jsonl,txt}, one line each with the table's row.
# EXTRA: more graph_speedup arguments for every arm (run.sh).
gs() {
  local tag=$1 e
  shift
  for e in "$@"; do
    set -- $e
    MODELS="$1" PRECISIONS="$2" ARMS="eager graph step" timeout "${GS_TIMEOUT:-300}" benchmarks/graph_speedup/run.sh build-cuda \
      "$OUT/gs_${tag}_${1%%:*}_$2.jsonl" > "$OUT/gs_${tag}_${1%%:*}_$2.txt" 2>&1
    echo "graph_speedup $tag $1 $2 rc=$? $(date -u +%T)"; grep -A1 "^model" "$OUT/gs_${tag}_${1%%:*}_$2.txt" | tail -1
  done
}
