// The D-FINE line's recipes (D-FINE, DEIM, RT-DETRv4): float32 by default with the reason named when
// amp=true overrides it, the originals' trainer settings after the overrides, the backbone learning
// rate multiplier and decay groups of their _setup_optimizer, and the "EMA restart".
#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/rtdetrv4/family.hpp>
#include <libreyolo/precision/amp.hpp>
#include <libreyolo/train/ema.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ly = libreyolo;

namespace {

template <class F>
void check_fp32_default(const char* model, const char* reason_part) {
  using T = ly::family_traits<F>;
  CAPTURE(model);
  static_assert(!T::amp_default);
  const torch::Device cuda(torch::kCUDA, 0);  // resolve_precision only looks at the device type here
  auto cfg = ly::parse_args({std::string("model=") + model});
  CHECK_FALSE(ly::precision::resolve_precision(cfg, cuda, T::amp_default).amp);
  CHECK(ly::precision::fp32_family_override(cfg, F::name, T::amp_default, T::fp32_reason).empty());
  auto forced = ly::parse_args({std::string("model=") + model, "amp=true"});
  const auto used = ly::precision::resolve_precision(forced, cuda, T::amp_default);
  CHECK(used.amp);
  CHECK(used.dtype == "float16");
  const auto note = ly::precision::fp32_family_override(forced, F::name, T::amp_default, T::fp32_reason);
  CHECK(note.find("amp=true: " + std::string(F::name) + " trains in float32 by default") == 0);
  CHECK(note.find(reason_part) != std::string::npos);
  auto off = ly::parse_args({std::string("model=") + model, "amp=false"});
  CHECK(ly::precision::fp32_family_override(off, F::name, T::amp_default, T::fp32_reason).empty());
  CHECK_FALSE(ly::precision::resolve_precision(off, cuda, T::amp_default).amp);
}

template <class F>
ly::TrainConfig recipe() {
  ly::TrainConfig c;
  ly::apply_overrides(c, ly::family_traits<F>::overrides);
  return c;
}

}  // namespace

TEST_CASE("precision: D-FINE, DEIM and RT-DETRv4 default to float32; amp=true wins and names the reason") {
  check_fp32_default<ly::DFineFamily>("dfinen", "clamps activations at 65504, the largest finite float16");
  check_fp32_default<ly::DEIMFamily>("deimn", "DEIMConfig.amp = False");
  check_fp32_default<ly::RTDETRv4Family>("rtdetrv4s", "inherits DEIM's float32 setting");
}

TEST_CASE("recipes: DFINEConfig, DEIMConfig and RTDETRv4Config after the overrides") {
  const auto d = recipe<ly::DFineFamily>();
  CHECK(ly::config_detail::lower(d.optimizer) == "adamw");
  CHECK(d.lr0 == doctest::Approx(2e-4));
  CHECK(d.weight_decay == doctest::Approx(1e-4));
  CHECK(d.scheduler == "flat_cosine");
  CHECK(d.warmup_epochs == 2);
  CHECK(d.warmup_lr_start == doctest::Approx(1e-6));
  CHECK(d.min_lr_ratio == doctest::Approx(0.05));
  CHECK(d.no_aug_epochs == 4);
  CHECK(d.ema_decay == doctest::Approx(0.9999));
  CHECK(d.ema_restart_decay == doctest::Approx(0.9999));
  CHECK(d.clip_grad_norm == doctest::Approx(0.1));
  CHECK(d.epochs == 132);
  CHECK(d.batch == 16);
  CHECK(d.eval_interval == 10);
  CHECK(d.multi_scale);
  CHECK(d.mosaic == 0.0);
  CHECK(d.mixup == 0.0);
  CHECK(d.hsv_prob == 0.0);
  CHECK(d.fliplr == doctest::Approx(0.5));
  CHECK_FALSE(d.affine);

  const auto e = recipe<ly::DEIMFamily>();
  CHECK(e.lr0 == doctest::Approx(4e-4));
  CHECK(e.no_aug_epochs == 12);
  CHECK(e.min_lr_ratio == doctest::Approx(0.5));
  CHECK(e.scheduler == "flat_cosine");
  CHECK(e.ema_restart_decay == doctest::Approx(0.9999));
  CHECK(e.clip_grad_norm == doctest::Approx(0.1));
  CHECK_FALSE(e.affine);  // the original never reads its degrees = 10 / translate = 0.1

  const auto v = recipe<ly::RTDETRv4Family>();
  CHECK(v.lr0 == doctest::Approx(5e-4));
  CHECK(v.weight_decay == doctest::Approx(1.25e-4));
  CHECK(v.epochs == 58);
  CHECK(v.no_aug_epochs == 12);
  CHECK(v.min_lr_ratio == doctest::Approx(0.5));

  // The losses each reports (the originals' get_loss_components).
  CHECK(ly::DFineFamily::loss_names() == std::vector<std::string>{"vfl", "bbox", "giou", "fgl", "ddf"});
  CHECK(ly::DEIMFamily::loss_names() == std::vector<std::string>{"mal", "bbox", "giou", "fgl", "ddf"});
  CHECK(ly::RTDETRv4Family::loss_names() == std::vector<std::string>{"mal", "bbox", "giou", "fgl", "ddf"});
  // Sizes: every size of the originals' SIZE_CONFIGS constructs (RT-DETRv4 has no n: its INPUT_SIZES).
  for (const char* s : {"n", "s", "m", "l", "x"}) {
    CHECK_NOTHROW(ly::DFineFamily{s});
    CHECK_NOTHROW(ly::DEIMFamily{s});
  }
  for (const char* s : {"s", "m", "l", "x"}) CHECK_NOTHROW(ly::RTDETRv4Family{s});
  CHECK_THROWS_WITH_AS(ly::DFineFamily("q"), doctest::Contains("unknown size; available: dfinen, dfines, dfinem, dfinel, dfinex"),
                       ly::ConfigError);
  CHECK_THROWS_WITH_AS(ly::DEIMFamily("q"), doctest::Contains("unknown size; available: deimn, deims, deimm, deiml, deimx"), ly::ConfigError);
  CHECK_THROWS_WITH_AS(ly::RTDETRv4Family("n"), doctest::Contains("unknown size; available: rtdetrv4s, rtdetrv4m, rtdetrv4l, rtdetrv4x"),
                       ly::ConfigError);
}

TEST_CASE("param groups: the original's {head, backbone} x {decay, none}, backbone at its multiplier (per size)") {
  // lab: the size's backbone has LearnableAffine blocks (n/s/m). At l/x it has none, its norms are
  // FrozenBatchNorm2d (buffers) and its convs bias-free: its no-decay group is empty (the original's
  // _setup_optimizer leaves it out).
  // frozen_stem: the stem's parameters are out of every group (D-FINE, RT-DETRv4; DEIM at l/x).
  auto check = [](auto fam, double mult, bool lab = true, bool frozen_stem = true) {
    CAPTURE(fam.size());
    fam.restore({{"names", std::vector<std::string>{"a", "b"}}});
    auto net = fam.make_network();
    const auto g = fam.param_groups(*net, 1e-4);
    REQUIRE(g.size() == 4);
    CHECK(g[0].lr_mult == 1.0);
    CHECK(g[1].lr_mult == 1.0);
    CHECK(g[2].lr_mult == doctest::Approx(mult));
    CHECK(g[3].lr_mult == doctest::Approx(mult));
    CHECK(g[0].weight_decay == doctest::Approx(1e-4));
    CHECK(g[1].weight_decay == 0.0);
    CHECK(g[2].weight_decay == doctest::Approx(1e-4));
    CHECK(g[3].weight_decay == 0.0);
    size_t n = 0, trainable = 0;
    for (auto& x : g) n += x.params.size();
    for (auto& p : net->named_parameters()) trainable += p.value().requires_grad() ? 1 : 0;
    CHECK(n == trainable);
    // Every group is used (l/x: but the backbone's no-decay one); a backbone norm / lab.scale parameter
    // is in the backbone's no-decay group.
    for (size_t i = 0; i < 3; ++i) CHECK(!g[i].params.empty());
    CHECK(g[3].params.empty() == !lab);
    const auto named = net->named_parameters();
    size_t stem_trainable = 0, stem = 0;
    for (auto& p : named)
      if (p.key().rfind("backbone.stem.", 0) == 0) {
        ++stem;
        stem_trainable += p.value().requires_grad() ? 1 : 0;
      }
    CHECK(stem > 0);
    CHECK(stem_trainable == (frozen_stem ? 0 : stem));
    bool lab_found = false;
    for (auto& p : named) {
      if (p.key().find("lab.scale") == std::string::npos || !p.value().requires_grad() || p.key().rfind("backbone.", 0) != 0) continue;
      lab_found = true;
      bool in3 = false;
      for (auto& t : g[3].params) in3 = in3 || t.is_same(p.value());
      CHECK(in3);
      break;
    }
    CHECK(lab_found == lab);
  };
  check(ly::DFineFamily("n"), 0.5);
  check(ly::DEIMFamily("n"), 0.5, true, false);
  check(ly::RTDETRv4Family("s"), 0.5);
  // The new sizes: D-FINE keeps 0.5 at every size (DFINEConfig.backbone_lr_mult); DEIM and RT-DETRv4
  // follow DEIMTrainer's table (m 0.1, l 0.05, x 0.01); DEIM's stem trains at n/s/m only.
  check(ly::DFineFamily("m"), 0.5);
  check(ly::DFineFamily("x"), 0.5, false);
  check(ly::DEIMFamily("m"), 0.1, true, false);
  check(ly::DEIMFamily("l"), 0.05, false, true);
  check(ly::RTDETRv4Family("m"), 0.1);
  check(ly::RTDETRv4Family("x"), 0.01, false);
  CHECK(ly::families::dfine::deim_backbone_lr_mult("m") == doctest::Approx(0.1));
  CHECK(ly::families::dfine::deim_backbone_lr_mult("l") == doctest::Approx(0.05));
  CHECK(ly::families::dfine::deim_backbone_lr_mult("x") == doctest::Approx(0.01));
}

TEST_CASE("EMA restart: after set_constant_decay the average uses that decay, without the ramp") {
  auto model = torch::nn::Linear(2, 1);
  auto copy = torch::nn::Linear(2, 1);
  ly::train::ModelEMA ema(copy.ptr(), *model, 0.9999, 2000, 0);
  {
    torch::NoGradGuard ng;
    model->weight.fill_(1.0);
  }
  ema.update(*model);
  // The ramp: 0.9999 * (1 - exp(-1 / 2000)) ~ 5e-4 after one update.
  CHECK(ema.current_decay() == doctest::Approx(0.9999 * (1 - std::exp(-1.0 / 2000))));
  ema.set_constant_decay(0.9);
  CHECK(ema.constant_decay() == doctest::Approx(0.9));
  const auto before = copy->weight.clone();
  ema.update(*model);
  CHECK(ema.current_decay() == doctest::Approx(0.9));
  CHECK(torch::allclose(copy->weight, before * 0.9 + 0.1));
  CHECK_THROWS_AS(ema.set_constant_decay(1.5), ly::ConfigError);
  // The key parses and is off by default.
  CHECK(ly::TrainConfig{}.ema_restart_decay == 0.0);
  CHECK(ly::parse_args({"ema_restart_decay=0.99"}).ema_restart_decay == doctest::Approx(0.99));
}

TEST_CASE("the EMA restart is the D-FINE line's epoch hook: a constant decay from the first no-aug epoch on, said once") {
  auto model = torch::nn::Linear(2, 1);
  auto copy = torch::nn::Linear(2, 1);
  ly::train::ModelEMA ema(copy.ptr(), *model, 0.9999, 2000, 0);
  ly::TrainConfig cfg;
  cfg.epochs = 10;
  cfg.no_aug_epochs = 4;
  cfg.ema_restart_decay = 0.999;
  ly::capture::Eager capture;
  ly::train::EpochContext<ly::capture::Eager> ctx{capture, &ema, true};
  std::vector<std::string> lines;
  auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines.emplace_back(m); });
  ly::DEIMFamily f("n");
  for (int e = 0; e < cfg.epochs; ++e) {
    f.on(ly::event::epoch_begin{}, ly::EpochInfo{e, cfg.epochs, {}}, cfg, ctx);
    CHECK(ema.constant_decay() == (e >= 6 ? 0.999 : 0.0));
  }
  // Without an EMA, or with the key at 0, the hook does nothing.
  ly::train::EpochContext<ly::capture::Eager> no_ema{capture, nullptr, true};
  f.on(ly::event::epoch_begin{}, ly::EpochInfo{9, cfg.epochs, {}}, cfg, no_ema);
  ly::train::ModelEMA other(torch::nn::Linear(2, 1).ptr(), *model, 0.9999, 2000, 0);
  ly::train::EpochContext<ly::capture::Eager> off{capture, &other, true};
  cfg.ema_restart_decay = 0;
  f.on(ly::event::epoch_begin{}, ly::EpochInfo{9, cfg.epochs, {}}, cfg, off);
  CHECK(other.constant_decay() == 0.0);
  ly::log::set_sink(prev);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "EMA restart: constant decay 0.999 from epoch 7");
}

TEST_CASE("the D-FINE line's multi-scale is the originals' collate: 13 sizes in [0.75, 1.25] x imgsz, imgsz 3 of 13, until epochs x ratio") {
  // models/dfine/transforms.py _generate_scales(640, 3) of c41461e.
  const std::vector<int> want{480, 512, 544, 576, 608, 640, 640, 640, 800, 768, 736, 704, 672};
  CHECK(ly::DFineFamily::original_scales(640) == want);
  CHECK(ly::DFineFamily::original_scales(320) == std::vector<int>{224, 256, 288, 320, 320, 320, 384, 352, 320});
  CHECK(ly::DFineFamily::original_scales(32) == std::vector<int>{32, 32, 32, 32});  // no size 0
  // Stops at int(epochs x aug_stop_epoch_ratio): D-FINE 0.85, DEIM and RT-DETRv4 0.91.
  auto stop = [](auto fam, int epochs) {
    using F = decltype(fam);
    ly::TrainConfig cfg;
    ly::apply_overrides(cfg, ly::family_traits<F>::overrides);
    cfg.epochs = epochs;
    const auto a = F::augment_from(cfg);
    CHECK(a.multi_scale);
    CHECK(a.multi_scale_sizes == std::vector<int>{480, 512, 544, 576, 608, 640, 640, 640, 800, 768, 736, 704, 672});
    return a.multi_scale_stop_epoch;
  };
  CHECK(stop(ly::DFineFamily(), 10) == 8);
  CHECK(stop(ly::DFineFamily(), 132) == 112);
  CHECK(stop(ly::DEIMFamily(), 10) == 9);
  CHECK(stop(ly::DEIMFamily(), 132) == 120);
  CHECK(stop(ly::RTDETRv4Family(), 58) == 52);
}
