// The YOLO-NAS and YOLOv7 recipes: precision defaults (YOLO-NAS trains in float32 unless amp=true is
// given, YOLOv7 under AMP) and the original's trainer settings after the family overrides.
#include <libreyolo/families/yolonas/family.hpp>
#include <libreyolo/families/yolov7/family.hpp>
#include <libreyolo/precision/amp.hpp>

#include <doctest/doctest.h>

namespace ly = libreyolo;

TEST_CASE("precision: YOLO-NAS defaults to float32, amp=true turns AMP on; YOLOv7 defaults to AMP") {
  using Nas = ly::family_traits<ly::YoloNasFamily>;
  using V7 = ly::family_traits<ly::Yolov7Family>;
  static_assert(!Nas::amp_default);
  static_assert(V7::amp_default);
  const torch::Device cuda(torch::kCUDA, 0);  // resolve_precision only looks at the device type for float16
  auto cfg = ly::parse_args({"model=yolonass"});
  CHECK_FALSE(ly::precision::resolve_precision(cfg, cuda, Nas::amp_default).amp);
  CHECK(ly::precision::resolve_precision(cfg, cuda, V7::amp_default).amp);
  auto forced = ly::parse_args({"model=yolonass", "amp=true"});
  const auto used = ly::precision::resolve_precision(forced, cuda, Nas::amp_default);
  CHECK(used.amp);
  CHECK(used.dtype == "float16");
  CHECK(used.scaler);
  auto off = ly::parse_args({"model=yolo7b", "amp=false"});
  CHECK_FALSE(ly::precision::resolve_precision(off, cuda, V7::amp_default).amp);
  // The explicit override is announced once with the family's reason; nothing without it or for an AMP family.
  const auto note = ly::precision::fp32_family_override(forced, ly::YoloNasFamily::name, Nas::amp_default,
                                                        Nas::fp32_reason);
  CHECK(note.find("amp=true: yolonas trains in float32 by default") == 0);
  CHECK(note.find("YOLONASConfig.amp = False") != std::string::npos);
  CHECK(ly::precision::fp32_family_override(cfg, "yolonas", Nas::amp_default, Nas::fp32_reason).empty());
  CHECK(ly::precision::fp32_family_override(ly::parse_args({"model=yolonass", "amp=false"}), "yolonas",
                                            Nas::amp_default, Nas::fp32_reason).empty());
  CHECK(ly::precision::fp32_family_override(ly::parse_args({"model=yolo7b", "amp=true"}), "yolov7", V7::amp_default,
                                            V7::fp32_reason).empty());
  // On a CPU every run is float32.
  CHECK_FALSE(ly::precision::resolve_precision(forced, torch::kCPU, Nas::amp_default).amp);
}

TEST_CASE("recipes: the original's YOLONASConfig and YOLOv7Config after the overrides") {
  ly::TrainConfig nas;
  ly::apply_overrides(nas, ly::family_traits<ly::YoloNasFamily>::overrides);
  CHECK(ly::config_detail::lower(nas.optimizer) == "adamw");
  CHECK(nas.lr0 == doctest::Approx(5e-4));
  CHECK(nas.weight_decay == doctest::Approx(1e-5));
  CHECK(nas.scheduler == "cos");
  CHECK(nas.warmup_epochs == 1);
  CHECK(nas.warmup_lr_start == doctest::Approx(1e-6));
  CHECK(nas.min_lr_ratio == doctest::Approx(0.1));
  CHECK(nas.no_aug_epochs == 0);
  CHECK(nas.ema_decay == doctest::Approx(0.9997));
  CHECK(nas.mosaic == 0.0);
  CHECK(nas.mixup == doctest::Approx(0.5));
  CHECK(nas.translate == doctest::Approx(0.25));
  CHECK(nas.scale == doctest::Approx(0.5));  // the original's mosaic_scale (0.5, 1.5)
  CHECK(nas.hsv_prob == doctest::Approx(0.5));
  CHECK(nas.eval_interval == 10);

  ly::TrainConfig v7;
  ly::apply_overrides(v7, ly::family_traits<ly::Yolov7Family>::overrides);
  CHECK(ly::config_detail::lower(v7.optimizer) == "sgd");
  CHECK(v7.lr0 == doctest::Approx(0.01));
  CHECK(v7.momentum == doctest::Approx(0.937));
  CHECK(v7.weight_decay == doctest::Approx(5e-4));
  CHECK(v7.scheduler == "yoloxwarmcos");
  CHECK(v7.warmup_epochs == 3);
  CHECK(v7.no_aug_epochs == 15);
  CHECK(v7.min_lr_ratio == doctest::Approx(0.05));
  CHECK(v7.ema_decay == doctest::Approx(0.9999));
  CHECK(v7.mosaic == 1.0);
  CHECK(v7.mixup == 1.0);
  CHECK_FALSE(v7.affine);
  CHECK(v7.hsv_mode == "add");
  CHECK(v7.eval_interval == 10);
}

TEST_CASE("YOLO-NAS validation and predict letterbox: 636 centred on 640, as the original's preprocess_numpy") {
  CHECK(libreyolo::YoloNasFamily::letterbox_fit(640) == 636);
  CHECK(libreyolo::YoloNasFamily::letterbox_fit(320) == 318);
  CHECK(libreyolo::YoloNasFamily::letterbox_place == libreyolo::data::LetterboxPlace::centre);
  libreyolo::TrainConfig cfg;
  cfg.imgsz = 640;
  cfg.mosaic = 0;  // the recipe's (its pipeline refuses a mosaic)
  CHECK(libreyolo::YoloNasFamily::augment_from(cfg, "s").letterbox_fit == 636);
  CHECK(libreyolo::Yolov7Family::augment_from(cfg, "b").letterbox_fit == 0);  // the others: 0, the canvas itself
}
