// End-to-end trainer tests on a tiny generated classification set (CPU).
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include "support_extern.hpp"

#include "support.hpp"
#include "support_data.hpp"

#include <fstream>

namespace ly = libreyolo;
using ResNetTrainer = ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::Eager, ly::profile::Off>;

namespace {

const std::filesystem::path& tiny_set() { return lry_test::tiny_classify_set(); }

std::vector<std::string> base_args(const std::filesystem::path& project, const std::string& name) {
  return {"model=resnet18", "data=" + tiny_set().string(), "imgsz=32", "batch=8", "nbs=8", "workers=2",
          "device=cpu", "warmup_epochs=0", "lr0=0.01", "project=" + project.string(), "name=" + name, "seed=3"};
}

std::map<std::string, torch::Tensor> weights_of(const std::filesystem::path& ckpt) {
  auto ck = ly::train::load_checkpoint(ckpt);
  std::map<std::string, torch::Tensor> w;
  for (auto& [k, v] : ck.tensors)
    if (k.rfind("model.", 0) == 0 || k.rfind("ema.", 0) == 0) w[k] = v;
  return w;
}

// A weights= run's setup from checkpoint `ck` (saved under runs/<name>.ckpt): the CheckpointError's message,
// or "" when it loads.
std::string weights_error(const lry_test::TempDir& runs, const ly::train::Checkpoint& ck, const std::string& name) {
  const auto path = runs.path / (name + ".ckpt");
  ly::train::save_checkpoint(ck, path);
  auto args = base_args(runs.path, name);
  args.push_back("weights=" + path.string());
  try {
    ResNetTrainer(ly::parse_args(args)).setup();
  } catch (const ly::CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("ResNet-18 trains end to end: loss falls, results and checkpoints are written") {
  lry_test::TempDir runs("lry_runs");
  auto args = base_args(runs.path, "t1");
  args.push_back("epochs=4");
  ResNetTrainer t(ly::parse_args(args));
  auto r = t.fit();
  CHECK(r.epochs_done == 4);
  CHECK(r.optimizer_steps == 4 * 4);  // 39 train images / batch 8 -> 4 batches (the partial fifth dropped), accumulate 1
  auto dir = runs.path / "t1";
  CHECK(r.run_dir == dir);
  REQUIRE(std::filesystem::exists(dir / "results.csv"));
  REQUIRE(std::filesystem::exists(dir / "results.json"));
  CHECK(std::filesystem::exists(dir / "weights" / "last.ckpt"));
  CHECK(std::filesystem::exists(dir / "weights" / "best.ckpt"));
  std::ifstream f(dir / "results.json");
  auto j = nlohmann::json::parse(f);
  REQUIRE(j["epochs"].size() == 4);
  double first = j["epochs"][0]["train/loss"], last = j["epochs"][3]["train/loss"];
  CHECK(last < first);
  CHECK(j["epochs"][3].contains("val/top1"));
  CHECK(j["precision"]["dtype"] == "float32");
  CHECK(j["capture"]["cuda_graph"] == false);
  CHECK(j["meta"]["model"] == "resnet18");
  std::ifstream csv(dir / "results.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header.find("train/loss") != std::string::npos);
  int rows = 0;
  for (std::string line; std::getline(csv, line);) rows += !line.empty();
  CHECK(rows == 4);
}

TEST_CASE("resume=true after a mid-epoch stop reaches the same end state as an uninterrupted run") {
  lry_test::TempDir runs("lry_runs");
  auto full = base_args(runs.path, "full");
  full.push_back("epochs=3");
  ResNetTrainer(ly::parse_args(full)).fit();

  auto part = base_args(runs.path, "part");
  part.push_back("epochs=3");
  part.push_back("max_steps=7");  // stops inside epoch 2 (4 steps per epoch)
  auto r1 = ResNetTrainer(ly::parse_args(part)).fit();
  CHECK(r1.optimizer_steps == 7);
  CHECK(r1.epochs_done == 1);
  auto resumed = base_args(runs.path, "part");
  resumed.push_back("resume=true");
  resumed.push_back("max_steps=0");
  auto r2 = ResNetTrainer(ly::parse_args(resumed)).fit();
  CHECK(r2.optimizer_steps == 12);
  CHECK(r2.epochs_done == 3);

  auto a = weights_of(runs.path / "full" / "weights" / "last.ckpt");
  auto b = weights_of(runs.path / "part" / "weights" / "last.ckpt");
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() > 10);
  double worst = 0;
  for (auto& [k, v] : a) {
    REQUIRE(b.count(k));
    if (v.is_floating_point()) worst = std::max(worst, (v - b[k]).abs().max().item<double>());
    else CHECK(torch::equal(v, b[k]));
  }
  CHECK(worst <= 1e-6);
  std::ifstream f(runs.path / "part" / "results.json");
  CHECK(nlohmann::json::parse(f)["epochs"].size() == 3);
}

TEST_CASE("an existing run directory is never overwritten unless exist_ok") {
  lry_test::TempDir runs("lry_runs");
  auto args = base_args(runs.path, "same");
  args.push_back("epochs=1");
  args.push_back("max_steps=1");
  CHECK(ResNetTrainer(ly::parse_args(args)).fit().run_dir == runs.path / "same");
  CHECK(ResNetTrainer(ly::parse_args(args)).fit().run_dir == runs.path / "same2");
  args.push_back("exist_ok=true");
  CHECK(ResNetTrainer(ly::parse_args(args)).fit().run_dir == runs.path / "same");
  auto missing = base_args(runs.path, "nothing-here");
  missing.push_back("resume=true");
  CHECK_THROWS_AS(ResNetTrainer(ly::parse_args(missing)).fit(), ly::SetupError);
}

TEST_CASE("accumulation windows: counted within the epoch, the last one shorter, none crossing the epoch's end") {
  using ly::train::accumulation_window;
  auto check = [](int64_t i, int64_t nb, int64_t acc, int64_t length, bool first, bool last) {
    const auto w = accumulation_window(i, nb, acc);
    CAPTURE(i);
    CAPTURE(nb);
    CAPTURE(acc);
    CHECK(w.length == length);
    CHECK(w.first == first);
    CHECK(w.last == last);
  };
  // 5 micro-batches, accumulate 3: windows {0, 1, 2} and {3, 4}.
  check(0, 5, 3, 3, true, false);
  check(1, 5, 3, 3, false, false);
  check(2, 5, 3, 3, false, true);
  check(3, 5, 3, 2, true, false);
  check(4, 5, 3, 2, false, true);
  // accumulate 4 over an epoch of 2: one window of 2.
  check(0, 2, 4, 2, true, false);
  check(1, 2, 4, 2, false, true);
  // accumulate 4 over 8: two full windows.
  check(3, 8, 4, 4, false, true);
  check(4, 8, 4, 4, true, false);
  // No accumulation: every micro-batch is its own window.
  for (int64_t i = 0; i < 3; ++i) check(i, 3, 1, 1, true, true);
}

TEST_CASE("gradient accumulation: one optimizer step per round(nbs / batch) micro-batches, windows within each epoch") {
  lry_test::TempDir runs("lry_runs");
  auto args = base_args(runs.path, "acc");
  args.push_back("epochs=2");
  args.push_back("nbs=24");  // accumulate 3 over 4 batches per epoch: steps after batches 3, 4 | 7, 8
  ResNetTrainer t(ly::parse_args(args));
  auto r = t.fit();
  CHECK(t.accumulate() == 3);
  CHECK(t.iteration() == 8);
  CHECK(r.optimizer_steps == 4);
}

namespace {
// The gradients after the run's first micro-batch (before any optimizer step).
struct FirstGrads {
  ResNetTrainer* t = nullptr;
  std::vector<torch::Tensor>* out = nullptr;
  void operator()(ly::event::step_end, const ly::StepInfo& s) {
    if (s.iteration != 1) return;
    for (auto& p : t->network()->parameters()) out->push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  }
};
std::vector<torch::Tensor> first_grads(const std::filesystem::path& project, const std::string& name, const std::string& nbs) {
  auto args = base_args(project, name);
  args.insert(args.end(), {"epochs=1", "max_steps=1", "weight_decay=0", nbs});
  ResNetTrainer t(ly::parse_args(args));
  std::vector<torch::Tensor> g;
  t.fit(FirstGrads{&t, &g});
  return g;
}
}  // namespace

TEST_CASE("gradient accumulation divides each micro-batch's loss by its window's length, as the original does") {
  lry_test::TempDir runs("lry_runs");
  // The same first micro-batch (same seed, same weights): accumulate 3 leaves g / 3 in the gradients,
  // accumulate 2 leaves g / 2.
  const auto g3 = first_grads(runs.path, "a3", "nbs=24"), g2 = first_grads(runs.path, "a2", "nbs=16");
  REQUIRE(g3.size() == g2.size());
  REQUIRE(!g3.empty());
  size_t nonzero = 0;
  for (size_t i = 0; i < g3.size(); ++i) {
    REQUIRE(g3[i].defined() == g2[i].defined());
    if (!g3[i].defined()) continue;
    CAPTURE(i);
    // Equal to float32 rounding of the backward's products, relative to the tensor's largest gradient (the
    // undivided loss would leave 3g against 2g: a difference of g).
    const double scale = (g2[i] * 2).abs().max().item<double>();
    CHECK((g3[i] * 3 - g2[i] * 2).abs().max().item<double>() <= 1e-5 * scale);
    nonzero += scale > 0;
  }
  // ResNet's zero-initialised residual BatchNorm weights leave the branches' convolutions without gradient at
  // the first step; the stem, the shortcuts, the BatchNorm parameters and the classifier have one.
  CHECK(nonzero >= 20);
}

TEST_CASE("weights= loads a checkpoint of the same family and rejects another family") {
  lry_test::TempDir runs("lry_runs");
  auto args = base_args(runs.path, "src");
  args.push_back("epochs=1");
  auto r = ResNetTrainer(ly::parse_args(args)).fit();
  auto ckpt = r.run_dir / "weights" / "last.ckpt";

  auto ft = base_args(runs.path, "ft");
  ft.push_back("epochs=1");
  ft.push_back("max_steps=1");
  ft.push_back("weights=" + ckpt.string());
  ResNetTrainer t(ly::parse_args(ft));
  t.setup();
  auto src = ly::train::load_checkpoint(ckpt);
  auto w = t.network()->named_parameters()["fc.weight"];
  CHECK(torch::equal(w, src.tensors.at("ema.fc.weight")));

  auto other = src;
  other.meta["family_name"] = "yolo9";
  const auto m = weights_error(runs, other, "other");
  CHECK(m.find("yolo9") != std::string::npos);
  CHECK(m.find("resnet") != std::string::npos);
}

TEST_CASE("weights= of another class count: the class-dependent tensors keep their initialisation, the rest load (the original's _rebuild_for_new_classes)") {
  lry_test::TempDir runs("lry_runs");
  auto args = base_args(runs.path, "src");
  args.push_back("epochs=1");
  auto r = ResNetTrainer(ly::parse_args(args)).fit();
  auto src = ly::train::load_checkpoint(r.run_dir / "weights" / "last.ckpt");
  // The same network trained on a data set of 2 more classes: its fc rows differ, everything else is shared.
  auto wider = src;
  const int64_t nc = src.tensors.at("ema.fc.weight").size(0);
  for (const char* k : {"model.fc.weight", "model.fc.bias", "ema.fc.weight", "ema.fc.bias"}) {
    const auto& t = src.tensors.at(k);
    wider.tensors[k] = torch::cat({t, t.narrow(0, 0, 2) + 1}, 0);
  }
  wider.meta["family"]["nc"] = nc + 2;
  ly::train::save_checkpoint(wider, runs.path / "wider.ckpt");

  auto ft = base_args(runs.path, "ft");
  ft.push_back("epochs=1");
  ft.push_back("weights=" + (runs.path / "wider.ckpt").string());
  ResNetTrainer t(ly::parse_args(ft));
  t.setup();
  auto p = t.network()->named_parameters();
  CHECK(torch::equal(p["conv1.weight"], wider.tensors.at("ema.conv1.weight")));
  CHECK(torch::equal(p["layer4.1.bn2.weight"], wider.tensors.at("ema.layer4.1.bn2.weight")));
  CHECK(torch::equal(t.network()->named_buffers()["bn1.running_var"], wider.tensors.at("ema.bn1.running_var")));
  REQUIRE(p["fc.weight"].size(0) == nc);
  // The head is this network's own initialisation: not any rows of the checkpoint's.
  CHECK_FALSE(torch::equal(p["fc.weight"], wider.tensors.at("ema.fc.weight").narrow(0, 0, nc)));
  ResNetTrainer fresh(ly::parse_args(base_args(runs.path, "fresh")));
  fresh.setup();
  CHECK(torch::equal(p["fc.weight"], fresh.network()->named_parameters()["fc.weight"]));  // same seed, same init
  CHECK(t.fit().epochs_done == 1);

  // Another width is still refused: not a class-count difference.
  auto other = src;
  other.tensors["ema.conv1.weight"] = torch::zeros({32, 3, 7, 7});
  other.tensors["model.conv1.weight"] = torch::zeros({32, 3, 7, 7});
  CHECK(weights_error(runs, other, "other").find("the model size differs") != std::string::npos);
}

TEST_CASE("a trainer's cuDNN flags are the process's while it lives and are put back when it goes") {
  lry_test::TempDir runs("lry_runs");
  auto& ctx = at::globalContext();
  const bool bench0 = ctx.benchmarkCuDNN(), det0 = ctx.deterministicCuDNN();
  ctx.setBenchmarkCuDNN(true);
  ctx.setDeterministicCuDNN(false);
  {
    auto args = base_args(runs.path, "det");
    args.insert(args.end(), {"epochs=1", "max_steps=1", "deterministic=true"});
    ResNetTrainer t(ly::parse_args(args));
    t.setup();
    CHECK(ctx.deterministicCuDNN());
    CHECK_FALSE(ctx.benchmarkCuDNN());
  }
  CHECK_FALSE(ctx.deterministicCuDNN());
  CHECK(ctx.benchmarkCuDNN());
  ctx.setBenchmarkCuDNN(bench0);
  ctx.setDeterministicCuDNN(det0);
}

TEST_CASE("unknown model names list what is available") {
  try {
    ly::Model m("resnet152");
    FAIL("expected a ConfigError");
  } catch (const ly::ConfigError& e) {
    std::string m = e.what();
    CHECK(m.find("resnet152") != std::string::npos);
    CHECK(m.find("resnet18") != std::string::npos);
  }
}

TEST_CASE("Model::train returns the run's result intact through the family dispatch") {
  lry_test::TempDir runs("lry_runs");
  auto args = base_args(runs.path, "facade");
  args.push_back("epochs=1");
  auto r = ly::Model("resnet18").train(ly::parse_args(args));
  CHECK(r.run_dir == runs.path / "facade");
  CHECK(r.epochs_done == 1);
  REQUIRE(r.last_metrics.contains("top1"));
  CHECK(r.last_metrics["top1"].is_number());
  CHECK(r.best_fitness == doctest::Approx(r.last_metrics["top1"].get<double>()));
}

TEST_CASE("ema_restart_decay on a family without an EMA restart is named as not applying, once") {
  lry_test::TempDir runs("lry_runs");
  std::vector<std::string> lines;
  auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines.emplace_back(m); });
  for (int i = 0; i < 2; ++i) {
    auto args = base_args(runs.path, "restart" + std::to_string(i));
    args.push_back("ema_restart_decay=0.99");
    ResNetTrainer(ly::parse_args(args)).setup();
  }
  ly::log::set_sink(prev);
  int n = 0;
  for (const auto& l : lines) n += l.find("ema_restart_decay=0.99 ignored: resnet has no EMA restart") != std::string::npos;
  CHECK(n == 1);
  static_assert(!ly::member::declares<ly::ResNetFamily, ly::member::ema_restart>);
  static_assert(ly::member::declares<ly::DFineFamily, ly::member::ema_restart>);
}

TEST_CASE("train_resize / val_resize set for a model that is not a detector are refused, naming the key and the task") {
  lry_test::TempDir runs("lry_runs");
  for (const std::string key : {"train_resize=stretch", "val_resize=letterbox"}) {
    auto args = base_args(runs.path, "resize");
    args.push_back(key);
    try {
      (void)ly::Model("resnet18").train(ly::parse_args(args));
      FAIL("expected a ConfigError for " << key);
    } catch (const ly::ConfigError& e) {
      const std::string m = e.what();
      CHECK(m.find(key) == 0);
      CHECK(m.find("classify") != std::string::npos);
      CHECK(m.find("detection") != std::string::npos);
    }
  }
}
