// One DEIMv2 training step against the original's (tests/fixtures/libreyolo/deimv2-{atto,s}-train): the
// harness and what it compares are tests/support_train_case.hpp's. atto's own backbone and encoder maps equal
// the original's, so its backbone and encoder gradients are compared too; s's training-mode ViT encoder
// amplifies rounding under the fill (the header says how much), so its maps are compared to 5e-2 (measured:
// 2.4e-3 / 1.1e-2 / 5.2e-3) and the step from the encoder's maps on.
#include "support_train_case.hpp"

#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/deimv2/network.hpp>

using libreyolo::families::deimv2::DEIMv2;
using libreyolo::families::deimv2::DEIMv2Options;

namespace {
void check_deimv2(const std::string& size, const lry_test::train_case::MapTolerances& tol) {
  lry_test::train_case::check_step(
      "deimv2-" + size + "-train", [&] { return DEIMv2(DEIMv2Options{size, 80, 0, /*imagenet_norm=*/false}); },
      libreyolo::DEIMv2Family::criterion_options(size, 80), tol);
}
}  // namespace

TEST_CASE("deimv2-atto: one training step (denoising, every output, the loss terms, gradients) equals the original's" *
          lry_test::needs({lry_test::Need::fixtures})) {
  check_deimv2("atto", {{1e-4}, 1e-4, true});
}

TEST_CASE("deimv2-s: one training step (ViT + STA, denoising, the local terms on GO-LSD's union) equals the original's" *
          lry_test::needs({lry_test::Need::fixtures})) {
  check_deimv2("s", {{1e-4, 1e-4, 1e-4}, 5e-2, false});
}
