#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the test suite (doctest prints its summary last).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBREYOLO_WITH_PYTORCH=1 scripts/deps.sh
# LIBREYOLO_TEST_OPT (e.g. -O1, as CI sets it) replaces Release's -O3: the suite is compile-bound on small
# machines, and -O1 compiles a family's conformance unit in 42 s of CPU against 59 s at -O3 (2-core VM).
opt=()
[ -n "${LIBREYOLO_TEST_OPT:-}" ] && opt=(-DCMAKE_CXX_FLAGS_RELEASE="$LIBREYOLO_TEST_OPT -DNDEBUG")
# Only what the suite runs: the single runner (no per-area runners), each test area as one translation unit.
cmake -S . -B build -G Ninja -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_EXAMPLES=ON -DLIBREYOLO_FAMILIES= \
  -DLIBREYOLO_TEST_AREA_RUNNERS=OFF -DLIBREYOLO_TEST_UNITY=ON "${opt[@]}" >/dev/null
t0=$(date +%s)
cmake --build build -j"$(nproc)"
echo "build: $(( $(date +%s) - t0 )) s"
# Every GPU suite is left out here (gpu, gpu2); --duration=true prints each case's time, so the slowest are
# visible in CI's log. Under CI=true (or LRY_STRICT=1) a missing prerequisite of a check is a failure.
t0=$(date +%s)
set +e
build/tests/libreyolo_tests --test-suite-exclude='gpu*' --duration=true "$@"
rc=$?
set -e
echo "suite: $(( $(date +%s) - t0 )) s"
exit $rc
