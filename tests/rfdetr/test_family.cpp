// RF-DETR's trainer policy (families/rfdetr/family.hpp): the recipe against the original's RFDETRConfig
// (tests/fixtures/libreyolo/rfdetr-<size>/config.json trainer_defaults, c41461e), the original's optimizer
// groups (trainer.py _setup_upstream_optimizer_groups + backbone.py get_named_param_lr_pairs), the EMA
// warm-up (tau 100), the `step` schedule (RFDETRStepScheduler), the multi-scale sizes, and a few CPU steps.
#include <libreyolo/core/config.hpp>
#include <libreyolo/families/rfdetr/family.hpp>
#include <libreyolo/train/ema.hpp>
#include <libreyolo/train/schedule.hpp>

#include "support_synth.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace rf = libreyolo::families::rfdetr;

namespace {

// One JSON file of the size's fixture (tests/fixtures/libreyolo/rfdetr-<size>/).
nlohmann::json fixture_json(const std::string& size, const char* file) {
  std::ifstream f(std::filesystem::path(LIBREYOLO_SOURCE_DIR "/tests/fixtures/libreyolo/rfdetr-" + size) / file);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

nlohmann::json trainer_defaults(const std::string& size) { return fixture_json(size, "config.json").at("trainer_defaults"); }

ly::RFDETRFamily family_n(int classes = 3) {
  ly::RFDETRFamily fam("n");
  fam.restore({{"names", std::vector<std::string>(static_cast<size_t>(classes), "c")}});
  return fam;
}

}  // namespace

TEST_CASE("rfdetr: the recipe overrides equal the original's RFDETRConfig for every size") {
  using T = ly::RFDETRFamily::traits;
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, T::overrides);
  const auto ours = ly::to_json(cfg);
  const std::map<std::string, std::string> keys{
      {"lr0", "lr0"},           {"weight_decay", "weight_decay"},   {"scheduler", "scheduler"},
      {"lr_drop", "lr_drop"},   {"warmup_epochs", "warmup_epochs"}, {"warmup_lr_start", "warmup_lr_start"},
      {"no_aug_epochs", "no_aug_epochs"}, {"min_lr_ratio", "min_lr_ratio"}, {"ema", "ema"},
      {"ema_decay", "ema_decay"}, {"ema_tau", "ema_tau"},         {"nbs", "nbs"},
      {"clip_max_norm", "clip_grad_norm"}, {"epochs", "epochs"},  {"batch", "batch"},
      {"workers", "workers"},   {"eval_interval", "eval_interval"}, {"mosaic_prob", "mosaic"},
      {"mixup_prob", "mixup"},  {"hsv_prob", "hsv_prob"},          {"flip_prob", "fliplr"},
      {"degrees", "degrees"},   {"translate", "translate"},        {"shear", "shear"},
      {"multi_scale", "multi_scale"}, {"imgsz", "imgsz"}};
  for (std::string size : {"n", "s", "m", "l"}) {
    CAPTURE(size);
    const auto d = trainer_defaults(size);
    CHECK(d.at("amp").get<bool>() == T::amp_default);
    CHECK(ly::config_detail::lower(ours.at("optimizer").get<std::string>()) == d.at("optimizer").get<std::string>());
    for (const auto& [orig, key] : keys) {
      CAPTURE(orig);
      REQUIRE(d.contains(orig));
      const auto& v = d.at(orig);
      if (v.is_string()) CHECK(ours.at(key).get<std::string>() == v.get<std::string>());
      else if (v.is_boolean()) CHECK(ours.at(key).get<bool>() == v.get<bool>());
      else CHECK(ours.at(key).get<double>() == doctest::Approx(v.get<double>()));
    }
    // What the original's detection trainer runs beyond its config keys.
    CHECK(d.at("expanded_scales").get<bool>());
    CHECK_FALSE(d.at("do_random_resize_via_padding").get<bool>());
    CHECK(d.at("crop_resize_prob").get<double>() == doctest::Approx(rf::kCropResizeProb));
  }
  CHECK(ours.at("train_resize").get<std::string>() == "stretch");
  CHECK(cfg.accumulate() == 4);  // nbs 16 / batch 4
}

TEST_CASE("rfdetr: each size trains at the original's INPUT_SIZES (its train() passes imgsz=input_size), unless the user sets imgsz") {
  for (std::string size : {"n", "s", "m", "l"}) {
    CAPTURE(size);
    const int native = fixture_json(size, "ref.json").at("imgsz").get<int>();  // the fixture's input: LibreRFDETR.INPUT_SIZES
    ly::RFDETRFamily fam(size);
    ly::TrainConfig cfg;
    ly::train::apply_family_overrides(fam, cfg);
    CHECK(cfg.imgsz == native);
    CHECK(cfg.imgsz == std::map<std::string, int>{{"n", 384}, {"s", 512}, {"m", 576}, {"l", 704}}.at(size));
    auto user = ly::parse_args({"imgsz=640"});
    ly::train::apply_family_overrides(fam, user);
    CHECK(user.imgsz == 640);
  }
}

TEST_CASE("rfdetr: parameter groups: the ViT's layer-wise lr decay and exclusions, the decoder at 0.7, the rest at lr0") {
  auto fam = family_n();
  auto net = fam.make_network();
  const auto groups = fam.param_groups(*net, 1e-4);
  std::map<const void*, const ly::train::ParamGroup*> of;
  size_t listed = 0;
  for (const auto& g : groups)
    for (const auto& p : g.params) {
      CHECK(of.emplace(p.unsafeGetTensorImpl(), &g).second);  // in one group only
      ++listed;
    }
  size_t trainable = 0;
  for (const auto& p : net->parameters()) trainable += p.requires_grad();
  CHECK(listed == trainable);
  CHECK(groups.front().lr_mult == 1.0);  // the full-lr group first (the epoch line shows group 0)

  const auto params = net->named_parameters();
  auto group_of = [&](const std::string& name) -> const ly::train::ParamGroup& {
    REQUIRE_MESSAGE(params.contains(name), name);
    return *of.at(params[name].unsafeGetTensorImpl());
  };
  const double comp2 = 0.7 * 0.7, enc = 1.5e-4 / 1e-4;  // lr_component_decay^2, lr_encoder / lr0
  struct Want {
    std::string name;
    double lr_mult, wd;
  };
  const std::vector<Want> want{
      // ViT: 0.8^(13 + 1 - layer_id) x 0.49 x 1.5; no decay on norms, biases, embeddings.
      {"backbone.0.encoder.encoder.encoder.layer.11.mlp.fc1.weight", enc * std::pow(0.8, 2) * comp2, 1e-4},
      {"backbone.0.encoder.encoder.encoder.layer.11.mlp.fc1.bias", enc * std::pow(0.8, 2) * comp2, 0},
      {"backbone.0.encoder.encoder.encoder.layer.0.norm1.weight", enc * std::pow(0.8, 13) * comp2, 0},
      {"backbone.0.encoder.encoder.encoder.layer.4.attention.attention.query.weight", enc * std::pow(0.8, 9) * comp2, 1e-4},
      {"backbone.0.encoder.encoder.encoder.layer.4.layer_scale1.lambda1", enc * std::pow(0.8, 9) * comp2, 1e-4},
      {"backbone.0.encoder.encoder.embeddings.patch_embeddings.projection.weight", enc * std::pow(0.8, 14) * comp2, 0},
      {"backbone.0.encoder.encoder.embeddings.position_embeddings", enc * std::pow(0.8, 14) * comp2, 0},
      {"backbone.0.encoder.encoder.layernorm.weight", enc * comp2, 0},
      // The decoder at lr0 x 0.7, weight decay on everything (the optimizer's default for these groups).
      {"transformer.decoder.layers.0.linear1.weight", 0.7, 1e-4},
      {"transformer.decoder.layers.0.norm1.bias", 0.7, 1e-4},
      // Everything else at lr0 with weight decay: projector, heads, queries, encoder-output layers.
      {"backbone.0.projector.stages.0.0.cv1.conv.weight", 1.0, 1e-4},
      {"class_embed.bias", 1.0, 1e-4},
      {"query_feat.weight", 1.0, 1e-4},
      {"transformer.enc_output_norm.5.weight", 1.0, 1e-4},
  };
  for (const auto& w : want) {
    CAPTURE(w.name);
    const auto& g = group_of(w.name);
    CHECK(g.lr_mult == doctest::Approx(w.lr_mult).epsilon(1e-12));
    CHECK(g.weight_decay == doctest::Approx(w.wd));
  }
  // The rules themselves (backbone.py get_dinov2_lr_decay_rate / get_dinov2_weight_decay_rate).
  CHECK(rf::dinov2_lr_decay_rate("backbone.0.encoder.encoder.encoder.layer.3.residual.x") == doctest::Approx(1.0));
  CHECK(rf::dinov2_lr_decay_rate("transformer.decoder.layers.1.x") == doctest::Approx(1.0));
  CHECK(rf::dinov2_no_weight_decay("a.gamma"));
  CHECK(rf::dinov2_no_weight_decay("rel_pos_h"));
  CHECK_FALSE(rf::dinov2_no_weight_decay("a.weight"));
}

TEST_CASE("rfdetr: the EMA warms up as decay x (1 - exp(-updates / 100))") {
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::RFDETRFamily::traits::overrides);
  REQUIRE(cfg.ema_decay == doctest::Approx(0.993));
  REQUIRE(cfg.ema_tau == doctest::Approx(100));
  torch::nn::Linear m(2, 2), copy(2, 2);
  ly::train::ModelEMA ema(copy.ptr(), *m, cfg.ema_decay, cfg.ema_tau);
  ema.update(*m);
  CHECK(ema.current_decay() == doctest::Approx(0.993 * (1 - std::exp(-1.0 / 100))));
  for (int i = 1; i < 100; ++i) ema.update(*m);
  CHECK(ema.current_decay() == doctest::Approx(0.993 * (1 - std::exp(-1.0))));
  CHECK(ema.current_decay() < 0.63);  // far below 0.993 after 100 updates: the warm-up matters at 100 epochs x few steps
}

TEST_CASE("rfdetr: the step schedule: linear warm-up from 0 over int(warmup x ipe) steps, lr0, then 0.1 x lr0 from lr_drop") {
  ly::train::ScheduleOptions o;
  o.kind = ly::train::parse_schedule("step");
  o.lr0 = 1e-4;
  o.epochs = 12;
  o.iters_per_epoch = 10;
  o.warmup_epochs = 0.55;  // int(5.5) = 5 steps
  o.warmup_lr_start = 0.5;  // unread by step
  o.lr_drop = 8;
  ly::train::LRSchedule s(o);
  CHECK(s.warmup_iters() == 5);
  CHECK(s.lr(0) == 0);
  CHECK(s.lr(2) == doctest::Approx(0.4e-4));
  CHECK(s.lr(4) == doctest::Approx(0.8e-4));
  CHECK(s.lr(5) == doctest::Approx(1e-4));
  CHECK(s.lr(79) == doctest::Approx(1e-4));
  CHECK(s.lr(80) == doctest::Approx(1e-5));
  CHECK(s.lr(119) == doctest::Approx(1e-5));
  CHECK(s.lr(500) == doctest::Approx(1e-5));  // held past the end
  // The recipe: no warm-up, lr_drop 100 = epochs: lr0 over the whole run.
  o.warmup_epochs = 0;
  o.epochs = 100;
  o.lr_drop = 100;
  ly::train::LRSchedule r(o);
  CHECK(r.lr(0) == doctest::Approx(1e-4));
  CHECK(r.lr(100 * 10 - 1) == doctest::Approx(1e-4));
  // Validation of the key.
  CHECK(ly::parse_args({"scheduler=step", "lr_drop=40"}).lr_drop == 40);
  CHECK_THROWS_AS(ly::parse_args({"lr_drop=-1"}), ly::ConfigError);
  o.lr_drop = -1;
  CHECK_THROWS_AS(ly::train::LRSchedule{o}, ly::ConfigError);
}

TEST_CASE("rfdetr: multi-scale sizes are compute_multi_scale_scales(imgsz, expanded, 16, 2)") {
  CHECK(rf::multi_scale_scales(640) == std::vector<int>{480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800});
  CHECK(rf::multi_scale_scales(640, false) == std::vector<int>{544, 576, 608, 640, 672, 704, 736, 768});
  CHECK(rf::multi_scale_scales(96) == std::vector<int>{64, 96, 128, 160, 192, 224, 256});
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::RFDETRFamily::traits::overrides);
  ly::data::DetectAugment a;
  a.imgsz = 640;
  a.mosaic = a.mixup = a.hsv_prob = 0;
  ly::RFDETRFamily::adjust_augment(a, cfg, "n");
  CHECK(a.multi_scale_sizes == rf::multi_scale_scales(640));
  CHECK(a.can_stretch);
  CHECK(static_cast<bool>(a.pipeline));
  a.mosaic = 1.0;
  CHECK_THROWS_AS(ly::RFDETRFamily::adjust_augment(a, cfg, "n"), ly::ConfigError);
}

TEST_CASE("rfdetr-n: a few CPU training steps on one image give a finite, falling loss; decode gives top-k rows") {
  torch::manual_seed(0);
  auto fam = family_n(2);
  auto net = fam.make_network();
  net->train();
  const auto b = lry_test::two_box_batch();
  // The family's groups with their lr multipliers, AdamW at lr0 1e-3 (10x the recipe's, to see a fall in a few steps).
  std::vector<torch::optim::OptimizerParamGroup> pg;
  for (const auto& g : fam.param_groups(*net, 1e-4)) {
    if (g.params.empty()) continue;
    auto o = std::make_unique<torch::optim::AdamWOptions>(1e-3 * g.lr_mult);
    o->weight_decay(g.weight_decay);
    pg.emplace_back(g.params, std::move(o));
  }
  torch::optim::AdamW opt(pg, torch::optim::AdamWOptions(1e-3));
  const auto x = ly::RFDETRFamily::input(b);
  double first = 0, last = 0;
  const int steps = 12;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    auto out = net->forward(x);
    REQUIRE(out.pred_logits.size(1) == 13 * 300);  // the training forward: every group
    auto l = fam.loss(out, b);
    REQUIRE(l.items.size(0) == 3);
    REQUIRE(std::isfinite(l.total.item<double>()));
    l.total.backward();
    torch::nn::utils::clip_grad_norm_(net->parameters(), 0.1);
    opt.step();
    if (step == 0) first = l.total.item<double>();
    last = l.total.item<double>();
  }
  MESSAGE("rfdetr-n loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.9 * first);
  net->eval();
  torch::NoGradGuard ng;
  auto out = net->forward(x);
  CHECK(out.pred_logits.size(1) == 300);
  ly::tasks::DecodeOptions o;
  o.conf = 0.0;
  o.max_det = 50;
  auto d = fam.decode(out, o);
  REQUIRE(d.size() == 1);
  CHECK(d[0].size(0) == 50);
  CHECK(d[0].size(1) == 6);
  CHECK(d[0].select(1, 5).max().item<double>() <= 1);  // class ids of the 2 real classes only
}

TEST_CASE("rfdetr: the whole network is the capture region; its training output round-trips through the capture's flat list") {
  using T = ly::family_traits<ly::RFDETRFamily>;
  static_assert(T::capture_region == ly::CaptureRegion::network);
  static_assert(ly::task_is_captured<ly::RFDETRFamily>());
  auto fam = family_n();
  auto net = fam.make_network();
  net->train();
  torch::manual_seed(3);
  torch::NoGradGuard ng;
  const auto out = net->forward(torch::rand({1, 3, 64, 64}));
  using Codec = ly::capture::OutputCodec<rf::RFDETROutput>;
  auto flat = Codec::flatten(out);
  // n: 2 decoder layers -> one aux layer; 4 + 2 tensors, 13 x 300 query rows in training.
  REQUIRE(flat.size() == 4 + 2 * out.aux_outputs.size());
  CHECK(out.aux_outputs.size() == 1);
  CHECK(flat[0].size(1) == 13 * 300);
  const auto back = Codec::unflatten(flat);
  CHECK(back.pred_logits.is_same(out.pred_logits));
  CHECK(back.pred_boxes.is_same(out.pred_boxes));
  CHECK(back.enc_outputs.pred_logits.is_same(out.enc_outputs.pred_logits));
  CHECK(back.enc_outputs.pred_boxes.is_same(out.enc_outputs.pred_boxes));
  REQUIRE(back.aux_outputs.size() == out.aux_outputs.size());
  CHECK(back.aux_outputs[0].pred_logits.is_same(out.aux_outputs[0].pred_logits));
  CHECK(back.aux_outputs[0].pred_boxes.is_same(out.aux_outputs[0].pred_boxes));
  // The loss over the rebuilt output is the loss over the original (the trainer's graphed path feeds it).
  ly::data::DetectBatch b;
  b.images = torch::zeros({1, 3, 64, 64}, torch::kUInt8);
  b.boxes = {torch::tensor({1.f, 10.f, 12.f, 40.f, 50.f}).view({1, 5})};
  b.targets = b.boxes[0].unsqueeze(0);
  CHECK(fam.loss(back, b).total.item<double>() == fam.loss(out, b).total.item<double>());
  CHECK_THROWS_AS(Codec::unflatten({flat[0], flat[1], flat[2]}), ly::Error);
}
