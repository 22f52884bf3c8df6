#!/bin/bash
# Builds and runs test_profile against the pip LibTorch (CUDA) on the GPU machine, without CMake.
# Needs doctest/ and nlohmann/ headers copied into build-profile/devinc (carried there). Run from the repo root.
set -x
TP=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
g++ --version | head -1; python3 -c 'import torch;print(torch.__version__, torch.cuda.is_available())'
CUINC=$(python3 -c 'import nvidia.cuda_runtime,os;print(os.path.dirname(nvidia.cuda_runtime.__file__)+"/include")' 2>/dev/null)
FLAGS="-std=c++20 -O1 -DLIBREYOLO_WITH_CUDA=1 -D_GLIBCXX_USE_CXX11_ABI=$ABI -DLIBREYOLO_SOURCE_DIR=\"$PWD\" -Iinclude -Itests -Ibuild-profile/devinc -I$TP/include -I$TP/include/torch/csrc/api/include -I/usr/local/cuda/include${CUINC:+ -I$CUINC}"
O=/tmp/lry_profile_o; rm -rf $O; mkdir -p $O
for f in tests/main.cpp tests/profile/test_analysis.cpp tests/profile/test_artifacts_report.cpp tests/profile/test_window.cpp; do
  g++ $FLAGS -c $f -o $O/$(basename $f).o 2> $O/$(basename $f).err &
done
wait
cat $O/*.err | grep -E "error|warning" | head -40
g++ $O/*.o -L$TP/lib -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda -Wl,-rpath,$TP/lib -o $O/test_profile || exit 1
mkdir -p $OUT/gpu
LRY_PROFILE_GPU_OUT=$OUT/gpu $O/test_profile 2>&1 | tail -40
echo "---- gpu suite alone"
LRY_PROFILE_GPU_OUT=$OUT/gpu $O/test_profile -ts=gpu 2>&1 | tail -30
