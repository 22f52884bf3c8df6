// One D-FINE-n and one DEIM-n training step against the original's (tests/fixtures/libreyolo/{dfine,deim}-n-train,
// 320 px: the n sizes' two levels need at least 300 tokens): the harness and what it compares are
// tests/support_train_case.hpp's, the criteria those the families train with (D-FINE: VFL; DEIM: MAL at
// gamma 1.5). The HGNetv2 backbone's maps are held to 1e-4 of the original's, the hybrid encoder's to 2e-3 (measured:
// 1.5e-4; the original's own move by 5.4e-3 / 3.4e-3 with 1 vs 2 threads, and by 1.1e-3 under a 1e-6 relative
// perturbation of its AIFI output), and the backbone's and encoder's gradients are compared through them (to 1e-3:
// measured 1.1e-4 and 4.8e-4).
#include "support_train_case.hpp"

#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/dfine/network.hpp>

using libreyolo::families::dfine::DFine;
using libreyolo::families::dfine::DFineOptions;
using libreyolo::families::dfine::Variant;

TEST_CASE("dfine-n and deim-n: one training step (denoising, every output, the loss terms, gradients) equals the original's" *
          lry_test::needs({lry_test::Need::fixtures})) {
  for (const auto& [model, variant, opts] :
       {std::tuple{"dfine-n-train", Variant::dfine, libreyolo::DFineFamily::criterion_options("n", 80)},
        std::tuple{"deim-n-train", Variant::deim, libreyolo::DEIMFamily::criterion_options("n", 80)}}) {
    const auto v = variant;
    lry_test::train_case::check_step(model, [v] { return DFine(DFineOptions{"n", 80, v, 640}); }, opts,
                                     {{1e-4, 1e-4}, 2e-3, true});
  }
}
