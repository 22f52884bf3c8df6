#pragma once
// DEIMv2 (`deimv2{atto,femto,pico,n,s,m,l,x}`; the original's models/deimv2 at c41461e): the D-FINE line's
// template (families/dfine/family.hpp) over DEIMv2's network (families/deimv2/network.hpp) with the
// original's DEIMv2Trainer recipe.
//
// Recipe (DEIMv2Config, the fixtures' trainer_defaults, equal for every size): DEIM's (AdamW betas 0.9 /
// 0.999, no weight decay on names holding "norm", ".bn.", "bias" or "lab.scale", flat_cosine, gradient
// clipping 0.1, EMA 0.9999 with the EMA restart, no_aug_epochs 12, min_lr_ratio 0.5, the
// strong-augmentation pipeline until the aug-stop epoch, degrees / translate unread) with lr0 5e-4, batch
// 32, warm-up from 0 and AMP on (DEIMv2Config.amp = True).
// Per size (DEIMV2_SIZE_DEFAULTS, applied by DEIMv2Trainer for keys the user left alone; here
// size_overrides()):
//   atto imgsz 320, femto 416, the others 640;
//   atto..pico 500 epochs of batch 128, lr0 2e-3 (atto) / 1.6e-3 (femto, pico), no_aug_epochs 32, aug stop
//     at epoch 468 of 500; n 160 epochs of batch 32, lr0 8e-4, min_lr_ratio 1.0 (no decay), aug stop at
//     148 of 160; the backbone at lr x 0.5;
//   s / m / l / x: 132 / 102 / 68 / 58 epochs of batch 32, lr0 5e-4, weight decay 1e-4 (s, m) / 1.25e-4
//     (l, x), no_aug_epochs 12 / 12 / 8 / 8, min_lr_ratio 0.5, aug stop at epoch 120 / 90 / 60 / 50; the
//     ViT alone ("backbone.dinov3." names; the adapter's conv branch and projections train at the full lr)
//     at lr x 0.05 / 0.05 / 0.025 / 0.02.
//   Multi-scale (the collate's base_size_repeat): s 20, m 6, l / x 3 copies of the base size among the
//   sizes; atto..n none (their base_size_repeat None: the original's collate keeps every batch at imgsz),
//   so multi_scale=false there.
//   The schedule: the original's DEIMv2FlatCosineScheduler (scheduler=deimv2_flat_cosine, train/schedule.hpp):
//   quadratic warm-up, lr0 until flat_epochs (250 atto..pico / 7800 n / 64 s / 49 m / 34 l / 29 x: past
//   the no-aug start on short runs, so the lr stays lr0), a cosine to min_lr at the no-aug start, min_lr
//   after. SanitizeBoundingBoxes' min_size (sanitize_min_size 12 / 10 / 8 for atto / femto / pico, else 1):
//   after the strong augmentations and after the resize (families/dfine/augment.hpp).
// Not reproduced: the original's warm-up in iterations (warmup_iters 4000 / 2000, used unless epochs is
// given; here warmup_epochs 2, what the original falls back to when epochs is given).
// Loss (DEIMv2Criterion over DEIM's, nn/detr/dfine_criterion.hpp with options): MAL (gamma 1.5, alpha
// 0.75), L1 5 + GIoU 2; FGL 0.15 + DDF 1.5 ("local") for n..x only (atto..pico: losses ("mal", "boxes"));
// the GO-LSD union of matches for the box / local terms for n..x only (use_uni_set); the matcher's cost
// switches to -score x IoU^4 from epoch 450 (atto..pico) / 136 (n) / 100 (s) / 80 (m) / 50 (l) / 45 (x)
// (change_matcher, iou_order_alpha 4).
//
// Sizes s..x are meant to start from the original's pretrained ViT backbones (DINOv3 ViT-S/16 (+) and the
// distilled ViT-Tiny (+) checkpoints, converted: the same names, weights=); from scratch they train, but
// far below the published accuracy.
#include <libreyolo/families/deimv2/network.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/sizes.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

namespace families::deimv2 {

// One row of DEIMV2_SIZE_DEFAULTS (with DEIMv2Trainer's optimizer groups and criterion settings) per size.
struct DEIMv2Recipe {
  std::string_view imgsz, epochs, batch, lr0, weight_decay, no_aug_epochs, min_lr_ratio, flat_epochs;
  double aug_stop_epoch_ratio;
  double backbone_lr_mult;
  int base_size_repeat;  // 0: None (multi_scale=false)
  float sanitize_min_size;
  int matcher_change_epoch;
  bool vit;  // s..x: the ViT backbone (its own lr group, the local losses and the union of matches)
};

inline const DEIMv2Recipe& deimv2_recipe(const std::string& size) {
  static const SizeTable<DEIMv2Recipe, 8> table{{
      {"atto", {"320", "500", "128", "0.002", "0.0001", "32", "0.5", "250", 468.0 / 500.0, 0.5, 0, 12, 450, false}},
      {"femto", {"416", "500", "128", "0.0016", "0.0001", "32", "0.5", "250", 468.0 / 500.0, 0.5, 0, 10, 450, false}},
      {"pico", {"640", "500", "128", "0.0016", "0.0001", "32", "0.5", "250", 468.0 / 500.0, 0.5, 0, 8, 450, false}},
      {"n", {"640", "160", "32", "0.0008", "0.0001", "12", "1.0", "7800", 148.0 / 160.0, 0.5, 0, 1, 136, false}},
      {"s", {"640", "132", "32", "0.0005", "0.0001", "12", "0.5", "64", 120.0 / 132.0, 0.05, 20, 1, 100, true}},
      {"m", {"640", "102", "32", "0.0005", "0.0001", "12", "0.5", "49", 90.0 / 102.0, 0.05, 6, 1, 80, true}},
      {"l", {"640", "68", "32", "0.0005", "0.000125", "8", "0.5", "34", 60.0 / 68.0, 0.025, 3, 1, 50, true}},
      {"x", {"640", "58", "32", "0.0005", "0.000125", "8", "0.5", "29", 50.0 / 58.0, 0.02, 3, 1, 45, true}},
  }};
  return require_row(table, "deimv2", size);
}

struct DEIMv2V : dfine::DFineLineV {
  using Network = DEIMv2;
  static constexpr std::string_view name = "deimv2";
  static double aug_stop_epoch_ratio_of(const std::string& size) { return deimv2_recipe(size).aug_stop_epoch_ratio; }
  static constexpr std::string_view fixture_prefix = "deimv2-";
  static constexpr dfine::Variant variant = dfine::Variant::deim;  // unused: the network is DEIMv2's
  static constexpr bool mal = true;
  static constexpr bool amp_default = true;  // DEIMv2Config.amp = True
  using members = member::list<member::param_groups, member::optimizer_options, member::epoch_hook, member::ema_restart,
                               member::size_overrides>;
  static constexpr std::array<std::string_view, 8> sizes{"atto", "femto", "pico", "n", "s", "m", "l", "x"};
  static constexpr std::string_view fp32_reason = "DEIMv2 trains with AMP by default";
  // DEIMv2Config.scheduler says "flat_cosine", but DEIMv2Trainer.create_scheduler ignores it and runs its own
  // DEIMv2FlatCosineScheduler: here scheduler=deimv2_flat_cosine.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 1> original_config_not_run{{{"scheduler", "flat_cosine"}}};
  static double backbone_lr_mult(const std::string& size) { return deimv2_recipe(size).backbone_lr_mult; }
  // DEIMv2Trainer._setup_optimizer: the ViT sizes' backbone group holds the ViT only.
  static std::string backbone_lr_prefix(const std::string& size) { return deimv2_recipe(size).vit ? "backbone.dinov3." : "backbone."; }
  static int base_size_repeat_of(const std::string& size) { return deimv2_recipe(size).base_size_repeat; }
  static float sanitize_min_size_of(const std::string& size) { return deimv2_recipe(size).sanitize_min_size; }
  static constexpr std::array<std::string_view, 24> overrides{
      "optimizer=AdamW",    "lr0=0.0005",        "weight_decay=0.0001", "scheduler=deimv2_flat_cosine", "warmup_epochs=2",
      "warmup_lr_start=0",  "min_lr_ratio=0.5",  "no_aug_epochs=12",    "ema_decay=0.9999",      "ema_restart_decay=0.9999",
      "clip_grad_norm=0.1", "epochs=132",        "batch=32",            "eval_interval=10",      "mosaic=0",
      "mixup=0",            "hsv_prob=0",        "fliplr=0.5",          "degrees=10",            "translate=0.1",
      "shear=0",            "affine=false",      "multi_scale=true",    "imgsz=640"};
  static std::vector<std::string> size_overrides(const std::string& size) {
    const DEIMv2Recipe& r = deimv2_recipe(size);
    const auto kv = [](const char* k, std::string_view v) { return std::string(k) + "=" + std::string(v); };
    return {kv("imgsz", r.imgsz),
            kv("epochs", r.epochs),
            kv("batch", r.batch),
            kv("lr0", r.lr0),
            kv("weight_decay", r.weight_decay),
            kv("no_aug_epochs", r.no_aug_epochs),
            kv("min_lr_ratio", r.min_lr_ratio),
            kv("flat_epochs", r.flat_epochs),
            r.base_size_repeat > 0 ? "multi_scale=true" : "multi_scale=false"};
  }
  static DEIMv2 make_network(const std::string& size, int64_t num_classes) { return DEIMv2(DEIMv2Options{size, num_classes, 0, true}); }
  static void criterion_options(const std::string& size, nn::detr::DFineCriterionOptions& o) {
    const DEIMv2Recipe& r = deimv2_recipe(size);
    const bool local = size == "n" || r.vit;  // DEIMV2_SIZE_DEFAULTS' losses / use_uni_set: n..x
    o.local_losses = local;
    o.uni_set = local;
    o.matcher_change_epoch = r.matcher_change_epoch;
    o.iou_order_alpha = 4.0;
  }
};

}  // namespace families::deimv2

using DEIMv2Family = families::dfine::DFineFamilyT<families::deimv2::DEIMv2V>;

}  // namespace libreyolo
