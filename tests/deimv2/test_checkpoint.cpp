// The original's DEIMv2 .pt checkpoints load (io/original.hpp): the names are the original's state-dict
// keys; its decoder's `anchors` buffer holds +inf at the invalid cells (ours: kInvalidAnchor, a large finite
// value, as a checkpoint may not hold non-finite values), read as that value; NaN stays an error.
#include "support.hpp"
#include "io/io_support.hpp"

#include <libreyolo/families/deimv2/network.hpp>
#include <libreyolo/io/checkpoint.hpp>
#include <libreyolo/io/original.hpp>

#include <doctest/doctest.h>

#include <limits>
#include <string>

namespace io = libreyolo::io;
using libreyolo::families::deimv2::DEIMv2;
using libreyolo::families::deimv2::DEIMv2Options;


TEST_CASE("deimv2-s: the original's .pt (anchors +inf at invalid cells) loads into our network, weights equal") {
  lry_test::TempDir dir("lry_deimv2_pt");
  torch::manual_seed(0);
  DEIMv2 net(DEIMv2Options{"s", 3, 0, true});
  auto sd = io::module_state_dict(*net);
  int64_t invalid = 0;
  for (auto& [name, t] : sd)
    if (name == "decoder.anchors") {
      const auto bad = t.ge(1e4);
      invalid = bad.sum().item<int64_t>();
      t = torch::where(bad, torch::full_like(t, std::numeric_limits<float>::infinity()), t);  // as the original holds it
    }
  REQUIRE(invalid > 0);
  const auto path = (dir / "deimv2s.pt").string();
  io::write_pt(path, lry_test::original_like(sd, "deimv2", "s", 3));
  const auto ck = io::checkpoint_from_original(path);
  CHECK(ck.meta.at("model") == "deimv2s");
  torch::manual_seed(1);
  DEIMv2 other(DEIMv2Options{"s", 3, 0, true});
  libreyolo::train::get_module_state(ck, "model.", *other);
  const auto ours = net->named_parameters(), theirs = other->named_parameters();
  for (const auto& p : ours) CHECK_MESSAGE(torch::equal(p.value(), theirs[p.key()]), p.key());
  CHECK(torch::equal(other->named_buffers()["decoder.anchors"], net->named_buffers()["decoder.anchors"]));
  // NaN anywhere (e.g. the original's from-scratch DINOv3 bias_mask) stays an error.
  for (auto& [name, t] : sd)
    if (name == "decoder.anchors") t = torch::full_like(t, std::numeric_limits<float>::quiet_NaN());
  io::write_pt((dir / "nan.pt").string(), lry_test::original_like(sd, "deimv2", "s", 3));
  CHECK_THROWS_AS(io::checkpoint_from_original((dir / "nan.pt").string()), libreyolo::CheckpointError);
}
