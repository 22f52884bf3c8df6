// The D-FINE line's initial weights against the original's, for the models of the accuracy protocol (D-FINE-n,
// DEIM-n, DEIMv2-atto, DEIMv2-s, EC-s; 8 classes): tests/dfine/data/init_stats.json (made by
// scripts/fixtures/make_init_stats.py), compared as tests/support_init_stats.hpp says. It found EC's decoder FFN
// drawn xavier-uniform where the original keeps nn.Linear's own draw.
#include "support_init_stats.hpp"

#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/ec/family.hpp>
#include <libreyolo/families/rtdetrv4/family.hpp>

TEST_CASE("D-FINE-line initial weights: every entry drawn from the original's distribution (the accuracy protocol's models)") {
  const auto ref = lry_test::init_stats::reference("tests/dfine/data/init_stats.json");
  CHECK(ref.at("models").size() == 5);
  SUBCASE("dfine-n") { lry_test::init_stats::check_model<libreyolo::DFineFamily>(ref, "dfine", "n"); }
  SUBCASE("deim-n") { lry_test::init_stats::check_model<libreyolo::DEIMFamily>(ref, "deim", "n"); }
  SUBCASE("deimv2-atto") { lry_test::init_stats::check_model<libreyolo::DEIMv2Family>(ref, "deimv2", "atto"); }
  SUBCASE("deimv2-s") { lry_test::init_stats::check_model<libreyolo::DEIMv2Family>(ref, "deimv2", "s"); }
  SUBCASE("ec-s") { lry_test::init_stats::check_model<libreyolo::ECFamily>(ref, "ec", "s"); }
}

// The other sizes whose construction differs from the ones above (tests/dfine/data/init_stats_sizes.json, made by
// make_init_stats.py --models deimv2-femto,deimv2-pico,deimv2-n,deimv2-m,deimv2-l,deimv2-x,ec-m,ec-l,ec-x,dfine-x,deim-x,rtdetrv4-s):
// DEIMv2's other HGNetv2 sizes and its ViT sizes m..x, EC's larger ViTs, D-FINE's and DEIM's widest, RT-DETRv4's
// smallest. All as the original's but DEIMv2-l's and -x's bias_mask (below).
TEST_CASE("D-FINE-line initial weights, the other sizes: every entry drawn from the original's distribution") {
  const auto ref = lry_test::init_stats::reference("tests/dfine/data/init_stats_sizes.json");
  CHECK(ref.at("models").size() == 12);
  namespace is = lry_test::init_stats;
  // DEIMv2 l and x: the original builds DINOv3's LinearKMaskedBias bias_mask as NaN (dinov3/layers/attention.py:36-38)
  // and only its converted checkpoint sets it, so its forward from scratch is NaN; ours holds the checkpoint's value
  // (ones, the K third zero; nn/vit.hpp), as tests/fixtures/libreyolo/deimv2-{l,x}-kmask compare.
  const std::vector<lry_test::init_stats::Deviation> kmask{
      {R"(backbone\.dinov3\.blocks\.\d+\.attn\.qkv\.bias_mask)", "DINOv3's bias_mask at its checkpoint value, not the original's NaN"}};
  for (const std::string size : {"femto", "pico", "n", "m", "l", "x"})
    is::check_model<libreyolo::DEIMv2Family>(ref, "deimv2", size, size == "l" || size == "x" ? kmask : std::vector<is::Deviation>{});
  for (const std::string size : {"m", "l", "x"}) is::check_model<libreyolo::ECFamily>(ref, "ec", size);
  is::check_model<libreyolo::DFineFamily>(ref, "dfine", "x");
  is::check_model<libreyolo::DEIMFamily>(ref, "deim", "x");
  is::check_model<libreyolo::RTDETRv4Family>(ref, "rtdetrv4", "s");
}
