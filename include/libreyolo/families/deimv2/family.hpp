#pragma once
// DEIMv2 (`deimv2{atto,femto,pico,n}`; the original's models/deimv2 at c41461e): the D-FINE line's
// template (families/dfine/family.hpp) over DEIMv2's network (families/deimv2/network.hpp) with the
// original's DEIMv2Trainer recipe.
//
// Recipe (DEIMv2Config, the fixtures' trainer_defaults, equal for every size): DEIM's (AdamW betas 0.9 /
// 0.999, no weight decay on names holding "norm", ".bn.", "bias" or "lab.scale", flat_cosine, gradient
// clipping 0.1, EMA 0.9999 with the EMA restart, no_aug_epochs 12, min_lr_ratio 0.5, multi_scale, the
// strong-augmentation pipeline until the aug-stop epoch, degrees / translate unread) with lr0 5e-4, batch
// 32, warm-up from 0 and AMP on (DEIMv2Config.amp = True). The backbone trains at lr x 0.5 (every
// HGNetv2 size's backbone_lr_mult).
// Per size (DEIMV2_SIZE_DEFAULTS, applied by DEIMv2Trainer for keys the user left alone; here
// size_overrides()): atto imgsz 320, femto 416, pico / n 640; atto..pico 500 epochs of batch 128, lr0 2e-3
// (atto) / 1.6e-3 (femto, pico), no_aug_epochs 32, aug stop at epoch 468 of 500; n 160 epochs of batch 32,
// lr0 8e-4, min_lr_ratio 1.0 (no decay), aug stop at 148 of 160.
// Not reproduced: the original's warm-up in iterations (warmup_iters 4000 / 2000, used unless epochs is
// given; here warmup_epochs 2, what the original falls back to when epochs is given), its flat_epochs
// (here the flat phase ends where the no-aug epochs start, as DEIM's), sanitize_min_size.
// Loss (DEIMv2Criterion over DEIM's, nn/detr/dfine_criterion.hpp with options): MAL (gamma 1.5, alpha
// 0.75), L1 5 + GIoU 2; FGL 0.15 + DDF 1.5 ("local") for n only (atto..pico: losses ("mal", "boxes")); the
// GO-LSD union of matches for the box / local terms for n only (use_uni_set); the matcher's cost switches
// to -score x IoU^4 from epoch 450 (atto..pico) / 136 (n) (change_matcher, iou_order_alpha 4), an epoch
// beyond a default-length run's no-aug start.
//
// Sizes s, m, l, x (DINOv3 / ViT-tiny backbones with the spatial-tuning adapter, ImageNet-normalised
// input) are not implemented yet; the original starts them from converted pretrained ViT weights.
#include <libreyolo/families/deimv2/network.hpp>
#include <libreyolo/families/dfine/family.hpp>

#include <string>
#include <vector>

namespace libreyolo {

namespace families::deimv2 {

struct DEIMv2V : dfine::DFineLineV {
  using Network = DEIMv2;
  static constexpr std::string_view name = "deimv2";
  static constexpr double aug_stop_epoch_ratio = 468.0 / 500.0;
  static double aug_stop_epoch_ratio_of(const std::string& size) { return size == "n" ? 148.0 / 160.0 : 468.0 / 500.0; }
  static constexpr std::string_view fixture_prefix = "deimv2-";
  static constexpr dfine::Variant variant = dfine::Variant::deim;  // unused: the network is DEIMv2's
  static constexpr bool mal = true;
  static constexpr bool amp_default = true;  // DEIMv2Config.amp = True
  using members = member::list<member::param_groups, member::optimizer_options, member::epoch_hook, member::ema_restart,
                               member::size_overrides>;
  static constexpr std::array<std::string_view, 4> sizes{"atto", "femto", "pico", "n"};
  static constexpr std::string_view fp32_reason = "DEIMv2 trains with AMP by default";
  static double backbone_lr_mult(const std::string&) { return 0.5; }  // DEIMV2_SIZE_DEFAULTS, every HGNetv2 size
  static constexpr std::array<std::string_view, 24> overrides{
      "optimizer=AdamW",    "lr0=0.0005",        "weight_decay=0.0001", "scheduler=flat_cosine", "warmup_epochs=2",
      "warmup_lr_start=0",  "min_lr_ratio=0.5",  "no_aug_epochs=12",    "ema_decay=0.9999",      "ema_restart_decay=0.9999",
      "clip_grad_norm=0.1", "epochs=132",        "batch=32",            "eval_interval=10",      "mosaic=0",
      "mixup=0",            "hsv_prob=0",        "fliplr=0.5",          "degrees=10",            "translate=0.1",
      "shear=0",            "affine=false",      "multi_scale=true",    "imgsz=640"};
  static std::vector<std::string> size_overrides(const std::string& size) {
    if (size == "n") return {"imgsz=640", "epochs=160", "batch=32", "lr0=0.0008", "no_aug_epochs=12", "min_lr_ratio=1.0"};
    const std::string lr = size == "atto" ? "lr0=0.002" : "lr0=0.0016";
    const std::string imgsz = size == "atto" ? "imgsz=320" : size == "femto" ? "imgsz=416" : "imgsz=640";
    return {imgsz, "epochs=500", "batch=128", lr, "no_aug_epochs=32", "min_lr_ratio=0.5"};
  }
  static DEIMv2 make_network(const std::string& size, int64_t num_classes) { return DEIMv2(DEIMv2Options{size, num_classes, 0}); }
  static void criterion_options(const std::string& size, nn::detr::DFineCriterionOptions& o) {
    const bool n = size == "n";
    o.local_losses = n;
    o.uni_set = n;
    o.matcher_change_epoch = n ? 136 : 450;
    o.iou_order_alpha = 4.0;
  }
};

}  // namespace families::deimv2

using DEIMv2Family = families::dfine::DFineFamilyT<families::deimv2::DEIMv2V>;

}  // namespace libreyolo
