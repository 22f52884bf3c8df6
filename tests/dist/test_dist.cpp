// Data-parallel training on c10d with Gloo (CPU): the environment, the distributed sampler, and real
// multi-process runs. The multi-process cases launch this test binary again as ranks
// (dist::launch_local re-executes /proc/self/exe) running the skipped "dist worker" case.
#include <libreyolo/dist/launch.hpp>
#include <libreyolo/families/resnet/family.hpp>
#include <libreyolo/libreyolo.hpp>

#include "support.hpp"
#include "support_data.hpp"

#include <chrono>
#include <fstream>
#include <numeric>
#include <set>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

namespace ly = libreyolo;
namespace fs = std::filesystem;

namespace {
struct EnvGuard {  // sets variables for this scope (the launched ranks inherit them)
  std::vector<std::string> names;
  void set(const std::string& k, const std::string& v) {
    ::setenv(k.c_str(), v.c_str(), 1);
    names.push_back(k);
  }
  ~EnvGuard() {
    for (auto& k : names) ::unsetenv(k.c_str());
  }
};

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}
int count_in(const std::vector<std::string>& lines, const std::string& needle) {
  int n = 0;
  for (const auto& l : lines) n += l.find(needle) != std::string::npos;
  return n;
}

ly::dist::LaunchResult launch_workers(const std::string& mode, const fs::path& out) {
  EnvGuard env;
  env.set("LRY_DIST_MODE", mode);
  env.set("LRY_DIST_OUT", out.string());
  return ly::dist::launch_local({"test_dist", "-q", "--no-skip", "--test-case=dist worker*"}, 2, std::chrono::seconds(5));
}

// Per-parameter sum and sum of squares (doubles, printed exactly): equal strings = equal parameters.
std::string param_digest(torch::nn::Module& m) {
  std::ostringstream o;
  o.precision(17);
  for (auto& p : m.parameters()) {
    auto d = p.detach().to(torch::kFloat64);
    o << d.sum().item<double>() << ',' << d.pow(2).sum().item<double>() << ';';
  }
  return o.str();
}
}  // namespace

TEST_CASE("dist env: torchrun variables, defaults and errors naming the variable") {
  {
    EnvGuard e;
    e.set("WORLD_SIZE", "4");
    e.set("RANK", "2");
    e.set("MASTER_ADDR", "10.0.0.1");
    e.set("MASTER_PORT", "1234");
    const auto env = ly::dist::env_from_environment();
    CHECK(env.world_size == 4);
    CHECK(env.rank == 2);
    CHECK(env.local_rank == 2);  // defaults to RANK
    CHECK(env.master_addr == "10.0.0.1");
    CHECK(env.master_port == 1234);
    CHECK(ly::dist::launched_distributed());
  }
  CHECK_FALSE(ly::dist::launched_distributed());
  {
    EnvGuard e;
    e.set("WORLD_SIZE", "2");
    e.set("RANK", "2");
    CHECK_THROWS_WITH_AS(ly::dist::env_from_environment(), doctest::Contains("RANK=2 is invalid; allowed: an integer in [0, 1]"),
                         ly::SetupError);
  }
  {
    EnvGuard e;
    e.set("WORLD_SIZE", "two");
    CHECK_THROWS_WITH_AS(ly::dist::env_from_environment(), doctest::Contains("WORLD_SIZE=two is invalid"), ly::SetupError);
  }
  {
    EnvGuard e;
    e.set("WORLD_SIZE", "2");
    CHECK_THROWS_WITH_AS(ly::dist::env_from_environment(), doctest::Contains("RANK is not set"), ly::SetupError);
  }
}

TEST_CASE("distributed sampler: each rank a disjoint share, every image once per epoch (padded by wrapping)") {
  std::vector<size_t> order(10);
  std::iota(order.begin(), order.end(), size_t{100});
  using L = ly::data::Loader<ly::data::ClassifyFolder>;
  const auto a = L::shard_order(order, 0, 2), b = L::shard_order(order, 1, 2);
  CHECK(a == std::vector<size_t>{100, 102, 104, 106, 108});
  CHECK(b == std::vector<size_t>{101, 103, 105, 107, 109});
  const auto c0 = L::shard_order(order, 0, 3), c2 = L::shard_order(order, 2, 3);
  CHECK(c0.size() == 4);
  CHECK(c2 == std::vector<size_t>{102, 105, 108, 101});  // position 11 wraps around to position 1
  // Through a loader: two ranks of the tiny set see the same epoch order split in two.
  ly::data::ClassifyAugment aug;
  aug.imgsz = 32, aug.train = false;
  auto ds = std::make_shared<const ly::data::ClassifyFolder>(ly::data::ClassifyFolder::open(lry_test::tiny_classify_set() / "train", aug));
  std::multiset<std::string> seen;
  size_t total = 0;
  for (int r = 0; r < 2; ++r) {
    ly::data::LoaderOptions o;
    o.batch = 4, o.workers = 0, o.seed = 3, o.rank = r, o.world = 2;
    L loader(ds, o);
    loader.start_epoch(1);
    CHECK(loader.num_batches() == ((ds->size() + 1) / 2 + 3) / 4);
    while (auto b = loader.next()) total += static_cast<size_t>(b->images.size(0));
  }
  // 39 training images: each rank takes 20, one image is seen twice (the padding by wrapping).
  CHECK(total == 2 * ((ds->size() + 1) / 2));
  ly::data::LoaderOptions bad;
  bad.rank = 2, bad.world = 2;
  CHECK_THROWS_WITH_AS(L(ds, bad), doctest::Contains("LoaderOptions.rank = 2 is invalid"), ly::ConfigError);
}

TEST_CASE("dist: two Gloo ranks train ResNet-18 with identical parameters after every step; fallbacks logged once" * doctest::skip(!LIBREYOLO_HAS_GLOO)) {
  lry_test::TempDir out("lry_dist_train");
  const auto r = launch_workers("train", out.path);
  REQUIRE_MESSAGE(r.failed_rank == -1, r.message);
  const auto a = read_lines(out / "rank0.digest"), b = read_lines(out / "rank1.digest");
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (size_t i = 0; i < a.size(); ++i) CHECK_MESSAGE(a[i] == b[i], "step " << i + 1);
  CHECK(a.front() != a.back());  // the parameters did move
  auto logs = read_lines(out / "rank0.log");
  const auto logs1 = read_lines(out / "rank1.log");
  logs.insert(logs.end(), logs1.begin(), logs1.end());
  CHECK(count_in(logs, "cuda_graph=true ignored (distributed); training runs eager.") == 1);
  CHECK(count_in(logs, "profile=true ignored (distributed)") == 1);
  CHECK(count_in(logs1, "libreyolo train:") == 0);  // only rank 0 logs
  CHECK(fs::exists(out / "runs" / "r" / "weights" / "last.ckpt"));  // written by rank 0
}

TEST_CASE("dist: averaged half-batch gradients equal the single-process gradient of the global batch" * doctest::skip(!LIBREYOLO_HAS_GLOO)) {
  lry_test::TempDir out("lry_dist_grad");
  const auto r = launch_workers("grad", out.path);
  REQUIRE_MESSAGE(r.failed_rank == -1, r.message);
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = read_lines(out / ("rank" + std::to_string(rank) + ".grad"));
    REQUIRE(lines.size() == 2);
    CHECK(std::stod(lines[0]) > 1e-3);  // a half batch alone gives a different gradient...
    CHECK(std::stod(lines[1]) < 1e-6);  // ...their average is the global one
  }
}

TEST_CASE("dist: a rank that fails stops the run with an error naming it, without hanging" * doctest::skip(!LIBREYOLO_HAS_GLOO)) {
  lry_test::TempDir out("lry_dist_fail");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = launch_workers("fail", out.path);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.failed_rank == 1);
  CHECK(r.exit_code != 0);
  CHECK(r.message.find("rank 1 failed") != std::string::npos);
  CHECK(secs < 120);  // rank 0 was blocked in an all-reduce: it was stopped, not waited for
}

// Runs only as a launched rank (--no-skip, LRY_DIST_MODE set by the cases above).
TEST_CASE("dist worker" * doctest::skip()) {
  const char* mode_env = std::getenv("LRY_DIST_MODE");
  REQUIRE(mode_env != nullptr);
  const std::string mode = mode_env;
  const fs::path out = std::getenv("LRY_DIST_OUT");
  const auto env = ly::dist::env_from_environment();
  const std::string tag = "rank" + std::to_string(env.rank);
  if (mode == "train") {
    std::ofstream log_file(out / (tag + ".log"));
    std::mutex mu;
    ly::log::set_sink([&](ly::log::Level, std::string_view m) {
      std::lock_guard<std::mutex> lk(mu);
      log_file << m << "\n" << std::flush;
    });
    auto cfg = ly::parse_args({"data=" + lry_test::tiny_classify_set().string(), "model=resnet18", "epochs=1", "imgsz=32",
                               "batch=8", "nbs=8", "workers=0", "device=cpu", "val=false", "max_steps=3",
                               "warmup_epochs=0", "project=" + (out / "runs").string(), "name=r", "exist_ok=true",
                               "cuda_graph=true", "profile=true"});
    using T = ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::CudaGraph<>, ly::profile::Window<>,
                          ly::capture::Mode::distributed>;
    static_assert(std::is_same_v<T::Capture, ly::capture::Eager>, "a distributed trainer captures nothing");
    static_assert(std::is_same_v<T::Profiler, ly::profile::Off>, "a distributed trainer profiles nothing");
    T t(cfg, ly::ResNetFamily("18"));
    std::ofstream digest(out / (tag + ".digest"));
    struct Digest {
      T* t;
      std::ofstream* f;
      void after_step(const ly::StepInfo&) { *f << param_digest(*t->network()) << "\n" << std::flush; }
    } cb{&t, &digest};
    const auto res = t.fit(cb);
    CHECK(res.optimizer_steps == 3);
    ly::log::set_sink(nullptr);
  } else if (mode == "grad") {
    ly::dist::Context ctx(env, torch::kCPU);
    torch::manual_seed(0);
    auto w1 = torch::randn({16, 8}, torch::requires_grad()), w2 = torch::randn({4, 16}, torch::requires_grad());
    const auto x = torch::randn({8, 8}), y = torch::randn({8, 4});
    auto loss_of = [&](const torch::Tensor& xs, const torch::Tensor& ys) {
      return torch::mse_loss(torch::tanh(xs.mm(w1.t())).mm(w2.t()), ys);
    };
    auto ref = torch::autograd::grad({loss_of(x, y)}, {w1, w2});
    loss_of(x.narrow(0, env.rank * 4, 4), y.narrow(0, env.rank * 4, 4)).backward();
    const double half_diff = (w1.grad() - ref[0]).abs().max().item<double>();
    ctx.average_gradients({w1, w2});
    const double diff = std::max((w1.grad() - ref[0]).abs().max().item<double>(), (w2.grad() - ref[1]).abs().max().item<double>());
    std::ofstream(out / (tag + ".grad")) << half_diff << "\n" << diff << "\n";
  } else if (mode == "fail") {
    ly::dist::Context ctx(env, torch::kCPU);
    if (env.rank == 1) FAIL("rank 1 fails on purpose");
    auto w = torch::zeros({4}, torch::requires_grad());
    w.mutable_grad() = torch::ones({4});
    try {
      ctx.average_gradients({w});  // blocks: rank 1 never joins this all-reduce
    } catch (const ly::dist::PeerLost&) {
      std::_Exit(ly::dist::peer_lost_exit_code);  // what the CLI does with it
    }
  } else {
    FAIL("unknown LRY_DIST_MODE " << mode);
  }
}
