#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the test suite (doctest prints its summary last).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_EXAMPLES=ON >/dev/null
cmake --build build -j"$(nproc)"
build/tests/libreyolo_tests --test-suite-exclude=gpu "$@"
