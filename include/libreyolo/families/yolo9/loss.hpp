#pragma once
// YOLOv9 detection loss as the original (LibreYOLO's YOLO9Loss, from MultimediaTechLab/YOLO) computes
// it: its BoxMatcher assignment (assign/box_matcher.hpp), BCE on class logits against the soft scores,
// CIoU box loss and distribution focal loss (DFL) on positives, each weighted by the positive's summed
// target score and normalised by the total target score; total = 7.5 box + 0.5 cls + 1.5 dfl, a mean
// over the batch (not multiplied by the batch size).
// Positives are selected by multiplying with the fg mask instead of boolean indexing, so the loss has
// fixed shapes and never synchronises with the device.
#include <libreyolo/assign/box_ops.hpp>
#include <libreyolo/assign/box_matcher.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/yolo9/postprocess.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolo9 {

// Distribution focal loss (Li et al. 2020): cross-entropy against the two bins around each continuous
// target distance, weighted by closeness, averaged over the 4 sides.
// pred_dist [..., 4·reg_max] logits, target [..., 4] in [0, reg_max - 1) -> [...].
inline torch::Tensor distribution_focal_loss(const torch::Tensor& pred_dist, const torch::Tensor& target,
                                             int64_t reg_max) {
  auto logp = dfl_bins(pred_dist, reg_max).log_softmax(-1);
  auto left = target.to(torch::kInt64);
  auto right = left + 1;
  auto w_left = right.to(target.scalar_type()) - target;
  auto w_right = 1.0 - w_left;
  auto nll_left = -logp.gather(-1, left.unsqueeze(-1)).squeeze(-1);
  auto nll_right = -logp.gather(-1, right.unsqueeze(-1)).squeeze(-1);
  return (nll_left * w_left + nll_right * w_right).mean(-1);
}

struct DetLossOutput {
  torch::Tensor total;  // scalar, differentiable: box + cls + dfl after their gains
  torch::Tensor items;  // [3] box, cls, dfl after their gains; detached
};

class DetectionLoss {
 public:
  DetectionLoss(std::vector<int64_t> strides, int64_t nc, int64_t reg_max = 16, double box = 7.5, double cls = 0.5,
                double dfl = 1.5, assign::BoxMatcherOptions match = {})
      : strides_(std::move(strides)), nc_(nc), reg_max_(reg_max), box_gain_(box), cls_gain_(cls), dfl_gain_(dfl),
        assigner_(nc, with_reg_max(match, reg_max)) {
    if (reg_max_ < 2) throw ConfigError("DetectionLoss: reg_max must be >= 2, got " + std::to_string(reg_max_));
    if (strides_.empty()) throw ConfigError("DetectionLoss: strides must not be empty");
  }

  // feats: the network's raw maps [B, 4·reg_max + nc, H/s, W/s]; targets [B, M, 5] rows (class, x1,
  // y1, x2, y2) in input pixels, padding rows with class -1 (M may be 0).
  DetLossOutput operator()(const std::vector<torch::Tensor>& feats, const torch::Tensor& targets) const {
    check_inputs(feats, targets);
    std::vector<torch::Tensor> feats32;  // all loss math in float32, whatever the autocast dtype
    for (const auto& f : feats) feats32.push_back(f.to(torch::kFloat32));
    auto [pred_dist, pred_logits] = split_head_outputs(feats32, reg_max_);  // [B,A,4R], [B,A,nc]
    auto anchors = make_anchors(feats32, strides_);
    auto pred_boxes = dist2bbox(dfl_decode(pred_dist, reg_max_), anchors.points);  // grid units

    auto t = targets.to(pred_logits.device(), torch::kFloat32);
    auto gt_labels = t.narrow(2, 0, 1);
    auto gt_boxes = t.narrow(2, 1, 4);
    auto mask_gt = (gt_labels >= 0).to(torch::kFloat32);
    auto assigned = assigner_(pred_logits.detach().sigmoid(), pred_boxes.detach() * anchors.strides,
                              anchors.points * anchors.strides, anchors.strides, gt_labels, gt_boxes, mask_gt);

    auto score_sum = assigned.scores.sum().clamp_min(1.0);
    auto cls_loss = torch::binary_cross_entropy_with_logits(pred_logits, assigned.scores, {}, {},
                                                            at::Reduction::None).sum() / score_sum;

    // Positives weighted by their summed target score; background rows get weight 0.
    auto weight = assigned.scores.sum(-1) * assigned.fg_mask;                  // [B, A]
    auto target_boxes = assigned.bboxes / anchors.strides;                     // grid units
    auto box_loss = ((1.0 - assign::ciou(pred_boxes, target_boxes)) * weight).sum() / score_sum;
    auto target_ltrb = bbox2dist(anchors.points, target_boxes, static_cast<double>(reg_max_) - 1.01);
    auto dfl_loss = (distribution_focal_loss(pred_dist, target_ltrb, reg_max_) * weight).sum() / score_sum;

    auto items = torch::stack({box_loss * box_gain_, cls_loss * cls_gain_, dfl_loss * dfl_gain_});
    return {items.sum(), items.detach()};
  }

  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t num_classes() const { return nc_; }
  int64_t reg_max() const { return reg_max_; }

 private:
  void check_inputs(const std::vector<torch::Tensor>& feats, const torch::Tensor& targets) const {
    if (feats.size() != strides_.size())
      throw ConfigError("DetectionLoss: got " + std::to_string(feats.size()) + " feature maps for " +
                        std::to_string(strides_.size()) + " strides");
    for (const auto& f : feats)
      if (f.dim() != 4 || f.size(1) != 4 * reg_max_ + nc_)
        throw ConfigError("DetectionLoss: feature maps must be [B, " + std::to_string(4 * reg_max_ + nc_) +
                          ", H, W] (4·reg_max + nc)");
    if (targets.dim() != 3 || targets.size(2) != 5 || targets.size(0) != feats.front().size(0))
      throw DataError("DetectionLoss: targets must be [B, M, 5] = (class, x1, y1, x2, y2) with B = " +
                      std::to_string(feats.front().size(0)));
  }

  static assign::BoxMatcherOptions with_reg_max(assign::BoxMatcherOptions o, int64_t reg_max) {
    o.reg_max = reg_max;
    return o;
  }
  std::vector<int64_t> strides_;
  int64_t nc_, reg_max_;
  double box_gain_, cls_gain_, dfl_gain_;
  assign::BoxMatcher assigner_;
};

}  // namespace libreyolo::families::yolo9
