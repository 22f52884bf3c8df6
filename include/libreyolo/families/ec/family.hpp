#pragma once
// EC, EdgeCrafter (`ec-s`, `ec-m`, `ec-l`, `ec-x`): the D-FINE line's template (families/dfine/family.hpp)
// with EC's network (families/ec/network.hpp: ECViT backbone, EC's hybrid encoder, the D-FINE decoder
// with EC's options) and EC's policy.
//
// Recipe: the original's ECConfig (training/config.py at c41461e; fixtures/libreyolo/ec-<size>/
// config.json trainer_defaults) and ECTrainer (models/ec/trainer.py, a DFINETrainer): AMP on, AdamW
// lr0 5e-4 (betas 0.9, 0.999), weight decay 1e-4 except on norms / biases (the D-FINE line's four
// groups), the backbone at lr x 0.05 (backbone_lr_mult, every size), flat_cosine after a 2-epoch warm-up
// from 1e-6 down to 0.5 x lr0 over the last no_aug_epochs = 4, 74 epochs, batch 16, EMA 0.9999 with
// the restart (constant 0.9999 from the first no-aug epoch), gradient clipping at 0.1, multi_scale off,
// validation every 10 epochs. Loss: ECCriterion = D-FINE's criterion with MAL (gamma 2, no alpha on the
// negatives) + L1 (5) + GIoU (2) + FGL (0.15) + DDF (1.5), matcher costs class 2 / bbox 5 / GIoU 2
// (focal, alpha 0.25, gamma 2): nn/detr/dfine_criterion.hpp with those options.
// Data: DFINETrainTransform (as D-FINE's: augment.hpp's strong pipeline, here until epoch
// int(epochs x 0.97), aug_stop_epoch_ratio) with ImageNet normalisation, which our network applies
// itself (ECOptions::imagenet_norm); ECConfig's mosaic / mixup / hsv / degrees / translate are not read
// by that pass-through dataset (the D-FINE line's note), so they are 0 / unread here too.
// The original marks EC training EXPERIMENTAL (LibreEC.train needs allow_experimental=True: "not
// validated by a full fine-tune"); the newer Libre-YOLO/libreyolo keeps the same ECTrainer criterion and
// the same marking, so this follows c41461e's ECConfig. The original also starts EC from pretrained
// backbone weights (the EdgeCrafter ECViT checkpoints); `ec-<size>` here starts from scratch unless
// given weights.
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/ec/network.hpp>

#include <array>
#include <string>
#include <string_view>
#include <utility>

namespace libreyolo {

namespace families::ec {

struct ECV : dfine::DFineLineV {
  using Network = EC;
  static Network make_network(const std::string& size, int64_t num_classes) { return EC(ECOptions{size, num_classes, 640, true}); }
  static constexpr std::string_view name = "ec-";
  static constexpr double aug_stop_epoch_ratio = 0.97;  // ECConfig.aug_stop_epoch_ratio
  static constexpr std::string_view fixture_prefix = "ec-";
  static constexpr bool mal = true;
  static constexpr double mal_gamma = 2.0;  // ECTrainer's ECCriterion(gamma=2.0)
  static constexpr bool amp_default = true;  // ECConfig.amp
  static constexpr bool multi_scale_default = false;  // ECConfig.multi_scale
  static constexpr std::array<std::string_view, 4> sizes{"s", "m", "l", "x"};
  static constexpr std::string_view fp32_reason = "";  // amp on by default
  static double backbone_lr_mult(const std::string&) { return 0.05; }  // ECConfig.backbone_lr_mult
  // ECConfig's values that ECTrainer never runs: DFINEPassThroughDataset drops mosaic / mixup, and
  // DFINETrainTransform's photometric distortion has its own fixed p (0.5), reading no hsv_prob.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 3> original_config_not_run{
      {{"mosaic_prob", "0.75"}, {"mixup_prob", "0.75"}, {"hsv_prob", "0.5"}}};
  static constexpr std::array<std::string_view, 24> overrides{
      "optimizer=AdamW",    "lr0=0.0005",        "weight_decay=0.0001", "scheduler=flat_cosine", "warmup_epochs=2",
      "warmup_lr_start=0.000001", "min_lr_ratio=0.5", "no_aug_epochs=4", "ema_decay=0.9999", "ema_restart_decay=0.9999",
      "clip_grad_norm=0.1", "epochs=74",         "batch=16",            "eval_interval=10",      "mosaic=0",
      "mixup=0",            "hsv_prob=0",        "fliplr=0.5",          "degrees=10",            "translate=0.1",
      "shear=0",            "affine=false",      "multi_scale=false",   "imgsz=640"};
};

}  // namespace families::ec

using ECFamily = families::dfine::DFineFamilyT<families::ec::ECV>;

}  // namespace libreyolo
