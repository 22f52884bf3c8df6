#pragma once
// The RTMDet family: t on the detection task. CSPNeXt + CSPNeXtPAFPN + the head whose convolutions are
// shared across levels with per-level BatchNorms (network.hpp), the dynamic soft-label assigner, quality
// focal loss + GIoU (loss.hpp), the original's recipe (its RTMDetConfig, fixtures/libreyolo/rtmdet-t/
// config.json) and the whole network as the capture region (cuda_graph=step: the whole training step).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/rtmdet/loss.hpp>
#include <libreyolo/families/rtmdet/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/yolox/augment.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

class RtmdetFamily : public tasks::DetectTask<RtmdetFamily> {
 public:
  static constexpr std::string_view name = "rtmdet";
  // The original pads right and below (training/augment.py preproc, RTMDetValPreprocessor, predict).
  static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::top_left;
  static constexpr std::array<std::string_view, 5> sizes{"t", "s", "m", "l", "x"};
  struct traits : family_defaults {
    using members = member::list<member::param_groups>;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    // Its loss (the soft-label assigner on padded targets, masks, a tensor normaliser) has fixed shapes
    // and reads nothing back: cuda_graph=step records the whole step.
    static constexpr bool step_capturable = true;
    // The original's RTMDetConfig (mmdet's rtmdet recipe): AdamW lr0 0.004, weight decay 0.05 on conv
    // weights (BatchNorm weights and biases: AdamW's default 0.01, as the original's groups get; see
    // param_groups()); its config says scheduler "cos", but its trainer's create_scheduler ignores that and
    // always runs YOLOX's WarmupCosineScheduler (models/rtmdet/trainer.py:53-62): yoloxwarmcos here, a
    // 1-epoch quadratic warm-up from 4e-8, cosine, min_lr_ratio 0.05 held for the last no_aug_epochs (20);
    // EMA 0.9998; validation every
    // 10 epochs; its MosaicMixupDataset (yolox/augment.hpp) with no rotation / translation / shear, mosaic
    // scale (0.1, 2.0) (drawn by that pipeline; scale= set by the user gives 1 ± scale), mixup with
    // probability 1, flips 0.5, YOLOX's additive HSV jitter.
    static constexpr std::array<std::string_view, 16> overrides{
        "optimizer=AdamW", "lr0=0.004",  "momentum=0.9", "weight_decay=0.05", "scheduler=yoloxwarmcos",
        "warmup_epochs=1", "warmup_lr_start=4e-8", "no_aug_epochs=20", "eval_interval=10", "mixup=1.0",
        "translate=0",     "scale=0.9",  "hsv_mode=add", "hsv_h=5", "hsv_s=30", "hsv_v=30"};
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 1> original_config_not_run{
        {{"scheduler", "cos"}}};
    static constexpr std::string_view fixture_prefix = "rtmdet-";
  };
  using Network = families::rtmdet::Rtmdet;

  explicit RtmdetFamily(std::string size = "t") : DetectTask(std::move(size)) {
    families::require_size<RtmdetFamily>(size_);
  }

  Network make_network() const { return Network(families::rtmdet::RtmdetOptions{size_, num_classes()}); }

  // The original's input: BGR 0..255 normalised with mmdet's mean / std (in BGR order). Scalar
  // arithmetic per channel: no host-to-device copy of constants in the step.
  static torch::Tensor from_pixels(const torch::Tensor& rgb255) {
    const double mean[3] = {103.53, 116.28, 123.675}, stdev[3] = {57.375, 57.12, 58.395};
    std::vector<torch::Tensor> ch;
    for (int64_t c = 0; c < 3; ++c) ch.push_back((rgb255.narrow(1, 2 - c, 1) - mean[c]) / stdev[c]);
    return torch::cat(ch, 1);
  }

  train::LossOutput loss(const std::vector<torch::Tensor>& feats, const Batch& b) {
    if (!loss_) loss_ = std::make_unique<families::rtmdet::RtmdetLoss>(strides(), num_classes());
    auto out = (*loss_)(feats, b.targets);
    return {out.total, out.items};
  }
  static std::vector<std::string> loss_names() { return {"cls", "bbox"}; }

  // Head maps -> [B, A, 4 + nc]: xyxy boxes in input pixels (priors at cell corners), sigmoid scores.
  static torch::Tensor decode_predictions(const std::vector<torch::Tensor>& feats) {
    auto rows = families::rtmdet::flatten_levels(feats);
    auto priors = families::rtmdet::make_priors(feats, strides());
    auto boxes = families::rtmdet::distance2bbox(priors.narrow(1, 0, 2), rows.narrow(-1, 0, 4));
    return torch::cat({boxes, rows.narrow(-1, 4, rows.size(-1) - 4).sigmoid()}, -1);
  }
  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& feats, const tasks::DecodeOptions& o) const {
    torch::NoGradGuard ng;
    return tasks::detect::non_max_suppression(decode_predictions(feats), o);
  }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }

  void setup(const TrainConfig& cfg) {
    adamw_ = config_detail::lower(cfg.optimizer) == "adamw";
    DetectTask::setup(cfg);
  }
  // The original's groups (BaseTrainer._setup_optimizer): weight_decay on conv weights only, but its
  // BatchNorm-weight and bias groups carry no weight_decay key, so torch.optim.AdamW gives them its default
  // 0.01 (decoupled); under SGD (default 0) they stay undecayed.
  std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) const {
    return train::original_base_groups(net, weight_decay, adamw_);
  }

  // The original's RTMDet trainer uses YOLOX's MosaicMixupDataset + TrainTransform (families/yolox/augment.hpp):
  // its affine and mixup, and no affine / mixup once mosaic closes.
  static void adjust_augment(data::DetectAugment& a, const TrainConfig& cfg, const std::string& /*size*/ = {}) {
    families::yolox::use_mosaic_mixup_pipeline(a, cfg);
  }

  // The original's state-dict names equal ours; its 8 aliases of the shared head convs
  // (head.{cls,reg}_convs.{1,2}.{0,1}.conv.weight) have no counterpart here (level 0's conv is the one).
  static std::string original_key(const std::string& ours) { return ours; }

 private:
  std::unique_ptr<families::rtmdet::RtmdetLoss> loss_;
  bool adamw_ = true;
};

}  // namespace libreyolo
