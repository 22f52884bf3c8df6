#!/usr/bin/env bash
# Configures and builds against the LibTorch inside an installed Python PyTorch (CUDA machine).
#   scripts/build-cuda.sh [build-dir] [extra cmake args...]
# Extra prefixes (e.g. unpacked yaml-cpp / CLI11) can be passed in LIBREYOLO_EXTRA_PREFIX.
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=${1:-build-cuda}; shift || true
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
arch=$(python3 -c 'import torch;p=torch.cuda.get_device_capability();print(f"{p[0]}.{p[1]}")' 2>/dev/null || echo 9.0)
prefix="$torch_prefix${LIBREYOLO_EXTRA_PREFIX:+;$LIBREYOLO_EXTRA_PREFIX}"
# Arguments before a lone "--" go to the configure step, the rest to the build tool (e.g. -- -k 0).
conf=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do conf+=("$1"); shift; done; [ $# -gt 0 ] && shift
TORCH_CUDA_ARCH_LIST=$arch cmake -S . -B "$bdir" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "${conf[@]}"
cmake --build "$bdir" -j"$(nproc)" -- "$@"
