#pragma once
// The RT-DETR family, v1 (`rtdetr-r18`, `-r34`, `-r50`, `-r50m`, `-r101`) and v2 (`rtdetrv2-r18`, ...,
// families/rtdetrv2/) as two policies of one template; the sizes are network.hpp's kRTDETRSizes (the
// original's RTDETR_CONFIGS). PResNet-vd backbone + hybrid encoder (captured under cuda_graph=true:
// capture region backbone_encoder) + DETR decoder with contrastive denoising (eager), the set loss with
// Hungarian matching (nn/detr/criterion.hpp), NMS-free decode (top-k over queries x classes).
//
// Recipe: the original's RTDETRConfig, the same for every size (fixtures/libreyolo/rtdetr{,v2}-r18,
// -r34, -r50/config.json and tests/fixtures/libreyolo/rtdetr{,v2}-r50m, -r101/config.json hold equal
// trainer_defaults; its trainer reads no size): AdamW lr 1e-4,
// betas (0.9, 0.999), weight decay 1e-4, constant LR without warm-up, backbone at 0.05x the LR (its
// lr_backbone 5e-6 / lr0 1e-4; backbone norms and every encoder/decoder norm and bias without weight
// decay, the original's regex groups; r50/r50m/r101's frozen backbone norms are buffers, in no group), gradient
// clipping at 0.1, EMA 0.9999, batch 4, 72 epochs, validation every epoch; data as its YOLO9 transform
// with mosaic off: no affine, YOLOX's additive HSV with probability 0.5, horizontal flip 0.5, at the
// fixed imgsz: multi_scale=false, as the original's RTDETRConfig has no multi-scale key and its trainer
// resizes no batch (docs/fidelity.md).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/rtdetr/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/detail/detr_segment.hpp>
#include <libreyolo/nn/detr/criterion.hpp>
#include <libreyolo/nn/detr/device_targets.hpp>
#include <libreyolo/nn/detr/topk_decode.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <array>
#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

namespace families::rtdetr {

struct V1 {
  static constexpr std::string_view name = "rtdetr-";
  static constexpr bool v2 = false;
  static constexpr int64_t eval_spatial_size = 0;  // anchors and position embeddings made per input size
};
struct V2 {
  static constexpr std::string_view name = "rtdetrv2-";
  static constexpr bool v2 = true;
  static constexpr int64_t eval_spatial_size = 640;  // the original's fixed eval size (anchor buffers)
};

// The backbone's learning rate relative to lr0 (the original's lr_backbone / lr0 = 5e-6 / 1e-4).
inline constexpr double backbone_lr_ratio = 0.05;

// Targets of a detection batch in the DETR form: per image, labels and cx, cy, w, h normalised by the
// network input's width and height (the original's convert_targets_for_detr; rows with x2 <= x1 or
// y2 <= y1 dropped), on `dev` (nn/detr/denoising.hpp's detr_targets_of).
inline auto detr_cxcywh(const data::DetectBatch& b) {
  const double H = static_cast<double>(b.images.size(2)), W = static_cast<double>(b.images.size(3));
  return [H, W](const torch::Tensor& c1, const torch::Tensor& r1, const torch::Tensor& c2, const torch::Tensor& r2) {
    auto x1 = c1 / W, y1 = r1 / H, x2 = c2 / W, y2 = r2 / H;
    return torch::stack({(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1}, 1);
  };
}
inline std::vector<nn::detr::DetrTarget> detr_targets(const data::DetectBatch& b, torch::Device dev) {
  return nn::detr::detr_targets_of(b.boxes, dev, detr_cxcywh(b));
}
// The same as fixed [B, M] slots made on the device from the batch's targets tensor [B, M, 5] (no host
// read: a recorded step's part A), M its padded row count.
inline nn::detr::PaddedTargets detr_device_targets(const data::DetectBatch& b) {
  return nn::detr::padded_targets_of(b.targets, nn::detr::valid_counts(b.boxes, b.targets.size(1)), detr_cxcywh(b));
}

template <class V>
class RTDETRFamilyT : public tasks::DetectTask<RTDETRFamilyT<V>> {
  using Base = tasks::DetectTask<RTDETRFamilyT<V>>;

 public:
  using Batch = typename Base::Batch;
  static constexpr std::string_view name = V::name;
  // The original trains v1 and v2 through YOLOv9's transform, which pads right and below
  // (models/rtdetr/trainer.py:158 -> models/yolo9/transforms.py preproc; docs/fidelity.md row 33). It
  // validates stretched; ours validates letterboxed by default, so in the corner too, as it trained.
  static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::top_left;
  static constexpr std::array<std::string_view, 5> sizes{"r18", "r34", "r50", "r50m", "r101"};
  struct traits : family_defaults {
    using members = member::list<member::param_groups, member::optimizer_options, member::segmented_step>;
    static constexpr bool amp_default = true;
    static constexpr bool step_capturable = true;  // in two parts (member::segmented_step)
    static constexpr CaptureRegion capture_region = CaptureRegion::backbone_encoder;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    static constexpr std::array<std::string_view, 19> overrides{
        "optimizer=AdamW", "lr0=0.0001",    "weight_decay=0.0001", "scheduler=constant", "warmup_epochs=0",
        "no_aug_epochs=0", "ema_decay=0.9999", "clip_grad_norm=0.1", "epochs=72",        "batch=4",
        "mosaic=0",        "mixup=0",       "affine=false",        "hsv_mode=add",       "hsv_h=5",
        "hsv_s=30",        "hsv_v=30",      "hsv_prob=0.5",        "multi_scale=false"};
    static constexpr std::string_view fixture_prefix = V::name;
  };
  using Network = RTDETR;

  explicit RTDETRFamilyT(std::string size = "r18") : Base(std::move(size)) {
    families::require_size<RTDETRFamilyT>(this->size_);
  }

  Network make_network() const {
    return Network(RTDETROptions{this->size_, this->num_classes(), V::v2, V::eval_spatial_size});
  }

  void setup(const TrainConfig& cfg) {
    Base::setup(cfg);
    if (cfg.cuda_graph != GraphMode::off && cfg.multi_scale)
      log::notice_once(std::string("rtdetr.multi_scale.") + std::string(V::name),
                       "multi_scale=true: shapes change every batch; pass multi_scale=false if speed is the goal");
  }

  // The set loss; in training the decoder runs here, with the batch's targets (denoising queries).
  // The targets are padded once, for the decoder's denoising part and the criterion.
  train::LossOutput loss(const RTDETROutput& out, const Batch& b) {
    const auto dev = out.features.front().device();
    const auto t = nn::detr::pad_targets(detr_targets(b, dev), dev);
    auto l = criterion()(out.run(&t), t);
    return {l.total, l.items};
  }

  // cuda_graph=step (issue 44; member::segmented_step): the same loss in two parts with the Hungarian solve on
  // the host between them. Part A's end: the targets as [B, M] slots made on the device from the batch's
  // targets tensor, the decoder with its denoising part at the fixed capacity for M, every matched output's
  // costs (one buffer the host copies, with the solve that reads it). Part B: the loss from the solve's
  // slots. A batch's loss this way equals loss(out, b) with the denoising part at that capacity.
  capture::Segment match_segment(const RTDETROutput& out, const Batch& b) {
    return segment_.match(criterion(), out, detr_device_targets(b));
  }
  train::LossOutput loss_given(const RTDETROutput& out, const Batch& /*b*/, const torch::Tensor& given) {
    return segment_.loss(criterion(), out, given);
  }
  static std::vector<std::string> loss_names() { return {"vfl", "bbox", "giou"}; }

  // NMS-free decode (the original's postprocess/rtdetr.py): nn/detr/topk_decode.hpp.
  std::vector<torch::Tensor> decode(const RTDETROutput& out, const tasks::DecodeOptions& o) const {
    const auto& r = out.run();
    return nn::detr::topk_decode(r.pred_logits, r.pred_boxes, out.input_hw[0], out.input_hw[1], o.conf, o.max_det,
                                 nn::detr::box_cxcywh_to_xyxy);
  }

  // The original's parameter groups (first match wins): backbone norms (lr x 0.05, no decay), the rest
  // of the backbone (lr x 0.05), encoder/decoder parameters whose name holds "norm" or "bias" (no
  // decay), everything else.
  static std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) {
    // Listed full-LR group first (the epoch line shows group 0's lr).
    std::vector<train::ParamGroup> g{{"decay", {}, weight_decay, 0, 1.0},
                                     {"norm_bias", {}, 0.0, 0, 1.0},
                                     {"backbone", {}, weight_decay, 0, backbone_lr_ratio},
                                     {"backbone_norm", {}, 0.0, 0, backbone_lr_ratio}};
    for (const auto& p : net.named_parameters()) {
      if (!p.value().requires_grad()) continue;
      const std::string& k = p.key();
      const bool bb = k.find("backbone") != std::string::npos;
      const bool norm = k.find("norm") != std::string::npos || k.find("bn") != std::string::npos;
      const bool head = k.find("encoder") != std::string::npos || k.find("decoder") != std::string::npos;
      size_t i = 0;
      if (bb && norm) i = 3;
      else if (bb) i = 2;
      else if (head && (k.find("norm") != std::string::npos || k.find("bias") != std::string::npos)) i = 1;
      g[i].params.push_back(p.value());
    }
    return g;
  }
  // AdamW with the original's betas (0.9, 0.999): `momentum` (0.937 in its config) is SGD's only.
  static void optimizer_options(train::OptimizerOptions& o, const TrainConfig&) {
    if (config_detail::lower(o.name) == "adamw") o.momentum = 0.9;
  }

  // Loading the original's .pt checkpoints: its state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

 private:
  nn::detr::SetCriterion& criterion() {
    if (!criterion_) {
      nn::detr::SetCriterionOptions co;
      co.num_classes = this->num_classes();
      co.enc_aux = !V::v2;  // v2's criterion (the original's RTDETRLoss) only reads aux_outputs, not enc_aux_outputs
      criterion_ = std::make_unique<nn::detr::SetCriterion>(co);
    }
    return *criterion_;
  }
  std::unique_ptr<nn::detr::SetCriterion> criterion_;
  families::detail::DetrSegment segment_;
};

}  // namespace families::rtdetr

using RTDETRFamily = families::rtdetr::RTDETRFamilyT<families::rtdetr::V1>;

}  // namespace libreyolo
