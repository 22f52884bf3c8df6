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
# driver_deps: the carried .deps debs unpacked under /tmp/deps, on the library path and the CMake prefixes.
driver_deps() {
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
}
