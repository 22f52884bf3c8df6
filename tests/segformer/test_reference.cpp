// SegFormer against a Python transcription of the original's forward (ref_segformer.py): the same tensors
// by name (loaded strictly there), the same eval logits.
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "semantic/reference_support.hpp"
#include "support.hpp"

TEST_CASE("segformer b0: eval logits equal the original's forward (Python transcription, deterministic fill)" * lry_test::needs({lry_test::Need::python_torch})) {
  LRY_NEED(lry_test::Need::python_torch);
  const auto py = lry_test::semantic_python();
  lry_test::TempDir dir("lry_segformer_ref");
  libreyolo::segformer::Segformer net("b0", 7);
  lry_test::semantic_fill(*net, 11);
  net->eval();
  auto x = torch::rand({2, 3, 64, 96}, at::detail::createCPUGenerator(5));
  auto ours = net->forward(x);
  REQUIRE(ours.sizes() == torch::IntArrayRef({2, 7, 16, 24}));
  auto ref = lry_test::semantic_reference(*net, x, std::filesystem::path(LIBREYOLO_SOURCE_DIR) / "tests/segformer/ref_segformer.py",
                                          "b0", 7, dir.path, {2, 7, 16, 24}, py);
  const double scale = ref.abs().max().item<double>();
  const double diff = (ours - ref).abs().max().item<double>();
  MESSAGE("segformer b0 logits: max |ours - reference| = " << diff << " (max |reference| " << scale << ")");
  CHECK(scale > 0.1);
  CHECK(diff <= 1e-4 * scale);
}
