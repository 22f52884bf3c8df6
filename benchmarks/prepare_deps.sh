#!/usr/bin/env bash
# The .deps folder the device drivers unpack (device_lib.sh driver_deps, gpu_suites.sh): Debian 12's debs of the
# header and small libraries the CUDA machine's image lacks. Nothing of them is committed (.deps is ignored); carry
# .deps (and .orig, benchmarks/fidelity/prepare_orig.sh) in every `run` that builds. libjpeg is left out on purpose:
# the image has its own, and carried libjpeg debs shadowed it (benchmarks/s12/README.md, call 2).
#   benchmarks/prepare_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps && cd .deps
apt-get download libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev doctest-dev libboost1.74-dev \
  libpng-dev libpng16-16 zlib1g-dev
ls -1 *.deb
