#!/bin/bash
# How the precision GPU tests were run on the H200 machine (2026-11-29): record PyTorch's reference
# trajectory, then build tests/precision against the machine's pip LibTorch (2.11 + CUDA) with g++ and run
# it. The machine has no doctest/nlohmann/yaml-cpp: copy them first into build-precision-gpu/deps/
# (include/{doctest,nlohmann,yaml-cpp}, lib/libyaml-cpp.a) and carry that folder.
# Known: with this link line, TempDir's std::filesystem::remove_all binds to the copy exported by
# libtorch.so and crashes (SIGSEGV in the checkpoint round-trip test's cleanup); the gpu suite passes.
set -x
D=build-precision-gpu
nvidia-smi --query-gpu=name,driver_version --format=csv
g++ --version | head -1
TORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
CUDAINC=$(dirname $(find / -name cuda_runtime_api.h -not -path '*/proc/*' 2>/dev/null | head -1))
echo TORCH=$TORCH ABI=$ABI CUDAINC=$CUDAINC
python3 benchmarks/precision/scaler_reference.py --device cuda --out tests/data/precision/scaler_reference.json 2>&1 | tail -3
cp tests/data/precision/scaler_reference.json $OUT/
FLAGS="-std=c++20 -O1 -DLIBREYOLO_WITH_CUDA -D_GLIBCXX_USE_CXX11_ABI=$ABI -DLIBREYOLO_SOURCE_DIR=\"$PWD\" -DLIBREYOLO_BINARY_DIR=\"$PWD/$D\" -Iinclude -Itests -I$D/deps/include -I$TORCH/include -I$TORCH/include/torch/csrc/api/include -I$CUDAINC"
for f in tests/main.cpp tests/precision/test_grad_scaler.cpp tests/precision/test_policies.cpp; do
  g++ $FLAGS -c $f -o $D/$(basename $f .cpp).o > $D/$(basename $f .cpp).log 2>&1 &
done
wait
for l in $D/*.log; do tail -20 $l; done
g++ $D/*.o -o $D/test_precision -L$TORCH/lib -Wl,-rpath,$TORCH/lib -Wl,--no-as-needed -ltorch -ltorch_cuda -ltorch_cpu -lc10_cuda -lc10 $D/deps/lib/libyaml-cpp.a 2>&1 | tail -20
./$D/test_precision 2>&1 | tail -60
./$D/test_precision -ts=gpu -s 2>&1 | grep -E "TEST CASE|MESSAGE|ERROR|test cases|assertions" | head -40
