#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the test suite (doctest prints its summary last).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBREYOLO_WITH_PYTORCH=1 scripts/deps.sh
# LIBREYOLO_TEST_OPT (e.g. -O0, as CI sets it) replaces Release's -O3: the suite is compile-bound on small
# machines, and -O1 compiles a family's conformance unit in 42 s of CPU against 59 s at -O3 (2-core VM).
opt=()
[ -n "${LIBREYOLO_TEST_OPT:-}" ] && opt=(-DCMAKE_CXX_FLAGS_RELEASE="$LIBREYOLO_TEST_OPT -DNDEBUG")
# Only what the suite runs: the single runner (no per-area runners), each test area as one translation unit.
# The GPU-only test files (tests/<area>/*_gpu.cpp: "gpu" suite cases, which cannot run here) are left out of this
# CPU build (LIBREYOLO_TEST_GPU_UNITS=OFF); the CUDA machine builds and runs them (benchmarks/gpu_suites.sh).
cmake -S . -B build -G Ninja -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_EXAMPLES=ON -DLIBREYOLO_FAMILIES= \
  -DLIBREYOLO_TEST_AREA_RUNNERS=OFF -DLIBREYOLO_TEST_UNITY=ON -DLIBREYOLO_TEST_GPU_UNITS=OFF "${opt[@]}" >/dev/null
t0=$(date +%s)
cmake --build build -j"$(nproc)"
echo "build: $(( $(date +%s) - t0 )) s"
# Every GPU suite is left out here (gpu, gpu2); --duration=true prints each case's time, so the slowest are
# visible in CI's log. Under CI=true (or LRY_STRICT=1) a missing prerequisite of a check is a failure.
# The suite runs as two processes side by side (most cases use one core at a time: a whole run in one
# process kept the second core ~half idle, 1285 s wall for 1295 s of CPU): the conformance suite, io,
# distributed, install (the installed consumers' builds), ec, rfdetr and rtdetr in one, every other area in the other; each prints
# doctest's summary, then one line for both. The split balances the two (session 22's clean-clone run: 553 s
# against 711 s of cases before ec, 89 s, moved to the first; session 26: the conformance cases' detection batch
# of 2 took ~140 s off the first, and rfdetr, ~55 s, moved to it; session 36: 457 s against 570 s of cases, so rtdetr,
# ~56 s, moved to the first).
bin=build/tests/libreyolo_tests
# glibc's allocator: blocks up to 32 MB from the heap (not a fresh mmap each time) and freed memory kept up to
# 4 GB, so the CPU forward passes of the large fixture networks stop page-faulting every activation in again
# (measured on the 2-core VM, session 25: deimv2-x's fixture case 51.5 s -> 20.3 s, user and system time both
# halved; the whole suite's cases 1469 -> 1256 s of CPU). It reaches the CLI runs the cases start too.
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:glibc.malloc.top_pad=268435456
first='*/tests/kit/*,*/tests/io/*,*/tests/distributed/*,*/tests/install/*,*/tests/ec/*,*/tests/rfdetr/*,*/tests/rtdetr/*'
t0=$(date +%s)
set +e
"$bin" --test-suite-exclude='gpu*' --duration=true --source-file="$first" "$@" > build/suite_1.log 2>&1 &
p1=$!
"$bin" --test-suite-exclude='gpu*' --duration=true --source-file-exclude="$first" "$@" > build/suite_2.log 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
set -e
cat build/suite_1.log build/suite_2.log
# Each process's plain line: "tests: P passed, F failed, S skipped" (S counts the other process's cases).
read -r p1n f1n s1n <<< "$(grep -E '^tests: ' build/suite_1.log | tail -1 | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/')"
read -r p2n f2n s2n <<< "$(grep -E '^tests: ' build/suite_2.log | tail -1 | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/')"
rc=0
if [ "$r1" -ne 0 ] || [ "$r2" -ne 0 ]; then rc=1; fi
if [ -z "${p1n:-}" ] || [ -z "${p2n:-}" ]; then
  echo "test.sh: a suite process printed no summary (exit codes $r1, $r2)"; rc=1
  p1n=${p1n:-0}; f1n=${f1n:-1}; s1n=${s1n:-0}; p2n=${p2n:-0}; f2n=${f2n:-1}; s2n=${s2n:-0}
fi
total=$((p1n + f1n + s1n))
echo "suite: $(( $(date +%s) - t0 )) s (exit codes $r1, $r2)"
echo "tests: $((p1n + p2n)) passed, $((f1n + f2n)) failed, $((total - p1n - p2n - f1n - f2n)) skipped"
exit $rc
