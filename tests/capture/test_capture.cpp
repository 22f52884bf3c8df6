// CUDA-graph capture policy, the parts that run on the CPU: static resolution, the single notice,
// shape counting, the graphed callable's CPU helpers, and the run-time fallback / invalidation through
// the real Trainer on a tiny synthetic classification set.
#include <doctest/doctest.h>
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"
#include "support_data.hpp"

#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

namespace ly = libreyolo;
namespace cap = ly::capture;

namespace {
struct NotCapturable {
  static constexpr ly::Task task = ly::Task::detect;
  struct traits : ly::family_defaults {};  // capture_region = none
};

// Collects log lines while alive.
struct LogCapture {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> prev;
  LogCapture() { prev = ly::log::set_sink([this](ly::log::Level, std::string_view m) { lines.emplace_back(m); }); }
  ~LogCapture() { ly::log::set_sink(prev); }
  int count_prefix(const std::string& p) const {
    int n = 0;
    for (auto& l : lines) n += l.rfind(p, 0) == 0;
    return n;
  }
};

const std::filesystem::path& tiny_set() { return lry_test::tiny_classify_set(); }

ly::TrainConfig tiny_cfg(const std::filesystem::path& project, const std::string& name, int epochs) {
  return ly::parse_args({"model=resnet18", "data=" + tiny_set().string(), "imgsz=32", "batch=8", "nbs=8", "workers=2",
                         "device=cpu", "warmup_epochs=0", "lr0=0.01", "project=" + project.string(), "name=" + name,
                         "seed=3", "cuda_graph=true", "val=false", "epochs=" + std::to_string(epochs)});
}

nlohmann::json results_of(const std::filesystem::path& dir) {
  std::ifstream f(dir / "results.json");
  return nlohmann::json::parse(f);
}

// A family whose loss gains an extra branch from the second epoch on (as YOLOX's L1 branch does when
// mosaic closes); it tells the capture policy so.
struct ToggleFamily : ly::ResNetFamily {
  static constexpr std::string_view name = "toggle_resnet";
  ToggleFamily() : ly::ResNetFamily("18") {}
  struct traits : ly::ResNetFamily::traits {
    using members = ly::member::list<ly::member::epoch_hook>;
  };
  bool extra = false;
  template <class Capture>
  void on(ly::event::epoch_begin, const ly::EpochInfo& info, const ly::TrainConfig&, ly::train::EpochContext<Capture>& ctx) {
    if (info.epoch == 1 && !extra) {
      extra = true;
      ctx.capture.invalidate("extra branch on");
    }
  }
  ly::train::LossOutput loss(const torch::Tensor& logits, const Batch& b) const {
    auto base = ly::ResNetFamily::loss(logits, b);
    if (!extra) return base;
    auto total = base.total + 0.1 * logits.to(torch::kFloat32).abs().mean();
    return {total, total.detach().reshape({1})};
  }
};
}  // namespace

// ---- static resolution -------------------------------------------------------------------------
static_assert(cap::CapturePolicy<cap::CudaGraph<>>);
static_assert(cap::CapturePolicy<cap::CudaGraph<cap::scope::network, 5>>);
static_assert(cap::CudaGraph<>::graphs && !cap::Eager::graphs);
static_assert(std::is_same_v<cap::resolve_t<ly::ResNetFamily, cap::CudaGraph<>>, cap::CudaGraph<>>);
static_assert(std::is_same_v<cap::resolve_t<ly::Yolo9Family, cap::CudaGraph<cap::scope::network, 4>>, cap::CudaGraph<cap::scope::network, 4>>);
static_assert(std::is_same_v<cap::resolve_t<NotCapturable, cap::CudaGraph<>>, cap::Eager>);
static_assert(std::is_same_v<cap::resolve_t<ly::ResNetFamily, cap::CudaGraph<>, cap::Mode::distributed>, cap::Eager>);
static_assert(std::is_same_v<cap::resolve_t<ly::Yolo9Family, cap::CudaGraph<>, cap::Mode::distillation>, cap::Eager>);
static_assert(std::is_same_v<ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, cap::CudaGraph<>>::Capture,
                             cap::CudaGraph<>>);
static_assert(std::is_same_v<ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, cap::CudaGraph<>, ly::profile::Off,
                                         cap::Mode::distributed>::Capture,
                             cap::Eager>);

TEST_CASE("a static downgrade of CudaGraph prints its notice exactly once per combination") {
  LogCapture log;
  using R = cap::resolve<NotCapturable, cap::CudaGraph<cap::scope::network, 7>>;
  R::notice();
  R::notice();
  cap::resolve<ly::Yolo9Family, cap::CudaGraph<cap::scope::network, 7>, cap::Mode::distillation>::notice();
  cap::resolve<ly::Yolo9Family, cap::CudaGraph<cap::scope::network, 7>, cap::Mode::distillation>::notice();
  cap::resolve<ly::ResNetFamily, cap::CudaGraph<cap::scope::network, 7>>::notice();  // not downgraded: silent
  REQUIRE(log.lines.size() == 2);
  CHECK(log.lines[0] == "cuda_graph=true ignored (family not capturable); training runs eager.");
  CHECK(log.lines[1] == "cuda_graph=true ignored (distillation); training runs eager.");
}

TEST_CASE("a static downgrade names what was asked: cuda_graph=step, once per combination") {
  LogCapture log;
  const auto step = ly::parse_args({"cuda_graph=step"});
  using R = cap::resolve<NotCapturable, cap::CudaGraph<cap::scope::network, 5>>;
  R::notice(step);
  R::notice(step);
  R::notice(ly::parse_args({"cuda_graph=true"}));  // another request: its own notice
  cap::resolve<ly::Yolo9Family, cap::CudaGraph<cap::scope::network, 5>, cap::Mode::distributed>::notice(step);
  cap::resolve<ly::ResNetFamily, cap::CudaGraph<cap::scope::step, 5>>::notice(step);  // not downgraded: silent
  REQUIRE(log.lines.size() == 3);
  CHECK(log.lines[0] == "cuda_graph=step ignored (family not capturable); training runs eager.");
  CHECK(log.lines[1] == "cuda_graph=true ignored (family not capturable); training runs eager.");
  CHECK(log.lines[2] == "cuda_graph=step ignored (distributed); training runs eager.");
  CHECK(cap::requested_graphs(step) == "cuda_graph=step");
  CHECK(cap::requested_graphs(ly::parse_args({"cuda_graph=true"})) == "cuda_graph=true");
}

// ---- shape counting ----------------------------------------------------------------------------
TEST_CASE("ShapeCounter fires on the threshold-th sighting of a key, per key") {
  cap::ShapeCounter c(3);
  auto a = torch::zeros({8, 3, 64, 64});
  auto b = torch::zeros({7, 3, 64, 64});
  CHECK_FALSE(c.count(a));
  CHECK_FALSE(c.count(b));
  CHECK_FALSE(c.count(a));
  CHECK(c.count(a));        // third [8,3,64,64]
  CHECK_FALSE(c.count(a));  // fourth: already past the threshold
  CHECK_FALSE(c.count(b));
  CHECK(c.count(b));  // third [7,3,64,64]
  CHECK(c.seen(cap::ShapeKey::of(a)) == 4);
  CHECK(c.seen(cap::ShapeKey::of(b)) == 3);
  CHECK(c.distinct() == 2);
  CHECK(cap::ShapeKey::of(torch::zeros({8, 3, 640, 640})).shape_string() == "[8, 3, 640, 640]");

  SUBCASE("dtype and device are part of the key") {
    auto half = torch::zeros({8, 3, 64, 64}, torch::kHalf);
    CHECK(c.seen(cap::ShapeKey::of(half)) == 0);
    CHECK_FALSE(c.count(half));
    auto k = cap::ShapeKey::of(a);
    auto on_gpu = k;
    on_gpu.device_type = c10::DeviceType::CUDA;
    on_gpu.device_index = 0;
    auto on_gpu1 = on_gpu;
    on_gpu1.device_index = 1;
    CHECK_FALSE(k == on_gpu);
    CHECK_FALSE(on_gpu == on_gpu1);
    CHECK(c.seen(on_gpu) == 0);
    CHECK_FALSE(c.count(on_gpu));
    CHECK(c.distinct() == 4);
  }
  SUBCASE("reset forgets every count; the threshold-th sighting fires again") {
    c.reset();
    CHECK(c.distinct() == 0);
    CHECK(c.seen(cap::ShapeKey::of(a)) == 0);
    CHECK_FALSE(c.count(a));
    CHECK_FALSE(c.count(a));
    CHECK(c.count(a));
  }
  SUBCASE("threshold 1 captures on the first sighting; below 1 is an error naming the key") {
    cap::ShapeCounter once(1);
    CHECK(once.count(a));
    CHECK_FALSE(once.count(a));
    CHECK_THROWS_WITH_AS(cap::ShapeCounter(0), doctest::Contains("cuda_graph_warmup=0"), ly::ConfigError);
  }
}

// ---- CPU helpers of the graphed callable -------------------------------------------------------
TEST_CASE("output codec, BatchNorm buffer snapshot, randomness detection") {
  auto t = torch::arange(6.0);
  CHECK(cap::OutputCodec<torch::Tensor>::unflatten(cap::OutputCodec<torch::Tensor>::flatten(t)).equal(t));
  std::vector<torch::Tensor> v{torch::ones({2}), torch::zeros({3})};
  auto back = cap::OutputCodec<std::vector<torch::Tensor>>::unflatten(cap::OutputCodec<std::vector<torch::Tensor>>::flatten(v));
  REQUIRE(back.size() == 2);
  CHECK(back[1].equal(v[1]));
  CHECK_THROWS_AS(cap::OutputCodec<torch::Tensor>::unflatten(v), ly::Error);

  torch::nn::BatchNorm2d bn(3);
  bn->train();
  auto mean0 = bn->running_mean.clone();
  cap::BufferSnapshot snap(*bn);
  CHECK(snap.size() == 3);  // running_mean, running_var, num_batches_tracked
  bn->forward(torch::randn({4, 3, 5, 5}) + 2.0);
  CHECK_FALSE(bn->running_mean.equal(mean0));
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  snap.restore();
  CHECK(bn->running_mean.equal(mean0));
  CHECK(bn->running_var.equal(torch::ones({3})));
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);

  torch::nn::Sequential seq(torch::nn::Linear(4, 4), torch::nn::Dropout(0.2), torch::nn::Dropout(0.0));
  seq->train();
  auto names = cap::random_training_modules(*seq);
  REQUIRE(names.size() == 1);
  CHECK(names[0] == "net.1");
  seq->eval();
  CHECK(cap::random_training_modules(*seq).empty());
}

// ---- run-time fallback and invalidation through the trainer ------------------------------------
TEST_CASE("CudaGraph on a CPU device: one fallback line, eager training identical to Eager, report says why") {
  lry_test::TempDir runs("lry_capture_runs");
  LogCapture log;
  ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, cap::CudaGraph<>> graph_t(tiny_cfg(runs.path, "graph", 1));
  graph_t.fit();
  ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, cap::Eager> eager_t(tiny_cfg(runs.path, "eager", 1));
  eager_t.fit();

  CHECK(log.count_prefix(cap::CudaGraph<>::fallback_prefix) == 1);
  CHECK(log.count_prefix("cuda_graph: captured") == 0);
  const std::string expected_reason =
      ly::compat::with_cuda ? "device cpu is not a CUDA device" : "this build has no CUDA support (LIBREYOLO_WITH_CUDA is off)";
  CHECK(log.count_prefix(std::string(cap::CudaGraph<>::fallback_prefix) + expected_reason) == 1);

  auto g = results_of(runs.path / "graph"), e = results_of(runs.path / "eager");
  const auto& rep = g["capture"];
  CHECK(rep["cuda_graph"] == false);
  CHECK(rep["fallback_reason"] == expected_reason);
  CHECK(rep["eager_steps"] == 4);  // 39 training images / batch 8: 4 full batches, the partial fifth dropped
  CHECK(rep["replayed_steps"] == 0);
  CHECK(rep["captures"] == 0);
  CHECK(rep["capture_shape"].is_null());
  CHECK(rep["threshold"] == 3);
  CHECK(g["epochs"][0]["train/loss"].get<double>() == e["epochs"][0]["train/loss"].get<double>());
  // Shapes were still counted: the 4 full batches, one shape.
  const auto& counter = graph_t.capture().shape_counter();
  CHECK(counter.distinct() == 1);
  CHECK(counter.seen(cap::ShapeKey::of(torch::zeros({8, 3, 32, 32}))) == 4);
  CHECK(counter.seen(cap::ShapeKey::of(torch::zeros({7, 3, 32, 32}))) == 0);
}

TEST_CASE("cuda_graph_warmup overrides the threshold; a threshold below 1 is rejected") {
  cap::CudaGraph<> c;
  auto cfg = ly::parse_args({"cuda_graph=true", "cuda_graph_warmup=5", "device=cpu"});
  LogCapture log;
  c.setup(cfg, torch::kCPU);
  CHECK(c.shape_counter().threshold() == 5);
  CHECK_FALSE(c.enabled());
  cap::CudaGraph<cap::scope::network, 2> d;
  d.setup(ly::parse_args({"cuda_graph=false"}), torch::kCPU);
  CHECK(d.shape_counter().threshold() == 2);  // not given explicitly: the template's threshold
  CHECK(d.fallback_reason() == std::optional<std::string>("cuda_graph=false"));
  cap::CudaGraph<> bad;
  auto zero = cfg;
  zero.cuda_graph_warmup = 0;
  CHECK_THROWS_AS(bad.setup(zero, torch::kCPU), ly::ConfigError);
}

TEST_CASE("invalidate: a family toggling a branch resets the counts; no re-capture line while capture is disabled") {
  lry_test::TempDir runs("lry_capture_runs");
  LogCapture log;
  ly::Trainer<ToggleFamily, ly::precision::Fp32, cap::CudaGraph<>> t(tiny_cfg(runs.path, "toggle", 2));
  t.fit();
  // On the CPU capture is disabled: the message would promise a re-capture that never happens.
  CHECK(log.count_prefix("cuda_graph: capture invalidated") == 0);
  CHECK(t.capture().invalidations() == 1);
  CHECK(t.family().extra);
  // Counts restart at the invalidation: only the second epoch's 4 full batches remain counted.
  CHECK(t.capture().shape_counter().seen(cap::ShapeKey::of(torch::zeros({8, 3, 32, 32}))) == 4);
  CHECK(t.capture().eager_steps() == 8);
  auto rep = results_of(runs.path / "toggle")["capture"];
  CHECK(rep["invalidations"] == 1);
  CHECK(rep["eager_steps"] == 8);
}
