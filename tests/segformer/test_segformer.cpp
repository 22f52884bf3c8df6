// SegFormer: the original's architecture (parameter counts, state-dict names), its drop-path schedule and
// the capture layer's detection of it (one notice), the recipe's parameter groups, and on a GPU a graph
// run that stays statistically equivalent to eager.
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace sf = libreyolo::segformer;

namespace {

int64_t n_params(torch::nn::Module& m) {
  int64_t n = 0;
  for (auto& p : m.parameters()) n += p.numel();
  return n;
}

struct LogLines {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> prev;
  LogLines() { prev = ly::log::set_sink([this](ly::log::Level, std::string_view m) { lines.emplace_back(m); }); }
  ~LogLines() { ly::log::set_sink(prev); }
  int count(const std::string& needle) const {
    int n = 0;
    for (auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
};

}  // namespace

TEST_CASE("segformer: parameter counts equal the original's architecture") {
  // The original's counts (libreyolo/models/segformer/nn.py, its SIZE_CONFIGS), summed layer by layer from
  // its module list: b0 with ADE20K's 150 classes has 3,752,694 parameters, the count of the published
  // SegFormer-B0 ADE checkpoint (3.75 M); b2 has 27,461,974 (the paper's 27.4 M).
  CHECK(n_params(*sf::Segformer("b0", 150)) == 3752694);
  CHECK(n_params(*sf::Segformer("b0", 4)) == 3715172);
  CHECK(n_params(*sf::Segformer("b0", 19)) == 3719027);
  CHECK(n_params(*sf::Segformer("b2", 150)) == 27461974);
  CHECK_THROWS_WITH_AS(sf::Segformer("b9", 3), doctest::Contains("allowed: b0, b1, b2, b3, b4, b5"), ly::ConfigError);
}

TEST_CASE("segformer: state-dict names are the original's") {
  sf::Segformer net("b0", 150);
  std::map<std::string, std::vector<int64_t>> keys;
  for (auto& kv : net->named_parameters()) keys[kv.key()] = kv.value().sizes().vec();
  for (auto& kv : net->named_buffers()) keys[kv.key()] = kv.value().sizes().vec();
  const std::map<std::string, std::vector<int64_t>> want{
      {"encoder.stages.0.patch_embeddings.proj.weight", {32, 3, 7, 7}},
      {"encoder.stages.0.patch_embeddings.layer_norm.weight", {32}},
      {"encoder.stages.0.blocks.0.layernorm_before.bias", {32}},
      {"encoder.stages.0.blocks.0.attention.q_proj.weight", {32, 32}},
      {"encoder.stages.0.blocks.1.attention.o_proj.bias", {32}},
      {"encoder.stages.0.blocks.0.attention.sequence_reduction.sequence_reduction.weight", {32, 32, 8, 8}},
      {"encoder.stages.2.blocks.1.attention.sequence_reduction.layer_norm.weight", {160}},
      {"encoder.stages.1.blocks.0.mlp.fc1.weight", {256, 64}},
      {"encoder.stages.1.blocks.0.mlp.dwconv.dwconv.weight", {256, 1, 3, 3}},
      {"encoder.stages.3.blocks.1.mlp.fc2.weight", {256, 1024}},
      {"encoder.stages.3.layer_norm.bias", {256}},
      {"decode_head.linear_projections.3.proj.weight", {256, 256}},
      {"decode_head.linear_projections.0.proj.weight", {256, 32}},
      {"decode_head.linear_fuse.weight", {256, 1024, 1, 1}},
      {"decode_head.batch_norm.running_var", {256}},
      {"decode_head.batch_norm.num_batches_tracked", {}},
      {"decode_head.classifier.weight", {150, 256, 1, 1}},
      {"decode_head.classifier.bias", {150}}};
  for (auto& [k, shape] : want) {
    CAPTURE(k);
    REQUIRE(keys.count(k));
    CHECK(keys[k] == shape);
  }
  // Stage 4 has no spatial reduction (ratio 1), as in the original; no extra keys (fuse has no bias).
  CHECK_FALSE(keys.count("encoder.stages.3.blocks.0.attention.sequence_reduction.sequence_reduction.weight"));
  CHECK_FALSE(keys.count("decode_head.linear_fuse.bias"));
  // 4 stages x (proj w/b + ln w/b + final ln w/b) + 8 blocks x (...) + head: every key under encoder. or decode_head.
  for (auto& [k, s] : keys) CHECK((k.rfind("encoder.stages.", 0) == 0 || k.rfind("decode_head.", 0) == 0));
}

TEST_CASE("segformer: output at a quarter of the input; the original's init; drop-path only in training") {
  torch::manual_seed(1);
  sf::Segformer net("b0", 5);
  auto x = torch::rand({2, 3, 64, 96});
  net->eval();
  auto y = net->forward(x);
  CHECK(y.sizes() == torch::IntArrayRef({2, 5, 16, 24}));
  CHECK(torch::equal(net->forward(x), y));  // eval: no randomness
  // Init: conv/linear weights ~ N(0, 0.02), biases 0, LayerNorm 1/0.
  const auto w = net->encoder->stages[1]->as<sf::SegformerStageImpl>()->blocks[0]->as<sf::SegformerLayerImpl>()->mlp->fc1->weight;
  CHECK(w.std().item<double>() == doctest::Approx(0.02).epsilon(0.05));
  CHECK(net->decode_head->classifier->bias.abs().max().item<double>() == 0.0);
  // Drop-path probabilities rise linearly 0 .. 0.1 over the 8 blocks.
  std::vector<double> p;
  for (auto& m : net->modules())
    if (auto* d = dynamic_cast<sf::DropPathImpl*>(m.get())) p.push_back(d->p());
  REQUIRE(p.size() == 8);
  for (size_t i = 0; i < 8; ++i) CHECK(p[i] == doctest::Approx(0.1 * double(i) / 7));
  // Training: two forwards differ (drop-path and dropout draw).
  net->train();
  torch::manual_seed(2);
  auto a = net->forward(x);
  auto b = net->forward(x);
  CHECK_FALSE(torch::equal(a, b));
  // DropPath itself: samples kept whole (scaled by 1 / keep) or zeroed.
  sf::DropPath dp(0.5);
  dp->train();
  auto t = torch::ones({400, 3, 2});
  auto o = dp->forward(t);
  auto per = o.flatten(1);
  CHECK(((per == 0).all(1) | (per == 2).all(1)).all().item<bool>());
  const double kept = (per.select(1, 0) == 2).to(torch::kFloat64).mean().item<double>();
  CHECK(kept > 0.4);
  CHECK(kept < 0.6);
  dp->eval();
  CHECK(torch::equal(dp->forward(t), t));
}

TEST_CASE("segformer: drop-path is detected as randomness in the captured region and noticed once") {
  sf::Segformer net("b0", 3);
  net->train();
  const auto random = ly::capture::random_training_modules(*net);
  // 7 drop-paths (the first block's rate is 0) and the head's dropout.
  CHECK(random.size() == 8);
  int drop_paths = 0;
  for (auto& r : random) drop_paths += r.find(".drop_path") != std::string::npos;
  CHECK(drop_paths == 7);
  CHECK(std::find(random.begin(), random.end(), "net.decode_head.dropout") != random.end());
  CHECK(std::find(random.begin(), random.end(), "net.encoder.stages.0.blocks.0.drop_path") == random.end());
  {
    LogLines log;
    ly::capture::RandomNotice notice;
    CHECK(notice.at_capture(*net));
    CHECK_FALSE(notice.at_capture(*net));  // a re-capture after an invalidation: no second notice
    CHECK(log.count("cuda_graph: the captured region draws random numbers (net.encoder.stages.0.blocks.1.drop_path and 7 more)") == 1);
    CHECK(log.count("replays draw from the graph's own random stream") == 1);
  }
  net->eval();
  CHECK(ly::capture::random_training_modules(*net).empty());
  LogLines log;
  ly::capture::RandomNotice quiet;
  CHECK_FALSE(quiet.at_capture(*net));
  CHECK(log.lines.empty());
}

TEST_CASE("segformer recipe: AdamW groups with the head at 10x, no decay on norms, biases and dwconvs") {
  ly::SegformerFamily fam("b0");
  fam.restore({{"names", std::vector<std::string>{"a", "b", "c"}}});
  auto net = fam.make_network();
  auto groups = ly::SegformerFamily::param_groups(*net, 0.01);
  REQUIRE(groups.size() == 4);
  size_t total = 0;
  for (auto& g : groups) total += g.params.size();
  CHECK(total == net->parameters().size());
  CHECK(groups[0].weight_decay == 0.01);
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(groups[2].lr_mult == 10.0);
  CHECK(groups[3].lr_mult == 10.0);
  CHECK(groups[0].lr_mult == 1.0);
  const auto& dw = net->encoder->stages[0]->as<sf::SegformerStageImpl>()->blocks[0]->as<sf::SegformerLayerImpl>()->mlp->dwconv->conv->weight;
  bool dw_in_no_decay = false;
  for (auto& p : groups[1].params) dw_in_no_decay = dw_in_no_decay || p.is_same(dw);
  CHECK(dw_in_no_decay);
  // The schedule keeps the 10x through warm-up and decay.
  ly::train::OptimizerOptions oo;
  oo.name = "AdamW";
  oo.lr0 = 6e-5;
  ly::train::Optimizer opt(groups, oo);
  ly::train::ScheduleOptions so;
  so.kind = ly::train::parse_schedule("linear");
  so.lr0 = 6e-5;
  so.min_lr_ratio = 0;
  so.epochs = 10;
  so.iters_per_epoch = 10;
  so.warmup_epochs = 2;
  so.warmup_lr_start = 1e-6;
  ly::train::LRSchedule sched(so);
  for (int64_t t : {0, 5, 20, 60}) {
    sched.apply(opt, t);
    CHECK(opt.lr(2) == doctest::Approx(10 * opt.lr(0)));
    CHECK(opt.lr(1) == doctest::Approx(opt.lr(0)));
  }
  // The recipe.
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::family_traits<ly::SegformerFamily>::overrides);
  CHECK(cfg.lr0 == doctest::Approx(6e-5));
  CHECK(cfg.scheduler == "linear");
  CHECK(cfg.ema_decay == doctest::Approx(0.999));
  CHECK(cfg.imgsz == 512);
  CHECK(cfg.batch == 8);
  CHECK(cfg.epochs == 160);
  CHECK(cfg.eval_interval == 1);
  CHECK(cfg.hsv_prob == 0.0);
}

// The declared graph_eager_spread covers what the random stream alone changes: the conformance suite's
// 10-step comparison (its set, batch 4, AdamW 1e-3, epoch running loss sums) run twice from the same
// weights and batches with two different drop-path / dropout streams stays within it (and does differ).
TEST_CASE("segformer: graph_eager_spread covers two eager runs that differ only in their random stream") {
  lry_test::TempDir dir("lry_segformer_spread");
  ly::data::SynthOptions o;
  o.out = dir / "data";
  o.images = 30;
  o.imgsz = 64;
  o.classes = 3;
  o.seed = 21;
  ly::tasks::synth("semantic", o);
  ly::SegformerFamily fam("b0");
  fam.setup(ly::parse_args({"data=" + (dir / "data" / "data.yaml").string(), "imgsz=64", "fliplr=0", "scale=0", "hsv_h=0",
                            "hsv_s=0", "hsv_v=0"}));
  std::vector<ly::data::SemanticBatch> batches;
  for (size_t b = 0; b < 6; ++b) {
    std::vector<ly::data::SemanticSample> samples;
    for (size_t i = 0; i < 4; ++i) {
      std::mt19937_64 rng(b * 4 + i);
      samples.push_back(fam.train_set()->get(b * 4 + i, rng, 0));
    }
    batches.push_back(ly::data::SemanticDataset::collate(std::move(samples)));
  }
  torch::manual_seed(4);
  auto net0 = fam.make_network();
  auto run = [&](uint64_t stream) {
    auto net = std::dynamic_pointer_cast<sf::SegformerImpl>(net0->clone());
    net->train();
    ly::train::OptimizerOptions oo;
    oo.name = "AdamW";
    oo.lr0 = 1e-3;
    ly::train::Optimizer opt(ly::SegformerFamily::param_groups(*net, 0.0), oo);
    torch::manual_seed(stream);
    std::vector<double> sums;
    double run_sum = 0;
    for (int step = 0; step < 10; ++step) {
      if (step == 6) run_sum = 0;  // a new epoch
      const auto& b = batches[static_cast<size_t>(step % 6)];
      auto l = ly::SegformerFamily::loss(net->forward(ly::SegformerFamily::input(b)), b);
      opt.zero_grad();
      l.total.backward();
      opt.step();
      run_sum += l.items.sum().item<double>();
      sums.push_back(run_sum);
    }
    return sums;
  };
  const auto a = run(1), b = run(2);
  double spread = 0;
  for (size_t i = 0; i < a.size(); ++i) spread = std::max(spread, std::abs(a[i] - b[i]));
  MESSAGE("segformer b0: eager-vs-eager random-stream spread of the 10-step loss sums " << spread << " (declared "
                                                                                         << ly::family_traits<ly::SegformerFamily>::graph_eager_spread << ")");
  CHECK(spread > 0);
  CHECK(spread <= ly::family_traits<ly::SegformerFamily>::graph_eager_spread);
}

// On a GPU: SegFormer-b0 trained with cuda_graph=true stays statistically equivalent to eager. Eager runs
// that differ only in the random stream of drop-path / dropout (seed= of the torch generator) give the
// spread; the graph run's mean step loss over N steps must lie within the eager runs' range widened by
// their spread, and the random-stream notice appears exactly once.
LRY_GPU_SUITE {
  TEST_CASE("segformer b0: a graph run is statistically equivalent to eager (loss means within the eager spread)") {
    LRY_REQUIRE_CUDA();
    lry_test::TempDir dir("lry_segformer_gpu");
    ly::data::SynthOptions o;
    o.out = dir / "data";
    o.images = 80;
    o.imgsz = 128;
    o.classes = 4;
    o.seed = 3;
    ly::tasks::synth("semantic", o);
    using Eager = ly::Trainer<ly::SegformerFamily, ly::precision::FamilyDefault, ly::capture::Eager, ly::profile::Off>;
    using Graph = ly::Trainer<ly::SegformerFamily, ly::precision::FamilyDefault, ly::capture::CudaGraph<>, ly::profile::Off>;
    auto args = [&](const std::string& name, int seed, bool graph) {
      return ly::parse_args({"model=segformerb0", "data=" + (dir / "data" / "data.yaml").string(), "imgsz=128", "batch=8",
                             "epochs=4", "workers=2", "device=cuda", "val=false", "warmup_epochs=1", "lr0=2e-4",
                             "seed=" + std::to_string(seed), "project=" + dir.path.string(), "name=" + name, "exist_ok=true",
                             std::string("cuda_graph=") + (graph ? "true" : "false")});
    };
    struct Losses {  // step_end carries the epoch's running loss sum: differences are the step losses
      std::vector<double>* out;
      int epoch = -1;
      double prev = 0;
      void operator()(ly::event::step_end, const ly::StepInfo& s) {
        const double run = s.loss_items.sum().item<double>();
        if (s.epoch != epoch) epoch = s.epoch, prev = 0;
        out->push_back(run - prev);
        prev = run;
      }
    };
    auto mean_step_loss = [](const std::vector<double>& steps) {
      double s = 0;
      for (double v : steps) s += v;
      return s / double(steps.size());
    };
    std::vector<double> eager_means;
    for (int seed : {0, 1, 2}) {
      std::vector<double> l;
      Losses cb{&l, -1, 0};
      Eager t(args("eager" + std::to_string(seed), seed, false));
      t.fit(cb);
      eager_means.push_back(mean_step_loss(l));
    }
    LogLines log;
    std::vector<double> lg;
    Losses cbg{&lg, -1, 0};
    Graph g(args("graph", 0, true));
    g.fit(cbg);
    const auto rep = g.capture().report();
    CHECK(rep["captures"] == 1);
    CHECK(rep["replayed_steps"].get<int64_t>() > 20);
    CHECK(log.count("replays draw from the graph's own random stream") == 1);
    const double gm = mean_step_loss(lg);
    const double lo = *std::min_element(eager_means.begin(), eager_means.end());
    const double hi = *std::max_element(eager_means.begin(), eager_means.end());
    const double spread = std::max(hi - lo, 1e-3);
    MESSAGE("segformer b0 mean step loss: eager " << eager_means[0] << " " << eager_means[1] << " " << eager_means[2]
                                                  << ", graph " << gm << " (spread " << spread << ")");
    CHECK(gm >= lo - spread);
    CHECK(gm <= hi + spread);
  }
}
