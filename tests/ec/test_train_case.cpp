// One EC training step against the original's (tests/fixtures/libreyolo/ec-s-train): the harness and what it
// compares are tests/support_train_case.hpp's; the criterion is ECTrainer's (D-FINE's matcher and forward, MAL at
// gamma 2), as the family trains with it. Under the fill EC's training-mode chain is more sensitive still: a 1e-6
// relative perturbation of the original's own ViT output moves its stride-32 map (the one behind a projection with a
// training-mode BatchNorm on 5 x 5 cells) by 1.2e-3 and its encoder maps by 1.0-3.0 of their mean magnitude. So the
// stride-32 map is compared to 2e-3 (measured: 2.8e-4), the other two, the ViT's own, to 1e-4, and our own encoder
// maps not at all: the step runs from the original's maps.
#include "support_train_case.hpp"

#include <libreyolo/families/ec/family.hpp>
#include <libreyolo/families/ec/network.hpp>

using libreyolo::families::ec::EC;
using libreyolo::families::ec::ECOptions;

TEST_CASE("ec-s: one training step (ECViT, denoising, every output, the loss terms, gradients) equals the original's" *
          lry_test::needs({lry_test::Need::fixtures})) {
  lry_test::train_case::check_step(
      "ec-s-train", [] { return EC(ECOptions{"s", 80, 640, /*imagenet_norm=*/false}); },
      libreyolo::ECFamily::criterion_options("s", 80), {{1e-4, 1e-4, 2e-3}, std::nullopt, false});
}
