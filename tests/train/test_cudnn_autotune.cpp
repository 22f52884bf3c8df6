// cuDNN autotuning per run (core/config.hpp cudnn_autotune): off by default (the original's setting); when
// asked for, on for fixed shapes, never with deterministic=true, and off with multi_scale=true (it would re-tune
// every layer for each new size) unless given explicitly.
//
// cuDNN's engine ranking without autotuning (cudnn_heuristic, core/cudnn.hpp): "instant" by default, "b" for
// heuristic mode B, which PyTorch takes from the environment variable TORCH_CUDNN_USE_HEURISTIC_MODE_B.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/cudnn.hpp>
#include <libreyolo/core/error.hpp>

#include <cstdlib>

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

TEST_CASE("cudnn_heuristic: instant by default, b on request, anything else refused naming the allowed values") {
  CHECK(ly::parse_args({"model=yolo9t"}).cudnn_heuristic == "instant");
  CHECK(ly::parse_args({"model=yolo9t", "cudnn_heuristic=B"}).cudnn_heuristic == "b");
  CHECK(ly::parse_args({"model=yolo9t", "cudnn_heuristic= instant "}).cudnn_heuristic == "instant");
  CHECK_THROWS_WITH_AS(ly::parse_args({"model=yolo9t", "cudnn_heuristic=fast"}),
                       doctest::Contains("cudnn_heuristic=fast: invalid value; allowed: instant | b"), ly::ConfigError);
}

TEST_CASE("set_cudnn_heuristic: b sets PyTorch's variable; instant removes one set outside and says so") {
  const char* before = std::getenv(ly::cudnn_heuristic_env);
  const std::string saved = before ? before : "";
  unsetenv(ly::cudnn_heuristic_env);
  CHECK(ly::set_cudnn_heuristic("instant").empty());  // nothing set: nothing to say
  CHECK(std::getenv(ly::cudnn_heuristic_env) == nullptr);
  CHECK(ly::set_cudnn_heuristic("b").empty());
  REQUIRE(std::getenv(ly::cudnn_heuristic_env) != nullptr);
  CHECK(std::string(std::getenv(ly::cudnn_heuristic_env)) == "1");
  const std::string why = ly::set_cudnn_heuristic("instant");  // set (here by us; as if outside): removed, with a notice
  CHECK(why.find("TORCH_CUDNN_USE_HEURISTIC_MODE_B was set in the environment") == 0);
  CHECK(std::getenv(ly::cudnn_heuristic_env) == nullptr);
  if (!saved.empty()) setenv(ly::cudnn_heuristic_env, saved.c_str(), 1);
}

TEST_CASE("CudnnScope puts cuDNN's process-wide flags and the heuristic variable back as they were") {
  auto& ctx = at::globalContext();
  const bool bench0 = ctx.benchmarkCuDNN(), det0 = ctx.deterministicCuDNN();
  const char* env0 = std::getenv(ly::cudnn_heuristic_env);
  const std::string saved = env0 ? env0 : "";
  for (const bool start : {false, true}) {
    ctx.setBenchmarkCuDNN(start);
    ctx.setDeterministicCuDNN(!start);
    if (start) setenv(ly::cudnn_heuristic_env, "7", 1);
    else unsetenv(ly::cudnn_heuristic_env);
    {
      ly::CudnnScope scope;
      ctx.setBenchmarkCuDNN(!start);
      ctx.setDeterministicCuDNN(start);
      if (start) unsetenv(ly::cudnn_heuristic_env);
      else setenv(ly::cudnn_heuristic_env, "1", 1);
      CHECK(ctx.benchmarkCuDNN() == !start);
    }
    CHECK(ctx.benchmarkCuDNN() == start);
    CHECK(ctx.deterministicCuDNN() == !start);
    if (start) {
      REQUIRE(std::getenv(ly::cudnn_heuristic_env) != nullptr);
      CHECK(std::string(std::getenv(ly::cudnn_heuristic_env)) == "7");
    } else {
      CHECK(std::getenv(ly::cudnn_heuristic_env) == nullptr);
    }
  }
  ctx.setBenchmarkCuDNN(bench0);
  ctx.setDeterministicCuDNN(det0);
  if (!saved.empty()) setenv(ly::cudnn_heuristic_env, saved.c_str(), 1);
  else unsetenv(ly::cudnn_heuristic_env);
}
