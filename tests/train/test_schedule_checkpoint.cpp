// LR/momentum schedules at hand-computed points, and checkpoints (round trip, atomic writes, errors,
// optimizer continuation after a restore).
#include "support.hpp"

#include <libreyolo/io/checkpoint.hpp>
#include <libreyolo/train/ema.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/schedule.hpp>

#include <algorithm>
#include <fstream>

// Last: c10 defines its own CHECK(cond) macro; doctest's must be the one in effect.
#include "support_doctest.hpp"

using namespace libreyolo;
using namespace libreyolo::train;
using doctest::Approx;

namespace {

// lr0 0.01, r 0.05 (lr_min 0.0005), T = 10 epochs * 10 steps = 100, W = 2 * 10 = 20, N = 2 * 10 = 20,
// warm-up from 0.0001 (the original's YOLOv9 warmup_lr_start).
ScheduleOptions sched(ScheduleKind k) {
  ScheduleOptions o;
  o.kind = k;
  o.lr0 = 0.01;
  o.min_lr_ratio = 0.05;
  o.epochs = 10;
  o.iters_per_epoch = 10;
  o.warmup_epochs = 2;
  o.warmup_lr_start = 0.0001;
  o.momentum = 0.9;
  o.no_aug_epochs = 2;
  return o;
}

}  // namespace

TEST_CASE("schedule linear (the original's LinearLRScheduler): linear warm-up from warmup_lr_start, linear decay") {
  LRSchedule s(sched(ScheduleKind::linear));
  CHECK(s.warmup_iters() == 20);
  CHECK(s.total_iters() == 100);
  CHECK(s.lr(0) == Approx(0.0001));
  CHECK(s.lr(10) == Approx(0.00505));  // 0.0099 * 10/20 + 0.0001
  CHECK(s.lr(20) == Approx(0.01));     // t <= W is still warm-up: its end is lr0
  CHECK(s.lr(60) == Approx(0.00525));  // 0.01 - 0.0095 * 40/80
  CHECK(s.lr(99) == Approx(0.00061875));
  CHECK(s.lr(100) == Approx(0.0005));
  CHECK(s.lr(150) == Approx(0.0005));  // held past the end
  CHECK(s.momentum(0) == Approx(0.9));  // no momentum warm-up
  CHECK(s.momentum(99) == Approx(0.9));
}

TEST_CASE("schedule cos (CosineAnnealingScheduler): linear warm-up, then a cosine over T - W") {
  LRSchedule s(sched(ScheduleKind::cos));
  CHECK(parse_schedule("warmcos") == ScheduleKind::cos);
  CHECK(s.lr(0) == Approx(0.0001));
  CHECK(s.lr(20) == Approx(0.01));
  CHECK(s.lr(40) == Approx(0.00860875721));  // 0.0005 + 0.00475 (1 + cos(pi / 4))
  CHECK(s.lr(60) == Approx(0.00525));
  CHECK(s.lr(100) == Approx(0.0005));
  CHECK(s.lr(150) == Approx(0.0005));
}

TEST_CASE("schedule yoloxwarmcos (WarmupCosineScheduler): quadratic warm-up, cosine to T - N, then flat") {
  auto o = sched(ScheduleKind::yoloxwarmcos);
  o.warmup_lr_start = 0;
  LRSchedule s(o);
  CHECK(s.lr(0) == 0.0);
  CHECK(s.lr(10) == Approx(0.0025));  // 0.01 * (10/20)^2
  CHECK(s.lr(20) == Approx(0.01));
  CHECK(s.lr(50) == Approx(0.00525));  // halfway through the 60-step cosine
  CHECK(s.lr(79) == Approx(0.00050650970992));
  CHECK(s.lr(80) == Approx(0.0005));
  CHECK(s.lr(99) == Approx(0.0005));
  o.warmup_lr_start = 0.0001;
  CHECK(LRSchedule(o).lr(10) == Approx(0.002575));  // 0.0099 / 4 + 0.0001
}

TEST_CASE("schedule flat_cosine (D-FINE) and constant") {
  LRSchedule f(sched(ScheduleKind::flat_cosine));
  CHECK(f.lr(10) == Approx(0.00505));
  CHECK(f.lr(50) == Approx(0.01));
  CHECK(f.lr(80) == Approx(0.01));
  CHECK(f.lr(90) == Approx(0.00525));
  CHECK(f.lr(100) == Approx(0.0005));
  LRSchedule c(sched(ScheduleKind::constant));
  CHECK(c.lr(10) == Approx(0.00505));
  CHECK(c.lr(99) == Approx(0.01));
}

TEST_CASE("schedule deimv2_flat_cosine (the original's DEIMv2FlatCosineScheduler): quadratic warm-up, flat to F, cosine to T - N") {
  auto o = sched(ScheduleKind::deimv2_flat_cosine);
  CHECK(parse_schedule("deimv2_flat_cosine") == ScheduleKind::deimv2_flat_cosine);
  o.flat_epochs = 5;  // F = 50: the cosine runs over steps 50..80, lr_min from T - N = 80 on
  LRSchedule s(o);
  CHECK(s.lr(0) == Approx(0.0001));
  CHECK(s.lr(10) == Approx(0.002575));  // 0.0099 (10/20)^2 + 0.0001
  CHECK(s.lr(20) == Approx(0.01));
  CHECK(s.lr(50) == Approx(0.01));       // t <= F is still flat
  CHECK(s.lr(65) == Approx(0.00525));    // halfway through the 30-step cosine
  CHECK(s.lr(79) == Approx(0.000526020997));
  CHECK(s.lr(80) == Approx(0.0005));
  CHECK(s.lr(100) == Approx(0.0005));
  // flat_epochs -1: flat up to T - N inclusive, then lr_min (no cosine left: the original's max(1, 0) span).
  o.flat_epochs = -1;
  LRSchedule none(o);
  CHECK(none.lr(80) == Approx(0.01));
  CHECK(none.lr(81) == Approx(0.0005));
  // F beyond T - N (DEIMv2-atto's flat_epochs 250 on a 10-epoch run): the flat test comes first, lr0 to the end.
  o.flat_epochs = 250;
  LRSchedule past(o);
  CHECK(past.lr(90) == Approx(0.01));
  CHECK(past.lr(100) == Approx(0.01));
  o.flat_epochs = -2;
  CHECK_THROWS_WITH_AS(LRSchedule{o}, doctest::Contains("flat_epochs"), ConfigError);
}

TEST_CASE("schedule: degenerate cases, warm-up rounding, warmup_lr_start above lr0") {
  auto o = sched(ScheduleKind::yoloxwarmcos);
  o.warmup_lr_start = 0;
  o.epochs = 2;  // T = 20, W = 10, N = 20: nothing left for the cosine
  o.warmup_epochs = 1;
  LRSchedule s(o);
  CHECK(s.warmup_iters() == 10);
  CHECK(s.lr(5) == Approx(0.0025));
  CHECK(s.lr(11) == Approx(0.0005));
  CHECK(s.lr(19) == Approx(0.0005));

  o = sched(ScheduleKind::linear);
  o.warmup_epochs = 0;
  LRSchedule nw(o);
  CHECK(nw.warmup_iters() == 0);
  CHECK(nw.lr(0) == Approx(0.01));
  o.warmup_epochs = 1.26;  // round(12.6) = 13
  CHECK(LRSchedule(o).warmup_iters() == 13);
  o.warmup_epochs = 2;
  o.warmup_lr_start = 0.5;  // capped at lr0, as the original does
  CHECK(LRSchedule(o).lr(0) == Approx(0.01));

  o = sched(ScheduleKind::cos);
  o.epochs = 0;  // T = 0 must not divide by zero
  LRSchedule empty(o);
  CHECK(empty.total_iters() == 0);
  CHECK(empty.lr(20) == Approx(0.0001));
  CHECK_THROWS_AS(empty.lr(-1), Error);
}

TEST_CASE("schedule: parse errors and bad options name the value") {
  CHECK(parse_schedule("cos") == ScheduleKind::cos);
  CHECK_THROWS_WITH_AS(parse_schedule("cosine"),
                       doctest::Contains("'cosine' is not supported; allowed: linear|cos|warmcos|yoloxwarmcos"),
                       ConfigError);
  auto o = sched(ScheduleKind::cos);
  o.min_lr_ratio = 1.5;
  CHECK_THROWS_WITH_AS(LRSchedule{o}, doctest::Contains("min_lr_ratio = 1.5"), ConfigError);
  o = sched(ScheduleKind::cos);
  o.warmup_lr_start = -1;
  CHECK_THROWS_WITH_AS(LRSchedule{o}, doctest::Contains("warmup_lr_start = -1"), ConfigError);
}

TEST_CASE("schedule apply: every group gets the same lr, the optimizer the constant momentum") {
  auto w = torch::zeros({2, 2}).set_requires_grad(true), n = torch::zeros({2}).set_requires_grad(true),
       b = torch::zeros({2}).set_requires_grad(true);
  Optimizer opt({{"decay", {w}, 5e-4, 0}, {"norm", {n}, 0, 0}, {"bias", {b}, 0, 0}}, {});
  LRSchedule(sched(ScheduleKind::linear)).apply(opt, 10);
  CHECK(opt.lr(0) == Approx(0.00505));
  CHECK(opt.lr(1) == Approx(0.00505));
  CHECK(opt.lr(2) == Approx(0.00505));
  CHECK(opt.momentum() == Approx(0.9));
}

// ---- checkpoints --------------------------------------------------------------------------------

namespace {
struct SmallImpl : torch::nn::Module {
  torch::nn::Linear fc{3, 2};
  torch::nn::BatchNorm1d bn{2};
  SmallImpl() {
    register_module("fc", fc);
    register_module("bn", bn);
  }
};
TORCH_MODULE(Small);

std::vector<torch::Tensor> random_grads(const std::vector<torch::Tensor>& ps, int k) {
  torch::manual_seed(500 + k);
  std::vector<torch::Tensor> gs;
  for (const auto& p : ps) gs.push_back(torch::randn(p.sizes()));
  return gs;
}
void step_with(Optimizer& opt, int k) {
  auto ps = opt.params();
  auto gs = random_grads(ps, k);
  for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = gs[i];
  opt.step();
}
std::vector<ParamGroup> groups_of(Small& m) {
  return {{"decay", {m->fc->weight}, 1e-2, 0}, {"norm", {m->bn->weight}, 0, 0}, {"bias", {m->fc->bias, m->bn->bias}, 0, 0}};
}
bool same_params(Small& a, Small& b) {
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (!torch::equal(pa[i], pb[i])) return false;
  return true;
}
std::vector<std::string> dir_entries(const std::filesystem::path& d) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("checkpoint round trip: meta, tensors, module state") {
  lry_test::TempDir dir("lry_ckpt");
  Small src, dst;
  {
    torch::NoGradGuard ng;
    src->bn->running_mean.fill_(0.25);
    src->bn->num_batches_tracked.fill_(42);
  }
  Checkpoint ck;
  ck.meta = {{"epoch", 3}, {"family", "yolox"}, {"metrics", {{"map", 0.5}}}};
  ck.tensors["extra.ints"] = torch::arange(5, torch::kLong);
  put_module_state(ck, "model", *src);
  CHECK(ck.tensors.count("model.fc.weight") == 1);
  CHECK(ck.tensors.count("model.bn.running_var") == 1);
  save_checkpoint(ck, dir / "last.pt");
  CHECK(dir_entries(dir.path) == std::vector<std::string>{"last.pt"});

  Checkpoint back = load_checkpoint(dir / "last.pt");
  CHECK(back.meta == ck.meta);
  REQUIRE(back.tensors.size() == ck.tensors.size());
  for (const auto& [k, t] : ck.tensors) {
    CAPTURE(k);
    CHECK(torch::equal(back.tensors.at(k), t));
  }
  get_module_state(back, "model.", *dst);  // a trailing dot on the prefix names the same keys
  CHECK(same_params(src, dst));
  CHECK(torch::equal(dst->bn->running_mean, src->bn->running_mean));
  CHECK(dst->bn->num_batches_tracked.item<int64_t>() == 42);
}

TEST_CASE("checkpoint: a restored optimizer continues exactly like the original") {
  for (const char* name : {"SGD", "AdamW"}) {
    CAPTURE(name);
    lry_test::TempDir dir("lry_ckpt_opt");
    OptimizerOptions oo;
    oo.name = name;
    Small a;
    Optimizer opt_a(groups_of(a), oo);
    for (int k = 0; k < 3; ++k) step_with(opt_a, k);
    opt_a.set_lr(2, 0.02);
    opt_a.set_momentum(0.85);
    Checkpoint ck;
    put_module_state(ck, "model", *a);
    opt_a.save(ck, "optim.");
    CHECK(ck.meta.contains("optim"));
    CHECK(ck.tensors.count(std::string("optim.2.1.") + (oo.name == "SGD" ? "momentum_buffer" : "exp_avg_sq")) == 1);
    save_checkpoint(ck, dir / "c.pt");

    Small b;
    Optimizer opt_b(groups_of(b), oo);
    Checkpoint back = load_checkpoint(dir / "c.pt");
    get_module_state(back, "model", *b);
    opt_b.load(back, "optim");
    CHECK(opt_b.lr(2) == 0.02);
    CHECK(opt_b.momentum() == 0.85);
    for (int k = 3; k < 6; ++k) {
      step_with(opt_a, k);
      step_with(opt_b, k);
    }
    CHECK(same_params(a, b));

    // Without the restored state the continuation differs: the check above is not vacuous.
    Small c;
    Optimizer opt_c(groups_of(c), oo);
    get_module_state(back, "model", *c);
    for (int k = 3; k < 6; ++k) step_with(opt_c, k);
    CHECK_FALSE(same_params(a, c));
  }
}

TEST_CASE("checkpoint: EMA state round trip") {
  Small model, copy1, copy2;
  ModelEMA ema(copy1.ptr(), *model, 0.9, 10);
  {
    torch::NoGradGuard ng;
    model->fc->weight.add_(1.0);
  }
  ema.update(*model);
  ema.update(*model);
  Checkpoint ck;
  ema.save(ck, "ema");
  ModelEMA restored(copy2.ptr(), *Small(), 0.9, 10);
  restored.load(ck, "ema");
  CHECK(restored.updates() == 2);
  CHECK(restored.current_decay() == Approx(ema.current_decay()));
  CHECK(torch::equal(copy2->fc->weight, copy1->fc->weight));
  CHECK_THROWS_AS(restored.load(Checkpoint{}, "ema"), CheckpointError);
}

TEST_CASE("checkpoint atomicity: a failed write keeps the old file and leaves no temp file") {
  lry_test::TempDir dir("lry_ckpt_atomic");
  const auto path = dir / "last.pt";
  Checkpoint old_ck;
  old_ck.meta = {{"epoch", 1}};
  old_ck.tensors["w"] = torch::ones({4});
  save_checkpoint(old_ck, path);

  // A writer that dies half-way, like a run killed or a disk error mid-save.
  auto half_then_throw = [](const train::detail::ByteSink& sink) {
    const char junk[] = "PK-partial-zip";
    sink(junk, sizeof junk);
    throw std::runtime_error("simulated failure");
  };
  CHECK_THROWS_WITH_AS(train::detail::write_file_atomically(path, half_then_throw),
                       doctest::Contains("simulated failure"), CheckpointError);
  CHECK(dir_entries(dir.path) == std::vector<std::string>{"last.pt"});
  Checkpoint still = load_checkpoint(path);
  CHECK(still.meta == old_ck.meta);
  CHECK(torch::equal(still.tensors.at("w"), torch::ones({4})));

  // A real save onto a directory is refused before anything is written (issue 36: never replace what
  // is not a regular file; this once failed at the final rename).
  std::filesystem::create_directories(dir / "busy" / "inner");
  Checkpoint new_ck;
  new_ck.meta = {{"epoch", 2}};
  CHECK_THROWS_WITH_AS(save_checkpoint(new_ck, dir / "busy"), doctest::Contains("it is a directory"),
                       libreyolo::OutputPathError);
  CHECK((dir_entries(dir.path) == std::vector<std::string>{"busy", "last.pt"}));
  CHECK(std::filesystem::is_directory(dir / "busy" / "inner"));

  CHECK_THROWS_WITH_AS(save_checkpoint(new_ck, dir / "missing_dir" / "x.pt"), doctest::Contains("missing_dir"),
                       CheckpointError);
}

TEST_CASE("checkpoint errors: missing key, wrong shape, not a checkpoint, optimizer mismatch") {
  lry_test::TempDir dir("lry_ckpt_err");
  Checkpoint ck;
  torch::nn::Linear small(2, 3), big(2, 4);
  put_module_state(ck, "model", *small);
  CHECK_THROWS_WITH_AS(get_module_state(ck, "model", *big),
                       doctest::Contains("'model.weight' has shape [3, 2] but the module expects [4, 2]"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(get_module_state(ck, "ema", *small), doctest::Contains("lacks module tensor 'ema.weight'"),
                       CheckpointError);

  const auto text = dir / "notes.txt";
  std::ofstream(text) << "just some text, not a zip archive\n";
  const std::string text_msg = text.string() + ": not a libreyolo checkpoint";
  CHECK_THROWS_WITH_AS(load_checkpoint(text), doctest::Contains(text_msg.c_str()), CheckpointError);
  const auto plain = dir / "tensor.pt";
  torch::save(torch::ones({2}), plain.string());  // a LibTorch archive, but not ours
  CHECK_THROWS_WITH_AS(load_checkpoint(plain), doctest::Contains("not a libreyolo checkpoint"), CheckpointError);
  CHECK_THROWS_WITH_AS(load_checkpoint(dir / "nope.pt"), doctest::Contains("nope.pt: no such file"),
                       CheckpointError);

  Small m;
  OptimizerOptions adam;
  adam.name = "AdamW";
  Optimizer opt_adam(groups_of(m), adam);
  step_with(opt_adam, 0);
  Checkpoint oc;
  opt_adam.save(oc, "optimizer");
  Optimizer opt_sgd(groups_of(m), {});
  CHECK_THROWS_WITH_AS(opt_sgd.load(oc, "optimizer"), doctest::Contains("saved for optimizer 'AdamW'"),
                       CheckpointError);
  oc.tensors["optimizer.0.0.exp_avg"] = torch::zeros({7});
  CHECK_THROWS_WITH_AS(opt_adam.load(oc, "optimizer"),
                       doctest::Contains("'optimizer.0.0.exp_avg' has shape [7] but the parameter has shape [2, 3]"),
                       CheckpointError);
  oc.tensors.erase("optimizer.0.0.exp_avg");
  CHECK_THROWS_WITH_AS(opt_adam.load(oc, "optimizer"), doctest::Contains("optimizer.0.0.exp_avg"), CheckpointError);
}
