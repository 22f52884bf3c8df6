// cuDNN autotuning per run (core/config.hpp cudnn_autotune): on for fixed shapes, off with deterministic=true,
// off by default with multi_scale=true (it would re-tune every layer for each new size) unless given explicitly.
#include <libreyolo/core/config.hpp>

#include <doctest/doctest.h>

namespace ly = libreyolo;

TEST_CASE("cudnn_autotune: fixed shapes tune, multi_scale does not unless cudnn_benchmark is explicit") {
  std::string why;
  CHECK(ly::cudnn_autotune(ly::parse_args({"model=yolo9t"}), &why));
  CHECK(why.empty());
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=yolo9t", "cudnn_benchmark=false"}), &why));
  CHECK(why.empty());
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=yolo9t", "deterministic=true"}), &why));
  CHECK(why.empty());
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=rtdetr-r18", "multi_scale=true"}), &why));
  CHECK(why.find("multi_scale=true: cuDNN autotuning is off") == 0);
  CHECK(why.find("cudnn_benchmark=true") != std::string::npos);
  why.clear();
  CHECK(ly::cudnn_autotune(ly::parse_args({"model=rtdetr-r18", "multi_scale=true", "cudnn_benchmark=true"}), &why));
  CHECK(why.empty());
  // A family's multi_scale=true default (an override, not the user's key) counts as multi-scale too.
  auto c = ly::parse_args({"model=dfinen"});
  const std::array<std::string_view, 1> fam{"multi_scale=true"};
  ly::apply_overrides(c, fam);
  CHECK(c.multi_scale);
  CHECK_FALSE(ly::cudnn_autotune(c, &why));
  CHECK_FALSE(why.empty());
}
