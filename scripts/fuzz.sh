#!/usr/bin/env bash
# Builds and runs the fuzz targets (fuzz/fuzz_*.cpp), each for SECONDS (default 60):
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 600 fuzz_label_lines
# libFuzzer through clang++-14 (Debian: clang-14 libclang-rt-14-dev) when it is installed, else the
# mutation-loop driver in fuzz/driver/ with g++. The working corpus grows in $BUILD/corpus/<parser>/
# (seeded from fuzz/corpus/<parser>/); crashes, hangs (-timeout, 20 s) and unnamed errors (the
# targets abort on them) land in $BUILD/artifacts/<parser>/. Prints one line per target and exits 1
# when any target left an artifact.
#   LIBREYOLO_FUZZ_BUILD=DIR (default build-fuzz), LIBREYOLO_FUZZ_ENGINE=libfuzzer|driver, NICE=19.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
bdir=${LIBREYOLO_FUZZ_BUILD:-build-fuzz}
engine=${LIBREYOLO_FUZZ_ENGINE:-}
cxx=g++
if [ -z "$engine" ]; then
  engine=driver
  if command -v clang++-14 >/dev/null && ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    engine=libfuzzer
  fi
fi
[ "$engine" = libfuzzer ] && cxx=clang++-14
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
cmake -S fuzz -B "$bdir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DLIBREYOLO_FUZZ_ENGINE="$engine" >/dev/null
nice -n "${NICE:-19}" cmake --build "$bdir" -j1 --target "${targets[@]}"
status=0
for t in "${targets[@]}"; do
  parser=${t#fuzz_}
  seeds=fuzz/corpus/$parser
  work=$bdir/corpus/$parser
  art=$bdir/artifacts/$parser
  mkdir -p "$work" "$art" "$seeds"
  if [ "$parser" = checkpoint ] && [ -z "$(ls -A "$seeds")" ]; then
    LRY_FUZZ_WRITE_SEED="$seeds/trainer_like.ckpt" "$bdir/$t" || true
  fi
  log=$bdir/$t.log
  set +e
  nice -n "${NICE:-19}" "$bdir/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+|stat: execs [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  corpus=$(ls -A "$work" "$seeds" | grep -vc ':$' || true)
  arts=$(ls -A "$art" | wc -l)
  echo "$t: engine $engine, ${secs}s, execs ${execs:-?}, corpus $corpus files, artifacts $arts, exit $rc (log $log)"
  if [ "$arts" -gt 0 ] || [ $rc -ne 0 ]; then status=1; fi
done
exit $status
