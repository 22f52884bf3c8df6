#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the test suite (doctest prints its summary last).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBREYOLO_WITH_PYTORCH=1 scripts/deps.sh
# LIBREYOLO_TEST_OPT (e.g. -O1, as CI sets it) replaces Release's -O3: the suite is compile-bound on small
# machines, and -O1 compiles a family's conformance unit in 42 s of CPU against 59 s at -O3 (2-core VM).
opt=()
[ -n "${LIBREYOLO_TEST_OPT:-}" ] && opt=(-DCMAKE_CXX_FLAGS_RELEASE="$LIBREYOLO_TEST_OPT -DNDEBUG")
cmake -S . -B build -G Ninja -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_EXAMPLES=ON -DLIBREYOLO_FAMILIES= "${opt[@]}" >/dev/null
cmake --build build -j"$(nproc)"
build/tests/libreyolo_tests --test-suite-exclude=gpu "$@"
