// The D-FINE line's initial weights against the original's, for the models of the accuracy protocol (D-FINE-n,
// DEIM-n, DEIMv2-atto, DEIMv2-s, EC-s; 8 classes): tests/dfine/data/init_stats.json (made by
// scripts/fixtures/make_init_stats.py), compared as tests/support_init_stats.hpp says. It found EC's decoder FFN
// drawn xavier-uniform where the original keeps nn.Linear's own draw.
#include "support_init_stats.hpp"

#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/ec/family.hpp>

TEST_CASE("D-FINE-line initial weights: every entry drawn from the original's distribution (the accuracy protocol's models)") {
  const auto ref = lry_test::init_stats::reference("tests/dfine/data/init_stats.json");
  CHECK(ref.at("models").size() == 5);
  SUBCASE("dfine-n") { lry_test::init_stats::check_model<libreyolo::DFineFamily>(ref, "dfine", "n"); }
  SUBCASE("deim-n") { lry_test::init_stats::check_model<libreyolo::DEIMFamily>(ref, "deim", "n"); }
  SUBCASE("deimv2-atto") { lry_test::init_stats::check_model<libreyolo::DEIMv2Family>(ref, "deimv2", "atto"); }
  SUBCASE("deimv2-s") { lry_test::init_stats::check_model<libreyolo::DEIMv2Family>(ref, "deimv2", "s"); }
  SUBCASE("ec-s") { lry_test::init_stats::check_model<libreyolo::ECFamily>(ref, "ec", "s"); }
}
