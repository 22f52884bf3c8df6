// batch=-1: the search over powers of two, and the trainer's measuring step (Trainer::probe_memory).
#include "support.hpp"
#include "support_data.hpp"

#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include <libreyolo/train/autobatch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

// Last: c10 defines its own CHECK(cond) macro; doctest's must be the one in effect.
#include "support_doctest.hpp"

namespace ly = libreyolo;
using namespace libreyolo::train;
using ResNetTrainer = ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::Eager, ly::profile::Off>;

namespace {
// A fake device: each image costs `per_image` bytes on top of `fixed`; batches above `oom_from` fail.
struct FakeDevice {
  int64_t fixed = 0, per_image = 0;
  int oom_from = 1 << 30;
  std::vector<int> asked;
  std::optional<int64_t> operator()(int b) {
    asked.push_back(b);
    if (b >= oom_from) return std::nullopt;
    return fixed + per_image * b;
  }
};
}  // namespace

TEST_CASE("largest power of two at most n") {
  CHECK(largest_power_of_two_at_most(0) == 1);
  CHECK(largest_power_of_two_at_most(1) == 1);
  CHECK(largest_power_of_two_at_most(2) == 2);
  CHECK(largest_power_of_two_at_most(39) == 32);
  CHECK(largest_power_of_two_at_most(64) == 64);
  CHECK(largest_power_of_two_at_most(int64_t{1} << 40) == (1 << 30));
}

TEST_CASE("pick_batch: the largest power of two under 60% of the memory, stopping at the first that does not fit") {
  FakeDevice d{1000, 100};  // budget 0.6 * 10000 = 6000 bytes: 1000 + 100 b fits up to b = 50
  auto r = pick_batch(std::ref(d), 10000, 1 << 20);
  CHECK(r.batch == 32);
  CHECK_FALSE(r.none_fit);
  CHECK(r.budget_bytes == 6000);
  CHECK(d.asked == std::vector<int>{1, 2, 4, 8, 16, 32, 64});  // 64 (7400 bytes) is over: the search stops
  REQUIRE(r.trials.size() == 7);
  CHECK(*r.trials.back().peak_bytes == 7400);
}

TEST_CASE("pick_batch: exactly at the budget fits; one byte over does not") {
  FakeDevice d{0, 100};
  CHECK(pick_batch(std::ref(d), 1600, 1 << 20, 0.5).batch == 8);  // 800 == budget
  FakeDevice e{1, 100};
  CHECK(pick_batch(std::ref(e), 1600, 1 << 20, 0.5).batch == 4);  // 801 > budget
}

TEST_CASE("pick_batch: out of memory ends the search at the last batch that ran") {
  FakeDevice d{0, 1, 16};
  auto r = pick_batch(std::ref(d), int64_t{1} << 40, 1 << 20);
  CHECK(r.batch == 8);
  CHECK(d.asked == std::vector<int>{1, 2, 4, 8, 16});
  CHECK_FALSE(r.trials.back().peak_bytes.has_value());
}

TEST_CASE("pick_batch: never beyond the training set's size, never measures past it") {
  FakeDevice d{0, 1};
  auto r = pick_batch(std::ref(d), int64_t{1} << 40, 39);
  CHECK(r.batch == 32);
  CHECK(d.asked.back() == 32);
  FakeDevice one{0, 1};
  CHECK(pick_batch(std::ref(one), int64_t{1} << 40, 1).batch == 1);
  CHECK(one.asked == std::vector<int>{1});
}

TEST_CASE("pick_batch: when not even batch 1 fits, batch 1 and none_fit") {
  FakeDevice d{10000, 1};
  auto r = pick_batch(std::ref(d), 1000, 64);
  CHECK(r.none_fit);
  CHECK(r.batch == 1);
  CHECK(d.asked == std::vector<int>{1});
  FakeDevice oom{0, 1, 1};
  CHECK(pick_batch(std::ref(oom), 1000, 64).none_fit);
}

TEST_CASE("batch=-1 with more than one process is refused, naming the fix") {
  CHECK_NOTHROW(require_batch_for_world(-1, 1));
  CHECK_NOTHROW(require_batch_for_world(-1, 0));
  CHECK_NOTHROW(require_batch_for_world(32, 4));
  try {
    require_batch_for_world(-1, 4);
    FAIL("expected a ConfigError");
  } catch (const libreyolo::ConfigError& e) {
    const std::string m = e.what();
    CHECK(m.find("batch=-1") != std::string::npos);
    CHECK(m.find("4 processes") != std::string::npos);
    CHECK(m.find("batch=64") != std::string::npos);
  }
}

namespace {
std::vector<std::string> tiny_args(const std::filesystem::path& project, const std::string& name, const std::string& device) {
  return {"model=resnet18", "data=" + lry_test::tiny_classify_set().string(), "imgsz=32", "batch=-1", "nbs=64",
          "workers=2", "device=" + device, "epochs=1", "warmup_epochs=0", "project=" + project.string(), "name=" + name, "seed=3"};
}

// Parameters and buffers, copied.
std::vector<torch::Tensor> snapshot(ResNetTrainer& t) {
  std::vector<torch::Tensor> v;
  for (const auto& p : t.network()->parameters()) v.push_back(p.detach().clone());
  for (const auto& b : t.network()->buffers()) v.push_back(b.clone());
  return v;
}

struct Lines {
  std::vector<std::string> v;
  Lines() {
    ly::log::reset_once();
    ly::log::set_sink([this](ly::log::Level, std::string_view m) { v.emplace_back(m); });
  }
  ~Lines() { ly::log::set_sink(nullptr); }
  int count(const std::string& a, const std::string& b = "") const {
    int n = 0;
    for (const auto& l : v) n += l.find(a) != std::string::npos && l.find(b) != std::string::npos;
    return n;
  }
};
}  // namespace

TEST_CASE("batch=-1 on a CPU: one notice, batch 16, and accumulation follows from it") {
  lry_test::TempDir runs("lry_runs");
  Lines lines;
  ResNetTrainer t(ly::parse_args(tiny_args(runs.path, "auto", "cpu")));
  t.setup();
  CHECK(t.config().batch == 16);
  CHECK(t.accumulate() == 4);  // round(64 / 16), not from the unresolved -1
  CHECK(t.train_loader().options().batch == 16);
  CHECK(lines.count("batch=-1", "needs a CUDA device") == 1);
}

// Not autobatch, but the same tiny trainer set-up: the schedule's flat_epochs notice (trainer_impl.hpp).
TEST_CASE("flat_epochs under another scheduler: a notice when the user gave it, none when a recipe did") {
  lry_test::TempDir runs("lry_runs");
  {
    Lines lines;
    auto args = tiny_args(runs.path, "flat_user", "cpu");
    args.push_back("flat_epochs=5");
    ResNetTrainer t(ly::parse_args(args));
    t.setup();
    CHECK(lines.count("flat_epochs=5 is read by scheduler=deimv2_flat_cosine only") == 1);
  }
  {
    Lines lines;
    auto cfg = ly::parse_args(tiny_args(runs.path, "flat_recipe", "cpu"));
    cfg.flat_epochs = 5;  // as a family's size_overrides set it (DEIMv2), not an explicit key
    REQUIRE_FALSE(cfg.is_explicit("flat_epochs"));
    ResNetTrainer t(cfg);
    t.setup();
    CHECK(lines.count("flat_epochs") == 0);
  }
}

TEST_CASE("probe_memory runs a training step and leaves the network as it was") {
  lry_test::TempDir runs("lry_runs");
  auto args = tiny_args(runs.path, "probe", "cpu");
  args.push_back("batch=8");
  ResNetTrainer t(ly::parse_args(args));
  CHECK_THROWS_AS(t.probe_memory(4), ly::Error);  // before setup()
  t.setup();
  const auto before = snapshot(t);
  const auto peak = t.probe_memory(4);
  REQUIRE(peak.has_value());
  CHECK(*peak == 0);  // no device memory to measure on a CPU
  const auto after = snapshot(t);
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
  for (const auto& p : t.network()->parameters()) CHECK_FALSE(p.grad().defined());
  // Not vacuous: a training-mode forward does move BatchNorm's statistics.
  {
    torch::NoGradGuard g;
    t.network()->forward(torch::rand({4, 3, 32, 32}));
  }
  const auto moved = snapshot(t);
  bool any = false;
  for (size_t i = 0; i < before.size(); ++i) any = any || !torch::equal(before[i], moved[i]);
  CHECK(any);
  CHECK_THROWS_AS(t.probe_memory(0), ly::ConfigError);
}

LRY_GPU_SUITE {
  TEST_CASE("batch=-1 on CUDA: peaks measured per batch, a power of two within the training set") {
    LRY_REQUIRE_CUDA();
    lry_test::TempDir runs("lry_runs");
    Lines lines;
    ResNetTrainer t(ly::parse_args(tiny_args(runs.path, "auto_gpu", "cuda")));
    t.setup();
    // 39 training images: batches 1 ... 32 are measured, and at 32 px every one fits far under 60%.
    CHECK(t.config().batch == 32);
    CHECK(t.accumulate() == 2);
    for (int b : {1, 2, 4, 8, 16, 32}) CHECK(lines.count("batch=-1:   batch " + std::to_string(b) + ": peak") == 1);
    CHECK(lines.count("batch=-1: using batch=32") == 1);
    // The measure itself: a larger batch peaks higher, and the network comes back unchanged.
    const auto before = snapshot(t);
    const auto p1 = t.probe_memory(1), p8 = t.probe_memory(8), p32 = t.probe_memory(32);
    REQUIRE((p1 && p8 && p32));
    MESSAGE("peak bytes at batch 1 / 8 / 32: " << *p1 << " / " << *p8 << " / " << *p32);
    CHECK(*p1 > 0);
    CHECK(*p1 < *p8);
    CHECK(*p8 < *p32);
    const auto after = snapshot(t);
    for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
    // And it trains at that batch: 39 images -> one batch of 32 (the partial second dropped), one optimizer step
    // (accumulate 2: the epoch's window ends at its last batch).
    const auto r = t.fit();
    CHECK(r.epochs_done == 1);
    CHECK(t.iteration() == 1);
    CHECK(r.optimizer_steps == 1);
  }
}

// Not autobatch either: the training loader the trainer builds (trainer_impl.hpp) drops each epoch's last partial
// batch, as the originals' loaders do (data/dataset.py create_dataloader: drop_last when the split holds a batch;
// the D-FINE line's drop_last=True); a batch larger than the split trains it as one batch.
TEST_CASE("the training loader drops the last partial batch once the split holds a full batch") {
  lry_test::TempDir runs("lry_runs");
  const auto trainer_with = [&](int batch, const std::string& name) {
    auto args = tiny_args(runs.path, name, "cpu");
    args.push_back("batch=" + std::to_string(batch));
    auto t = std::make_unique<ResNetTrainer>(ly::parse_args(args));
    t->setup();
    return t;
  };
  const size_t n = trainer_with(4, "n")->train_loader().num_samples();
  REQUIRE(n >= 8);
  int b = 5;  // a batch that leaves a tail of at least two images, so the whole tail goes, not one image
  while (n % static_cast<size_t>(b) < 2) ++b;
  REQUIRE(static_cast<size_t>(b) <= n);
  auto t = trainer_with(b, "tail");
  CHECK(t->train_loader().options().drop_last);
  CHECK(t->train_loader().num_batches() == n / static_cast<size_t>(b));
  CHECK_FALSE(t->train_loader().drops_single());
  const auto big = trainer_with(static_cast<int>(n) + 3, "big");
  CHECK_FALSE(big->train_loader().options().drop_last);
  CHECK(big->train_loader().num_batches() == 1);
}
