#!/usr/bin/env bash
# Installs what libreyolo needs on Debian 12 (LibTorch 1.13 CPU and the header libraries), if missing.
set -euo pipefail
pkgs=(build-essential cmake ninja-build libtorch-dev libboost-dev nlohmann-json3-dev doctest-dev
      libyaml-cpp-dev libjpeg62-turbo-dev libpng-dev libcli11-dev libgloo-dev libre2-dev
      libcairo2-dev fonts-dejavu-core libopenblas0-openmp)
# libopenblas0-openmp: Debian's LibTorch calls the system libblas.so.3 for every matmul/linear; without it
# that is the reference BLAS (measured 1.5 against 32 GFLOP/s for a 512x512 sgemm on one core), which
# made the transformer families' CPU steps ~20x slower. OpenMP build: LibTorch's own threads are OpenMP.
[ "${LIBREYOLO_WITH_CHROMIUM:-0}" = 1 ] && pkgs+=(chromium)
# The tests' cross-checks against PyTorch itself (torch.load of our .pt files, the semantic references) run
# /usr/bin/python3 with python3-torch; without it they skip with a message (scripts/test.sh asks for it).
[ "${LIBREYOLO_WITH_PYTORCH:-0}" = 1 ] && pkgs+=(python3-torch)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
