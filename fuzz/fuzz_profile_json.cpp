// Fuzz target: profile.json / profile_repeat.json readers (profile/report.hpp): summary, phases,
// kernels (with a --grep) and compare must print or return exit code 2, never crash or throw.
// fuzz-engine: libfuzzer (no LibTorch headers: coverage-guided with clang)
#include "fuzz_common.hpp"

#include <libreyolo/profile/report.hpp>

#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = lry_fuzz::write_input("profile.json", data, size);
  lry_fuzz::guarded([&] {
    namespace p = libreyolo::profile;
    std::ostringstream out, err;
    int rc[5];
    rc[0] = p::run_summary(file, out, err);
    rc[1] = p::run_phases(file, out, err);
    p::KernelQuery q;
    q.grep = "gemm|(conv.*)+";
    q.sort = size % 2 ? "name" : "count";
    rc[2] = p::run_kernels(file, q, out, err);
    q = {};
    q.phase = "forward";
    rc[3] = p::run_kernels(file, q, out, err);
    rc[4] = p::run_compare(file, file, out, err);
    for (int r : rc)
      if (r != 0 && r != 2) lry_fuzz::broken("an exit code other than 0 or 2");
  });
  return 0;
}
