// LingBot-Vision against a Python transcription of the original's forward (ref_lingbot.py).
#include <doctest/doctest.h>
#include <libreyolo/families/lingbot/family.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "semantic/reference_support.hpp"
#include "support.hpp"

TEST_CASE("lingbot s: eval logits equal the original's forward (Python transcription, deterministic fill)" * lry_test::needs({lry_test::Need::python_torch})) {
  LRY_NEED(lry_test::Need::python_torch);
  const auto py = lry_test::semantic_python();
  lry_test::TempDir dir("lry_lingbot_ref");
  libreyolo::lingbot::LingBot net("s", 5);
  lry_test::semantic_fill(*net, 13);
  net->eval();
  auto x = torch::rand({2, 3, 64, 48}, at::detail::createCPUGenerator(6));
  auto ours = net->forward(x);
  REQUIRE(ours.sizes() == torch::IntArrayRef({2, 5, 4, 3}));
  auto ref = lry_test::semantic_reference(*net, x, std::filesystem::path(LIBREYOLO_SOURCE_DIR) / "tests/lingbot/ref_lingbot.py", "s",
                                          5, dir.path, {2, 5, 4, 3}, py);
  const double scale = ref.abs().max().item<double>();
  const double diff = (ours - ref).abs().max().item<double>();
  MESSAGE("lingbot s logits: max |ours - reference| = " << diff << " (max |reference| " << scale << ")");
  CHECK(scale > 0.1);
  CHECK(diff <= 1e-4 * scale);
}
