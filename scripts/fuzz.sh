#!/usr/bin/env bash
# Builds and runs the fuzz targets (fuzz/fuzz_*.cpp), each for SECONDS (default 60):
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 600 fuzz_label_lines
# Targets whose source says "fuzz-engine: libfuzzer" run under libFuzzer (clang++-14 with
# libclang-rt-14-dev, coverage-guided) when it is installed; the others (LibTorch's headers do not
# compile with clang-14) and everything without clang run under the mutation-loop driver in
# fuzz/driver/ built with g++. The working corpus grows in $BUILD/corpus/<parser>/ (seeded from
# fuzz/corpus/<parser>/); crashes, hangs (-timeout, 20 s) and unnamed errors (the targets abort on
# them) land in $BUILD/artifacts/<parser>/. Prints one line per target; exits 1 when any target left
# an artifact or failed. -rss_limit_mb is libFuzzer's; under the driver a target caps its own memory
# (fuzz_pt_zipdir, the .pt zip-directory target: RLIMIT_AS and a peak-RSS check, see its header).
#   LIBREYOLO_FUZZ_BUILD=DIR (default build-fuzz), NICE=19 (niceness of builds and runs).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
bdir=${LIBREYOLO_FUZZ_BUILD:-build-fuzz}
nice_=${NICE:-19}
have_clang=0
if command -v clang++-14 >/dev/null && ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  have_clang=1
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
lf=() dr=()
for t in "${targets[@]}"; do
  [ -f "fuzz/$t.cpp" ] || { echo "no such target: fuzz/$t.cpp" >&2; exit 2; }
  if [ $have_clang = 1 ] && grep -q "fuzz-engine: libfuzzer" "fuzz/$t.cpp"; then lf+=("$t"); else dr+=("$t"); fi
done
if [ ${#lf[@]} -gt 0 ]; then
  cmake -S fuzz -B "$bdir/libfuzzer" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DLIBREYOLO_FUZZ_ENGINE=libfuzzer >/dev/null
  nice -n "$nice_" cmake --build "$bdir/libfuzzer" -j1 --target "${lf[@]}"
fi
if [ ${#dr[@]} -gt 0 ]; then
  cmake -S fuzz -B "$bdir/driver" -G Ninja -DCMAKE_CXX_COMPILER=g++ -DLIBREYOLO_FUZZ_ENGINE=driver >/dev/null
  nice -n "$nice_" cmake --build "$bdir/driver" -j1 --target "${dr[@]}"
fi
status=0
for t in "${targets[@]}"; do
  engine=driver
  for x in "${lf[@]}"; do [ "$x" = "$t" ] && engine=libfuzzer; done
  bin=$bdir/$engine/$t
  parser=${t#fuzz_}
  seeds=fuzz/corpus/$parser
  work=$bdir/corpus/$parser
  art=$bdir/artifacts/$parser
  mkdir -p "$work" "$art" "$seeds"
  if [ "$parser" = checkpoint ] && [ -z "$(ls -A "$seeds")" ]; then
    LRY_FUZZ_WRITE_SEED="$seeds/trainer_like.ckpt" "$bin" || true
  fi
  log=$bdir/$t.log
  set +e
  nice -n "$nice_" "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+|stat: execs [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  corpus=$(find "$work" -type f | wc -l)
  arts=$(find "$art" -type f | wc -l)
  echo "$t: engine $engine, ${secs}s, execs ${execs:-?}, corpus $corpus files (+ $(find "$seeds" -type f | wc -l) seeds), artifacts $arts, exit $rc (log $log)"
  if [ "$arts" -gt 0 ] || [ $rc -ne 0 ]; then status=1; fi
done
exit $status
