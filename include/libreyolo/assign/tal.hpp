#pragma once
// Task-aligned assigner (TOOD, Feng et al. 2021) as used by YOLOv8/YOLOv9 training: an anchor is a
// candidate for a gt when its point lies inside the gt box; among candidates the top-k by the
// alignment metric score^alpha · CIoU^beta become positives; an anchor claimed by several gts goes
// to the one it overlaps most. Works on padded targets with fixed shapes and never reads a value back
// to the host, so it can run inside a step without synchronising the device.
#include <libreyolo/assign/box_ops.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace libreyolo::assign {

struct TalOptions {
  int64_t topk = 10;
  double alpha = 0.5;  // weight of the classification score in the alignment metric
  double beta = 6.0;   // weight of the localisation overlap
  double eps = 1e-9;
};

struct TalResult {
  torch::Tensor labels;   // [B, A] int64 class of the assigned gt (0 where background: see fg_mask)
  torch::Tensor bboxes;   // [B, A, 4] xyxy box of the assigned gt (gt 0's box where background)
  torch::Tensor scores;   // [B, A, nc] one-hot class × normalised alignment; zero rows for background
  torch::Tensor fg_mask;  // [B, A] bool, true for positives
  torch::Tensor gt_index; // [B, A] int64 index of the assigned gt within its image
};

class TaskAlignedAssigner {
 public:
  TaskAlignedAssigner(int64_t num_classes, TalOptions options = {}) : nc_(num_classes), opt_(options) {
    if (nc_ < 1) throw ConfigError("TaskAlignedAssigner: num_classes must be >= 1, got " + std::to_string(nc_));
    if (opt_.topk < 1) throw ConfigError("TaskAlignedAssigner: topk must be >= 1, got " + std::to_string(opt_.topk));
  }

  // pd_scores [B, A, nc] probabilities; pd_bboxes [B, A, 4] xyxy pixels; anchors [A, 2] points in
  // pixels; gt_labels [B, M, 1]; gt_bboxes [B, M, 4] xyxy pixels; mask_gt [B, M, 1] (1 = real gt).
  // Call under NoGradGuard or with detached predictions: the targets carry no gradient.
  TalResult operator()(const torch::Tensor& pd_scores, const torch::Tensor& pd_bboxes, const torch::Tensor& anchors,
                       const torch::Tensor& gt_labels, const torch::Tensor& gt_bboxes,
                       const torch::Tensor& mask_gt) const {
    torch::NoGradGuard no_grad;
    const int64_t batch = pd_scores.size(0), num_anchors = pd_scores.size(1), max_boxes = gt_bboxes.size(1);
    auto fopts = pd_scores.options().dtype(torch::kFloat32);
    if (max_boxes == 0) {  // a shape, not a value: no host read
      auto zeros_long = torch::zeros({batch, num_anchors}, fopts.dtype(torch::kInt64));
      return {zeros_long, torch::zeros({batch, num_anchors, 4}, fopts), torch::zeros({batch, num_anchors, nc_}, fopts),
              torch::zeros({batch, num_anchors}, fopts.dtype(torch::kBool)), zeros_long.clone()};
    }
    auto scores = pd_scores.to(torch::kFloat32);
    auto pboxes = pd_bboxes.to(torch::kFloat32);
    auto gboxes = gt_bboxes.to(torch::kFloat32);
    auto labels = gt_labels.to(torch::kInt64).clamp_min(0);           // padding rows may carry -1
    auto valid = mask_gt.to(torch::kFloat32);                         // [B, M, 1]

    auto in_gts = candidates_in_gts(anchors.to(torch::kFloat32), gboxes);    // [B, M, A]
    auto candidate = in_gts * valid;
    // Score of each gt's class at each anchor, and the CIoU of gt vs predicted box.
    auto cls_scores = scores.permute({0, 2, 1}).gather(1, labels.view({batch, max_boxes, 1}).expand({-1, -1, num_anchors}));
    auto overlaps = ciou(gboxes.unsqueeze(2), pboxes.unsqueeze(1)).clamp_min(0) * candidate;  // [B, M, A]
    auto align = (cls_scores * candidate).pow(opt_.alpha) * overlaps.pow(opt_.beta);

    auto pos = topk_mask(align, valid) * candidate;                    // [B, M, A] 0/1
    // An anchor positive for several gts keeps only the gt with the largest overlap.
    auto multi = (pos.sum(1, true) > 1).expand({-1, max_boxes, -1});
    auto best_gt = torch::zeros_like(pos).scatter_(1, overlaps.argmax(1, true), 1.0);
    pos = torch::where(multi, best_gt, pos);
    auto fg = pos.sum(1) > 0;                                          // [B, A]
    auto gt_index = pos.argmax(1);                                     // [B, A]

    // Gather the assigned gt's class and box per anchor.
    auto flat_index = gt_index + torch::arange(batch, gt_index.options()).unsqueeze(1) * max_boxes;
    auto t_labels = labels.view({-1}).index_select(0, flat_index.view({-1})).view({batch, num_anchors});
    auto t_boxes = gboxes.view({-1, 4}).index_select(0, flat_index.view({-1})).view({batch, num_anchors, 4});
    // scatter rather than one_hot: one_hot validates the labels by reading them back on some builds.
    auto t_scores = torch::zeros({batch, num_anchors, nc_}, fopts).scatter_(-1, t_labels.unsqueeze(-1), 1.0) *
                    fg.unsqueeze(-1);

    // Soft targets: each positive's alignment rescaled so that the best-aligned anchor of its gt gets
    // that gt's best overlap.
    align = align * pos;
    auto max_align = align.amax(-1, true);                             // [B, M, 1]
    auto max_overlap = (overlaps * pos).amax(-1, true);                // [B, M, 1]
    auto norm = (align * max_overlap / (max_align + opt_.eps)).amax(1).unsqueeze(-1);  // [B, A, 1]
    return {t_labels, t_boxes, t_scores * norm, fg, gt_index};
  }

  int64_t num_classes() const { return nc_; }
  const TalOptions& options() const { return opt_; }

 private:
  // [B, M, A] 1 where the anchor point lies strictly inside the gt box (all four margins > eps).
  torch::Tensor candidates_in_gts(const torch::Tensor& points, const torch::Tensor& gboxes) const {
    auto p = points.view({1, 1, -1, 2});
    auto lt = p - gboxes.narrow(-1, 0, 2).unsqueeze(2);
    auto rb = gboxes.narrow(-1, 2, 2).unsqueeze(2) - p;
    return (torch::cat({lt, rb}, -1).amin(-1) > opt_.eps).to(torch::kFloat32);
  }

  // [B, M, A] 1 at each real gt's top-k anchors by metric. Padding gts point all their k picks at
  // anchor 0; counting picks and dropping counts > 1 removes those (and topk never repeats an index
  // for a real gt), the same bookkeeping as Ultralytics without a data-dependent branch.
  torch::Tensor topk_mask(const torch::Tensor& metric, const torch::Tensor& valid) const {
    const int64_t k = std::min<int64_t>(opt_.topk, metric.size(-1));
    auto idx = std::get<1>(metric.topk(k, -1, /*largest=*/true));
    idx = idx.masked_fill(valid.expand({-1, -1, k}) == 0, 0);
    auto count = torch::zeros_like(metric).scatter_add_(-1, idx, torch::ones_like(idx, metric.options()));
    return count.masked_fill(count > 1, 0);
  }

  int64_t nc_;
  TalOptions opt_;
};

}  // namespace libreyolo::assign
