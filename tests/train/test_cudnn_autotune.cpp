// cuDNN autotuning per run (core/config.hpp cudnn_autotune): off by default (the original's setting); when
// asked for, on for fixed shapes, never with deterministic=true, and off with multi_scale=true (it would re-tune
// every layer for each new size) unless given explicitly.
#include <libreyolo/core/config.hpp>

#include <doctest/doctest.h>

namespace ly = libreyolo;

TEST_CASE("cudnn_autotune: off by default; asked for, fixed shapes tune, multi_scale does not unless cudnn_benchmark is explicit") {
  std::string why;
  CHECK_FALSE(ly::parse_args({"model=yolo9t"}).cudnn_benchmark);
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=yolo9t"}), &why));
  CHECK(why.empty());
  CHECK(ly::cudnn_autotune(ly::parse_args({"model=yolo9t", "cudnn_benchmark=true"}), &why));
  CHECK(why.empty());
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=yolo9t", "cudnn_benchmark=false"}), &why));
  CHECK(why.empty());
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=yolo9t", "deterministic=true", "cudnn_benchmark=true"}), &why));
  CHECK(why.empty());
  CHECK_FALSE(ly::cudnn_autotune(ly::parse_args({"model=rtdetr-r18", "multi_scale=true"}), &why));
  CHECK(why.empty());  // off by default: nothing to explain
  why.clear();
  CHECK(ly::cudnn_autotune(ly::parse_args({"model=rtdetr-r18", "multi_scale=true", "cudnn_benchmark=true"}), &why));
  CHECK(why.empty());
  // A family's defaults (overrides, not the user's keys): multi_scale=true wins over cudnn_benchmark=true.
  auto c = ly::parse_args({"model=dfinen"});
  const std::array<std::string_view, 2> fam{"multi_scale=true", "cudnn_benchmark=true"};
  ly::apply_overrides(c, fam);
  CHECK(c.multi_scale);
  CHECK(c.cudnn_benchmark);
  CHECK_FALSE(ly::cudnn_autotune(c, &why));
  CHECK(why.find("multi_scale=true: cuDNN autotuning is off") == 0);
}
