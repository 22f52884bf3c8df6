#pragma once
// The D-FINE line: D-FINE (`dfine{n,s,m,l,x}`), DEIM (`deim{n,s,m,l,x}`, families/deim/) and RT-DETRv4
// (`rtdetrv4{s,m,l,x}`, families/rtdetrv4/) as three policies of one template; EC (`ec-{s,m,l,x}`,
// families/ec/) and DEIMv2 (`deimv2{atto,femto,pico,n}`, families/deimv2/) are two more, each with its
// own network (the V's Network / make_network) and recipe. The first three share one network
// (families/dfine/network.hpp: HGNetv2 backbone + D-FINE hybrid encoder, captured under cuda_graph=true as the
// backbone_encoder region, + the D-FINE decoder with fine-grained distribution refinement, eager) and
// one set loss (nn/detr/dfine_criterion.hpp: Hungarian matching, GO-LSD's union of matches, L1 + GIoU,
// FGL, DDF), with VFL classification (D-FINE) or DEIM's MAL (DEIM, RT-DETRv4: the original's
// RTDETRv4Trainer is a DEIMTrainer). NMS-free decode (top-k over queries x classes).
//
// Recipe: the originals' DFINEConfig / DEIMConfig / RTDETRv4Config (fixtures/libreyolo/<model>/
// config.json trainer_defaults) and trainer.py: AdamW (betas 0.9, 0.999), weight decay except on
// parameters whose name holds "norm", ".bn.", "bias" or "lab.scale", the backbone at lr x 0.5 (D-FINE;
// DEIM and RT-DETRv4 by size: n/s 0.5, m 0.1, l 0.05, x 0.01), flat_cosine after a 2-epoch warm-up
// from 1e-6, gradient clipping at 0.1, EMA 0.9999 with the "EMA restart" (a constant decay 0.9999 from
// the first no-aug epoch on), no_aug_epochs 4 (D-FINE) / 12 (DEIM, RT-DETRv4), validation every 10
// epochs, multi_scale on, float32 by default (amp_default = false).
// Per size: only the DEIM / RT-DETRv4 backbone multiplier changes (DEIMTrainer's table for
// backbone_lr_mult = None); every other DFINEConfig / DEIMConfig / RTDETRv4Config default is one for all
// sizes (the fixtures' config.json trainer_defaults are equal across each family's sizes), and D-FINE's
// backbone_lr_mult is a plain 0.5.
//
// Data: the originals' train transform, RandomPhotometricDistort (p 0.5), RandomZoomOut, RandomIoUCrop
// (p 0.8) until the no-aug epochs (or epochs x aug_stop_epoch_ratio), then horizontal flip (0.5) and a
// resize, is ours too (augment.hpp, the family's pipeline; it letterboxes where they stretch, see there);
// their mosaic_prob, mixup_prob and hsv_prob are 0 and their degrees / translate are never read (the
// pass-through dataset drops them): the same keys here (mosaic 0, mixup 0, hsv_prob 0, fliplr 0.5),
// degrees / translate unread as in the originals, and mosaic / mixup / hsv_prob / flipud other than 0
// refused.
// multi_scale: as the originals' collate (DFINEMultiScaleCollate / DEIMMultiScaleCollate with
// _generate_scales(imgsz, 3)): one size per batch from [0.75, 1.25] x imgsz in steps of 32 with imgsz
// listed 3 times (640: 480..608, 640 x 3, 672..800; 13 entries), until epoch int(epochs x
// aug_stop_epoch_ratio) (0.85 D-FINE, 0.91 DEIM / RT-DETRv4), then imgsz (adjust_augment below). Ours
// renders each sample at the drawn size; theirs resizes the 640 batch bilinearly. DEIM's Dense O2O
// (mosaic) is not in the original LibreYOLO DEIM either (its mosaic_prob is 0).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/dfine/augment.hpp>
#include <libreyolo/families/dfine/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/detail/detr_segment.hpp>
#include <libreyolo/nn/detr/device_targets.hpp>
#include <libreyolo/nn/detr/dfine_criterion.hpp>
#include <libreyolo/nn/detr/topk_decode.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace libreyolo {

namespace families::dfine {

// What the policies share unless they say otherwise: the D-FINE network, the trainer members, float32,
// multi_scale on, MAL's gamma 1.5 (DEIM's), no original config values left unrun, the criterion's
// options as the family sets them (criterion_options: a size's changes). EC (families/ec/family.hpp)
// and DEIMv2 (families/deimv2/family.hpp) bring their own network and recipe: their V defines Network
// and make_network(size, num_classes). Optional in a V, besides: aug_stop_epoch_ratio_of(size) (the
// ratio by size; else aug_stop_epoch_ratio), size_overrides(size) (the size's own recipe keys; its
// members then list member::size_overrides). Defaults a V may hide: base_size_repeat_of(size)
// (multi_scale: how often the base size is among the sizes; 0 as the originals' None: every batch at the
// base size), backbone_lr_prefix(size) (the names trained at backbone_lr_mult), sanitize_min_size_of(size)
// (SanitizeBoundingBoxes' min_size in the train transform).
struct DFineLineV {
  using Network = DFine;
  using members = member::list<member::param_groups, member::optimizer_options, member::epoch_hook, member::ema_restart>;
  static constexpr bool amp_default = false;
  static constexpr bool multi_scale_default = true;
  static constexpr double mal_gamma = 1.5;
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 0> original_config_not_run{};
  static void criterion_options(const std::string& /*size*/, nn::detr::DFineCriterionOptions& /*o*/) {}
  static int base_size_repeat_of(const std::string& /*size*/) { return 3; }
  static std::string backbone_lr_prefix(const std::string& /*size*/) { return "backbone."; }
  static float sanitize_min_size_of(const std::string& /*size*/) { return 1.f; }
};

// The three policies' differences.
struct DFineV : DFineLineV {
  static constexpr std::string_view name = "dfine";
  static constexpr double aug_stop_epoch_ratio = 0.85;  // DFINEConfig.aug_stop_epoch_ratio
  static constexpr std::string_view fixture_prefix = "dfine-";
  static constexpr Variant variant = Variant::dfine;
  static constexpr bool mal = false;
  static constexpr std::array<std::string_view, 5> sizes{"n", "s", "m", "l", "x"};
  static constexpr std::string_view fp32_reason =
      "its decoder clamps activations at 65504, the largest finite float16: DFINEConfig.amp = False";
  static double backbone_lr_mult(const std::string&) { return 0.5; }  // DFINEConfig.backbone_lr_mult
  static constexpr std::array<std::string_view, 24> overrides{
      "optimizer=AdamW",    "lr0=0.0002",        "weight_decay=0.0001", "scheduler=flat_cosine", "warmup_epochs=2",
      "warmup_lr_start=0.000001", "min_lr_ratio=0.05", "no_aug_epochs=4", "ema_decay=0.9999", "ema_restart_decay=0.9999",
      "clip_grad_norm=0.1", "epochs=132",        "batch=16",            "eval_interval=10",      "mosaic=0",
      "mixup=0",            "hsv_prob=0",        "fliplr=0.5",          "degrees=0",             "translate=0",
      "shear=0",            "affine=false",      "multi_scale=true",    "imgsz=640"};
};

// DEIMTrainer's size table for backbone_lr_mult = None (the config's default).
inline double deim_backbone_lr_mult(const std::string& size) {
  if (size == "m") return 0.1;
  if (size == "l") return 0.05;
  if (size == "x") return 0.01;
  return 0.5;  // n, s
}

struct DEIMV : DFineLineV {
  static constexpr std::string_view name = "deim";
  static constexpr double aug_stop_epoch_ratio = 0.91;  // DEIMConfig.aug_stop_epoch_ratio
  static constexpr std::string_view fixture_prefix = "deim-";
  static constexpr Variant variant = Variant::deim;
  static constexpr bool mal = true;
  static constexpr std::array<std::string_view, 5> sizes{"n", "s", "m", "l", "x"};
  static constexpr std::string_view fp32_reason =
      "it shares D-FINE's decoder, which clamps activations at 65504, the largest finite float16: DEIMConfig.amp = False";
  static double backbone_lr_mult(const std::string& size) { return deim_backbone_lr_mult(size); }
  static constexpr std::array<std::string_view, 24> overrides{
      "optimizer=AdamW",    "lr0=0.0004",        "weight_decay=0.0001", "scheduler=flat_cosine", "warmup_epochs=2",
      "warmup_lr_start=0.000001", "min_lr_ratio=0.5", "no_aug_epochs=12", "ema_decay=0.9999", "ema_restart_decay=0.9999",
      "clip_grad_norm=0.1", "epochs=132",        "batch=16",            "eval_interval=10",      "mosaic=0",
      "mixup=0",            "hsv_prob=0",        "fliplr=0.5",          "degrees=10",            "translate=0.1",
      "shear=0",            "affine=false",      "multi_scale=true",    "imgsz=640"};
};

struct RTDETRv4V : DFineLineV {
  static constexpr std::string_view name = "rtdetrv4";
  static constexpr double aug_stop_epoch_ratio = 0.91;  // RTDETRv4Config(DEIMConfig).aug_stop_epoch_ratio
  static constexpr std::string_view fixture_prefix = "rtdetrv4-";
  static constexpr Variant variant = Variant::rtdetrv4;
  static constexpr bool mal = true;  // RTDETRv4Trainer is a DEIMTrainer
  static constexpr std::array<std::string_view, 4> sizes{"s", "m", "l", "x"};
  static constexpr std::string_view fp32_reason = "it inherits DEIM's float32 setting: RTDETRv4Config(DEIMConfig).amp = False";
  static double backbone_lr_mult(const std::string& size) { return deim_backbone_lr_mult(size); }
  static constexpr std::array<std::string_view, 24> overrides{
      "optimizer=AdamW",    "lr0=0.0005",        "weight_decay=0.000125", "scheduler=flat_cosine", "warmup_epochs=2",
      "warmup_lr_start=0.000001", "min_lr_ratio=0.5", "no_aug_epochs=12", "ema_decay=0.9999", "ema_restart_decay=0.9999",
      "clip_grad_norm=0.1", "epochs=58",         "batch=16",              "eval_interval=10",      "mosaic=0",
      "mixup=0",            "hsv_prob=0",        "fliplr=0.5",            "degrees=10",            "translate=0.1",
      "shear=0",            "affine=false",      "multi_scale=true",      "imgsz=640"};
};

// Targets of a detection batch in the DETR form (the original's on_forward): per image, labels and cx,
// cy, w, h normalised by the network input's width and height and clamped to [0, 1]; rows without a
// positive width and height dropped; on `dev` (nn/detr/denoising.hpp's detr_targets_of).
inline auto dfine_cxcywh(const data::DetectBatch& b) {
  const double H = static_cast<double>(b.images.size(2)), W = static_cast<double>(b.images.size(3));
  return [H, W](const torch::Tensor& x1, const torch::Tensor& y1, const torch::Tensor& x2, const torch::Tensor& y2) {
    return torch::stack({(x1 + x2) / (2 * W), (y1 + y2) / (2 * H), (x2 - x1) / W, (y2 - y1) / H}, 1).clamp(0.0, 1.0);
  };
}
inline std::vector<nn::detr::DetrTarget> dfine_targets(const data::DetectBatch& b, torch::Device dev) {
  return nn::detr::detr_targets_of(b.boxes, dev, dfine_cxcywh(b));
}
// The same as fixed [B, M] slots made on the device from the batch's targets tensor (a recorded step's part A).
inline nn::detr::PaddedTargets dfine_device_targets(const data::DetectBatch& b) {
  return nn::detr::padded_targets_of(b.targets, nn::detr::valid_counts(b.boxes, b.targets.size(1)), dfine_cxcywh(b));
}

// V: the policy's differences (above, on DFineLineV's defaults).
template <class V>
class DFineFamilyT : public tasks::DetectTask<DFineFamilyT<V>> {
  using Base = tasks::DetectTask<DFineFamilyT<V>>;
  static double aug_stop_ratio(const std::string& size) {
    if constexpr (requires { V::aug_stop_epoch_ratio_of(size); }) return V::aug_stop_epoch_ratio_of(size);
    else return V::aug_stop_epoch_ratio;
  }

 public:
  using Batch = typename Base::Batch;
  static constexpr std::string_view name = V::name;
  static constexpr auto sizes = V::sizes;
  struct traits : family_defaults {
    using members = member::with<typename V::members, member::segmented_step>;
    static constexpr bool step_capturable = true;  // in two parts (member::segmented_step)
    static constexpr bool amp_default = V::amp_default;
    static constexpr std::string_view fp32_reason = V::fp32_reason;
    static constexpr CaptureRegion capture_region = CaptureRegion::backbone_encoder;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    static constexpr bool multi_scale_default = V::multi_scale_default;
    static constexpr auto overrides = V::overrides;
    static constexpr auto original_config_not_run = V::original_config_not_run;
    static constexpr std::string_view fixture_prefix = V::fixture_prefix;
  };
  using Network = typename V::Network;

  explicit DFineFamilyT(std::string size = std::string(V::sizes[0])) : Base(std::move(size)) {
    families::require_size<DFineFamilyT>(this->size_);
  }

  Network make_network() const {
    if constexpr (requires { V::make_network(this->size_, this->num_classes()); })
      return V::make_network(this->size_, this->num_classes());
    else
      return Network(DFineOptions{this->size_, this->num_classes(), V::variant, 640});
  }
  // The size's own recipe keys (where V has them).
  std::vector<std::string> size_overrides() const
    requires requires { V::size_overrides(std::string{}); }
  {
    return V::size_overrides(this->size_);
  }

  // The originals' multi-scale sizes (models/dfine/transforms.py _generate_scales at c41461e): multiples of
  // 32 from int(0.75 base / 32) x 32 up to base (exclusive), base `repeat` times, then from
  // int(1.25 base / 32) x 32 down to above base. Sizes below 32 (an imgsz under 43) are left out.
  static std::vector<int> original_scales(int base, int repeat = 3) {
    const int lo = static_cast<int>(base * 0.75 / 32) * 32, hi = static_cast<int>(base * 1.25 / 32) * 32;
    const int n = (base - lo) / 32;
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(lo + i * 32);
    for (int i = 0; i < repeat; ++i) out.push_back(base);
    for (int i = 0; i < n; ++i) out.push_back(hi - i * 32);
    std::erase_if(out, [](int v) { return v < 32; });
    return out;
  }
  // multi_scale as the originals (header comment): their sizes, until int(epochs x aug_stop_epoch_ratio).
  // The originals' train transform (augment.hpp) in place of the built-in pipeline, its strong
  // augmentations until the same epoch.
  static void adjust_augment(data::DetectAugment& a, const TrainConfig& cfg, const std::string& size) {
    const int repeat = V::base_size_repeat_of(size);
    a.multi_scale_sizes = repeat > 0 ? original_scales(a.imgsz, repeat) : std::vector<int>{a.imgsz};
    a.multi_scale_stop_epoch = static_cast<int>(cfg.epochs * aug_stop_ratio(size));
    use_strong_aug_pipeline(a, a.multi_scale_stop_epoch, V::sanitize_min_size_of(size));
  }

  void setup(const TrainConfig& cfg) {
    Base::setup(cfg);
    if (cfg.cuda_graph != GraphMode::off && cfg.multi_scale)
      log::notice_once(std::string("dfine.multi_scale.") + std::string(V::name),
                       "multi_scale=true: shapes change every batch; pass multi_scale=false if speed is the goal");
  }

  // The set loss; in training the decoder runs here, with the batch's targets (denoising queries).
  // The targets are padded once, for the decoder's denoising part and the criterion.
  train::LossOutput loss(const nn::detr::DFineNetOutput& out, const Batch& b) {
    const auto dev = out.features.front().device();
    const auto t = nn::detr::pad_targets(dfine_targets(b, dev), dev);
    auto l = criterion()(out.run(&t), t);
    return {l.total, l.items};
  }

  // cuda_graph=step (issue 44; member::segmented_step), as RT-DETR's (families/rtdetr/family.hpp): part A's
  // end the device-made targets, the decoder at its denoising capacity and the matching costs; the host
  // solves the matches and GO-LSD's union; part B the loss from them.
  capture::Segment match_segment(const nn::detr::DFineNetOutput& out, const Batch& b) {
    return segment_.match(criterion(), out, dfine_device_targets(b));
  }
  train::LossOutput loss_given(const nn::detr::DFineNetOutput& out, const Batch& /*b*/, const torch::Tensor& given) {
    return segment_.loss(criterion(), out, given);
  }
  static std::vector<std::string> loss_names() { return {V::mal ? "mal" : "vfl", "bbox", "giou", "fgl", "ddf"}; }

  // NMS-free decode (the original's postprocess/dfine.py: width and height clamped at 0 before the
  // corners): nn/detr/topk_decode.hpp.
  std::vector<torch::Tensor> decode(const nn::detr::DFineNetOutput& out, const tasks::DecodeOptions& o) const {
    const auto& r = out.run();
    return nn::detr::topk_decode(r.pred_logits, r.pred_boxes, out.input_hw[0], out.input_hw[1], o.conf, o.max_det,
                                 nn::detr::dfine_detail::cxcywh_to_xyxy);
  }

  // The original's four groups (_setup_optimizer): {head, backbone} x {decay, none}; no decay where the
  // name holds "norm", ".bn.", "bias" or "lab.scale"; the backbone ("backbone." names, or the V's
  // backbone_lr_prefix(size): DEIMv2's ViT sizes, the ViT only) at lr x its multiplier. The full-LR
  // groups first (the epoch line shows group 0's lr).
  std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) const {
    const double bb = V::backbone_lr_mult(this->size_);
    const std::string prefix = V::backbone_lr_prefix(this->size_);
    std::vector<train::ParamGroup> g{{"decay", {}, weight_decay, 0, 1.0},
                                     {"norm_bias", {}, 0.0, 0, 1.0},
                                     {"backbone", {}, weight_decay, 0, bb},
                                     {"backbone_norm_bias", {}, 0.0, 0, bb}};
    std::unordered_set<const void*> seen;  // a tensor under several names (DEIMv2's shared box head): once
    for (const auto& p : net.named_parameters()) {
      if (!p.value().requires_grad() || !seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
      const std::string& k = p.key();
      const bool no_wd = k.find("norm") != std::string::npos || k.find(".bn.") != std::string::npos ||
                         k.find("bias") != std::string::npos || k.find("lab.scale") != std::string::npos;
      const bool backbone = k.rfind(prefix, 0) == 0;
      g[(backbone ? 2 : 0) + (no_wd ? 1 : 0)].params.push_back(p.value());
    }
    return g;
  }
  // AdamW with the original's betas (0.9, 0.999): `momentum` (0.937 in its config) is SGD's only.
  static void optimizer_options(train::OptimizerOptions& o, const TrainConfig&) {
    if (config_detail::lower(o.name) == "adamw") o.momentum = 0.9;
  }

  // The original's EMA restart (ema_restart_decay; dfine/trainer.py, deim/trainer.py): a constant decay
  // from the first no-aug epoch on, decided by the epoch alone, so a resumed run gets it too.
  template <class Capture>
  void on(event::epoch_begin, const EpochInfo& info, const TrainConfig& cfg, train::EpochContext<Capture>& ctx) {
    epoch_ = info.epoch;  // the criterion's (DEIMv2's matcher change)
    // DEIMv2's matcher change: a recorded step's matching costs (part A) follow the old formula; re-record.
    if (const int64_t change = criterion_options().matcher_change_epoch; change >= 0 && info.epoch == change)
      ctx.capture.invalidate("the matching cost changes at epoch " + std::to_string(change + 1));
    const double d = cfg.ema_restart_decay;
    if (!ctx.ema || d <= 0 || cfg.no_aug_epochs <= 0 || info.epoch < cfg.epochs - cfg.no_aug_epochs ||
        ctx.ema->constant_decay() == d)
      return;
    ctx.ema->set_constant_decay(d);
    if (ctx.main) log::info("EMA restart: constant decay ", d, " from epoch ", info.epoch + 1);
  }

  // Loading the original's .pt checkpoints: its state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

  // The criterion's options as this family trains a size (tests/dfine/test_criterion.cpp runs them against
  // the original's criteria).
  static nn::detr::DFineCriterionOptions criterion_options(const std::string& size, int64_t num_classes) {
    nn::detr::DFineCriterionOptions co;
    co.num_classes = num_classes;
    if constexpr (V::mal) {
      co.class_loss = nn::detr::DFineClassLoss::mal;
      co.gamma = V::mal_gamma;
    }
    V::criterion_options(size, co);
    return co;
  }

 private:
  nn::detr::DFineCriterionOptions criterion_options() const { return criterion_options(this->size_, this->num_classes()); }
  nn::detr::DFineCriterion& criterion() {
    if (!criterion_) criterion_ = std::make_unique<nn::detr::DFineCriterion>(criterion_options());
    criterion_->set_epoch(epoch_);
    return *criterion_;
  }
  std::unique_ptr<nn::detr::DFineCriterion> criterion_;
  families::detail::DetrSegment segment_;
  int64_t epoch_ = 0;
};

}  // namespace families::dfine

using DFineFamily = families::dfine::DFineFamilyT<families::dfine::DFineV>;

}  // namespace libreyolo
