// Precision policies: amp_dtype parsing, the resolution rule (explicit amp over the family default,
// CPU fallback with one log line, bf16 support check), the family AMP defaults table, the autocast
// guard's state handling, and GPU checks of the forward dtype under autocast.
#include <libreyolo/precision/amp.hpp>
#include <libreyolo/families/resnet/family.hpp>
#include <libreyolo/precision/family_default.hpp>

#include "support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace libreyolo;
using namespace libreyolo::precision;

namespace {

// Captures log lines for the lifetime of the object; starts with notice_once forgotten.
struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    log::reset_once();
    log::set_sink([this](log::Level, std::string_view m) { lines.emplace_back(m); });
  }
  ~LogCapture() { log::set_sink(nullptr); }
};

TrainConfig config(std::optional<bool> amp, std::string dtype = "float16") {
  TrainConfig c;
  c.amp = amp;
  c.amp_dtype = std::move(dtype);
  return c;
}

const torch::Device kCpu(torch::kCPU);
const torch::Device kCuda0(torch::kCUDA, 0);

}  // namespace

TEST_CASE("parse_amp_dtype accepts the spellings of float16 and bfloat16 and names the allowed values otherwise") {
  CHECK(parse_amp_dtype("float16") == "float16");
  CHECK(parse_amp_dtype("FP16") == "float16");
  CHECK(parse_amp_dtype(" half ") == "float16");
  CHECK(parse_amp_dtype("bfloat16") == "bfloat16");
  CHECK(parse_amp_dtype("BF16") == "bfloat16");
  CHECK((amp_scalar_type("bf16") == at::kBFloat16));
  CHECK((amp_scalar_type("float16") == at::kHalf));
  for (const std::string bad : {"float32", "fp8", "", "int8"}) {
    CAPTURE(bad);
    try {
      parse_amp_dtype(bad);
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      CHECK(m.find("amp_dtype = '" + bad + "'") != std::string::npos);
      CHECK(m.find("float16 | bfloat16") != std::string::npos);
    }
  }
}

TEST_CASE("resolve_precision: explicit amp overrides the family default; float16 gets the scaler") {
  LogCapture cap;
  // On a CUDA device (no device access is needed for float16).
  CHECK(resolve_precision(config(std::nullopt), kCuda0, true).amp);
  CHECK_FALSE(resolve_precision(config(std::nullopt), kCuda0, false).amp);
  CHECK(resolve_precision(config(true), kCuda0, false).amp);
  CHECK_FALSE(resolve_precision(config(false), kCuda0, true).amp);
  const Used u = resolve_precision(config(true, "float16"), kCuda0, false);
  CHECK(u.dtype == "float16");
  CHECK(u.scaler);
  CHECK(u.to_json() == nlohmann::json{{"amp", true}, {"dtype", "float16"}, {"grad_scaler", true}});
  const Used off = resolve_precision(config(false), kCuda0, true);
  CHECK(off.dtype == "float32");
  CHECK_FALSE(off.scaler);
  CHECK(cap.lines.empty());
  // A bad dtype is an error even when AMP ends up off: the config is wrong either way.
  CHECK_THROWS_AS(resolve_precision(config(false, "fp32"), kCpu, true), ConfigError);
}

TEST_CASE("resolve_precision on CPU falls back to float32 with exactly one log line") {
  LogCapture cap;
  const Used u = resolve_precision(config(true, "bfloat16"), kCpu, false);
  CHECK_FALSE(u.amp);
  CHECK(u.dtype == "float32");
  CHECK_FALSE(u.scaler);
  CHECK_FALSE(resolve_precision(config(std::nullopt), kCpu, true).amp);  // family default asks too
  REQUIRE(cap.lines.size() == 1);
  CHECK(cap.lines[0].find("cpu") != std::string::npos);
  CHECK(cap.lines[0].find("float32") != std::string::npos);
  cap.lines.clear();
  log::reset_once();
  resolve_precision(config(false), kCpu, true);  // AMP not asked for: nothing to say
  CHECK(cap.lines.empty());
}

// A CPU-only build reports no bfloat16 for any CUDA device; a CUDA build would need a device without it
// (pre-Ampere), so there it is skipped.
TEST_CASE("bfloat16 on a CUDA device without bfloat16 support is a SetupError naming the device" * doctest::skip(compat::with_cuda)) {
  try {
    resolve_precision(config(true, "bf16"), kCuda0, false);
    FAIL("no SetupError");
  } catch (const SetupError& e) {
    const std::string m = e.what();
    CHECK(m.find("cuda:0") != std::string::npos);
    CHECK(m.find("bfloat16") != std::string::npos);
  }
  Amp<at::kBFloat16> p;
  CHECK_THROWS_AS(p.setup(config(std::nullopt), kCuda0, true), SetupError);
  FamilyDefault f;
  CHECK_THROWS_AS(f.setup(config(std::nullopt, "bfloat16"), kCuda0, true), SetupError);
  CHECK_NOTHROW(f.setup(config(false, "bfloat16"), kCuda0, true));  // amp off: dtype unused
}

namespace {
struct Fp32Family {
  static constexpr libreyolo::Task task = libreyolo::Task::detect;
  struct traits : libreyolo::family_defaults {
    static constexpr bool amp_default = false;  // as D-FINE, DEIM, RT-DETRv4, YOLO-NAS, FOMO declare
  };
};
}  // namespace

TEST_CASE("family AMP defaults come from the family's traits") {
  static_assert(libreyolo::family_traits<libreyolo::ResNetFamily>::amp_default);
  static_assert(libreyolo::family_defaults::amp_default);
  static_assert(!libreyolo::family_traits<Fp32Family>::amp_default);
  // amp unset: the trait decides (on a CUDA device, where AMP applies); an explicit amp= wins.
  CHECK_FALSE(resolve_precision(config(std::nullopt), kCuda0, libreyolo::family_traits<Fp32Family>::amp_default).amp);
  CHECK(resolve_precision(config(std::nullopt), kCuda0, libreyolo::family_traits<libreyolo::ResNetFamily>::amp_default).amp);
  CHECK(resolve_precision(config(true), kCuda0, libreyolo::family_traits<Fp32Family>::amp_default).amp);
}

TEST_CASE("Amp and FamilyDefault on CPU behave as float32: no autocast, loss unscaled") {
  LogCapture cap;
  Amp<at::kHalf> a;
  a.setup(config(std::nullopt), kCpu, true);
  CHECK(a.used().to_json() == Used{}.to_json());
  CHECK_FALSE(a.autocast().active());
  CHECK_FALSE(a.scaler().enabled());
  FamilyDefault f;
  f.setup(config(true), kCpu, false);
  CHECK_FALSE(f.used().amp);
  CHECK_FALSE(f.autocast().active());
  const auto loss = torch::tensor(3.0f);
  CHECK(f.scale(loss).item<float>() == 3.0f);
  CHECK(cap.lines.size() == 1);  // one fallback line for both policies
}

TEST_CASE("Amp<kHalf> reports amp=false / another amp_dtype as ignored and resolves to float16 + scaler") {
  LogCapture cap;
  Amp<at::kHalf> a;
  a.setup(config(false, "bfloat16"), kCuda0, false);
  CHECK(a.used().amp);
  CHECK(a.used().dtype == "float16");
  CHECK(a.scaler().enabled());
  REQUIRE(cap.lines.size() == 2);
  CHECK(cap.lines[0].find("amp=false ignored") != std::string::npos);
  CHECK(cap.lines[1].find("amp_dtype=bfloat16 ignored") != std::string::npos);
}

TEST_CASE("FamilyDefault resolves the family default and the dtype; scaler only for float16") {
  FamilyDefault f;
  f.setup(config(std::nullopt, "fp16"), kCuda0, true);
  CHECK(f.used().amp);
  CHECK(f.used().dtype == "float16");
  CHECK(f.scaler().enabled());
  f.setup(config(std::nullopt, "fp16"), kCuda0, false);
  CHECK_FALSE(f.used().amp);
  CHECK_FALSE(f.scaler().enabled());
  if (lry_test::have_cuda() && compat::cuda_bf16_supported(0)) {
    f.setup(config(true, "bf16"), kCuda0, false);
    CHECK(f.used().dtype == "bfloat16");
    CHECK_FALSE(f.scaler().enabled());
  }
}

TEST_CASE("the autocast guard turns CUDA autocast on with its dtype and restores the previous state") {
  // The guard only sets thread-local autocast flags, so its bookkeeping is observable without a GPU.
  Amp<at::kHalf> a;
  a.setup(config(true), kCuda0, true);
  const bool was_enabled = compat::cuda_autocast_enabled();
  const at::ScalarType was_dtype = compat::cuda_autocast_dtype();
  REQUIRE(compat::autocast_cache_enabled());
  {
    auto g = a.autocast();
    CHECK(g.active());
    CHECK(compat::cuda_autocast_enabled());
    CHECK((compat::cuda_autocast_dtype() == at::kHalf));
    CHECK(compat::autocast_cache_enabled());
    {
      AutocastGuard inner(at::kBFloat16, true);  // nested region with another dtype
      CHECK((compat::cuda_autocast_dtype() == at::kBFloat16));
    }
    CHECK((compat::cuda_autocast_dtype() == at::kHalf));
    CHECK(compat::cuda_autocast_enabled());
  }
  CHECK(compat::cuda_autocast_enabled() == was_enabled);
  CHECK((compat::cuda_autocast_dtype() == was_dtype));
  a.set_capture_active(true);
  {
    auto g = a.autocast();
    CHECK_FALSE(compat::autocast_cache_enabled());  // capture: cached casts would be baked into graphs
  }
  CHECK(compat::autocast_cache_enabled());
  CHECK(compat::cuda_autocast_enabled() == was_enabled);
}

LRY_GPU_SUITE {
  TEST_CASE("conv output is float16 / bfloat16 under Amp autocast on CUDA, float32 outside") {
    LRY_REQUIRE_CUDA();
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3).padding(1));
    conv->to(kCuda0);
    const auto x = torch::randn({2, 3, 16, 16}, torch::TensorOptions().device(kCuda0));
    Amp<at::kHalf> h;
    h.setup(config(true), kCuda0, true);
    {
      auto g = h.autocast();
      CHECK((conv->forward(x).scalar_type() == at::kHalf));
    }
    CHECK((conv->forward(x).scalar_type() == at::kFloat));
    REQUIRE_MESSAGE(compat::cuda_bf16_supported(0), "cuda:0 has no bfloat16: this case needs an Ampere or newer GPU");
    Amp<at::kBFloat16> b;
    b.setup(config(true), kCuda0, true);
    {
      auto g = b.autocast();
      CHECK((conv->forward(x).scalar_type() == at::kBFloat16));
    }
    FamilyDefault f;
    f.setup(config(std::nullopt, "bf16"), kCuda0, true);
    f.set_capture_active(true);
    {
      auto g = f.autocast();
      CHECK((conv->forward(x).scalar_type() == at::kBFloat16));
    }
    CHECK((conv->forward(x).scalar_type() == at::kFloat));
  }
}
