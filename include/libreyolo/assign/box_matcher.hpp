#pragma once
// The original's YOLOv9 assigner (LibreYOLO's BoxMatcher, from MultimediaTechLab/YOLO): task-aligned
// assignment with the rules of that code, which differ from Ultralytics' TAL in four places:
//   - an anchor is a candidate for a gt when its point lies inside the box, boundary included, and the
//     box's farthest side is within reg_max - 1.01 strides of it (so the DFL can reach it);
//   - the top-k anchors per gt are taken by iou^6 * score^0.5 among candidates, keeping only non-zero
//     values;
//   - a gt left with no anchor gets its best-scoring anchor over all anchors (if its score is > 0);
//   - an anchor claimed by several gts goes to the gt with the largest IoU among those claimants.
// IoU is CIoU clamped to [0, 1]. Class targets are one-hot × (alignment / best alignment of the gt) ×
// best IoU of the gt. Everything is fixed-shape tensor work with padded gts: no host reads.
#include <libreyolo/assign/box_ops.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace libreyolo::assign {

struct BoxMatcherOptions {
  int64_t topk = 10;
  double iou_factor = 6.0;  // exponent of the IoU in the alignment
  double cls_factor = 0.5;  // exponent of the class score
  int64_t reg_max = 16;
};

struct BoxMatch {
  torch::Tensor scores;    // [B, A, nc] soft class targets (zero rows for background)
  torch::Tensor bboxes;    // [B, A, 4] xyxy pixels of the assigned gt (gt 0's box where background)
  torch::Tensor fg_mask;   // [B, A] float 0/1, positives
  torch::Tensor gt_index;  // [B, A] int64 index of the assigned gt in its image (0 where background)
};

class BoxMatcher {
 public:
  BoxMatcher(int64_t num_classes, BoxMatcherOptions o = {}) : nc_(num_classes), o_(o) {
    if (nc_ < 1) throw ConfigError("BoxMatcher: num_classes must be >= 1, got " + std::to_string(nc_));
    if (o_.topk < 1) throw ConfigError("BoxMatcher: topk must be >= 1, got " + std::to_string(o_.topk));
    if (o_.reg_max < 2) throw ConfigError("BoxMatcher: reg_max must be >= 2, got " + std::to_string(o_.reg_max));
  }

  // pd_scores [B, A, nc] class probabilities; pd_bboxes [B, A, 4] xyxy pixels; anchors [A, 2] points in
  // pixels; strides [A] or [A, 1]; gt_labels [B, M, 1]; gt_bboxes [B, M, 4] xyxy pixels; mask_gt
  // [B, M, 1] 1 for real gts, 0 for padding.
  BoxMatch operator()(const torch::Tensor& pd_scores, const torch::Tensor& pd_bboxes, const torch::Tensor& anchors,
                      const torch::Tensor& strides, const torch::Tensor& gt_labels, const torch::Tensor& gt_bboxes,
                      const torch::Tensor& mask_gt) const {
    torch::NoGradGuard no_grad;
    const int64_t B = pd_scores.size(0), A = pd_scores.size(1), M = gt_bboxes.size(1);
    auto f32 = pd_scores.options().dtype(torch::kFloat32);
    if (M == 0) {
      auto zl = torch::zeros({B, A}, f32.dtype(torch::kInt64));
      return {torch::zeros({B, A, nc_}, f32), torch::zeros({B, A, 4}, f32), torch::zeros({B, A}, f32), zl};
    }
    auto scores = pd_scores.to(torch::kFloat32);
    auto pboxes = pd_bboxes.to(torch::kFloat32);
    auto gboxes = gt_bboxes.to(torch::kFloat32);
    auto labels = gt_labels.to(torch::kInt64).clamp_min(0).view({B, M, 1});
    auto valid = mask_gt.to(torch::kFloat32).view({B, M, 1});

    // Candidates [B, M, A]: inside (>= 0 on all four sides) and within reg_max - 1.01 strides.
    auto p = anchors.to(torch::kFloat32).view({1, 1, A, 2});
    auto s = strides.to(torch::kFloat32).view({1, 1, A, 1});
    auto dist = torch::cat({p - gboxes.narrow(-1, 0, 2).unsqueeze(2), gboxes.narrow(-1, 2, 2).unsqueeze(2) - p}, -1) / s;
    auto grid = ((dist.amin(-1) >= 0) & (dist.amax(-1) <= static_cast<double>(o_.reg_max) - 1.01)).to(torch::kFloat32) *
                valid;

    auto iou = ciou(gboxes.unsqueeze(2), pboxes.unsqueeze(1)).clamp(0, 1) * valid;                 // [B, M, A]
    auto cls = scores.transpose(1, 2).gather(1, labels.expand({-1, -1, A}));                      // [B, M, A]
    auto target = iou.pow(o_.iou_factor) * cls.pow(o_.cls_factor);

    // Top-k per gt among candidates; zero values are not picks.
    const int64_t k = std::min<int64_t>(o_.topk, A);
    auto [vals, idx] = (grid * target).topk(k, -1);
    auto topk_mask = (torch::zeros_like(target).scatter_(-1, idx, vals) > 0).to(torch::kFloat32);

    // A gt with no pick and some positive alignment anywhere gets its best anchor.
    auto [best_val, best_idx] = target.max(-1, /*keepdim=*/true);                                  // [B, M, 1]
    auto best_anchor = torch::zeros_like(target).scatter_(-1, best_idx, 1.0);
    auto orphan = (topk_mask.sum(-1, true) == 0) & (best_val > 0);
    topk_mask = torch::where(orphan, best_anchor, topk_mask);

    // An anchor picked by several gts keeps the claimant with the largest IoU.
    auto dup = (topk_mask.sum(1, true) > 1).expand({-1, M, -1});
    auto best_gt = torch::zeros_like(topk_mask).scatter_(1, (topk_mask * iou).argmax(1, true), 1.0);
    topk_mask = torch::where(dup, best_gt, topk_mask);
    auto gt_index = topk_mask.argmax(1);                                                           // [B, A]
    auto fg = (topk_mask.sum(1) > 0).to(torch::kFloat32);                                          // [B, A]

    auto flat = (gt_index + torch::arange(B, gt_index.options()).unsqueeze(1) * M).view({-1});
    auto t_boxes = gboxes.view({-1, 4}).index_select(0, flat).view({B, A, 4});
    auto t_labels = labels.view({-1}).index_select(0, flat).view({B, A, 1});

    // Soft scores: alignment / (best alignment of the gt) × best IoU of the gt, at the assigned gt.
    auto iou_pos = iou * topk_mask, target_pos = target * topk_mask;
    auto norm = target_pos / (target_pos.amax(-1, true) + 1e-9) * iou_pos.amax(-1, true);         // [B, M, A]
    auto norm_at = norm.transpose(1, 2).gather(2, gt_index.unsqueeze(-1));                         // [B, A, 1]
    auto t_scores = torch::zeros({B, A, nc_}, f32).scatter_(-1, t_labels, 1.0) * norm_at * fg.unsqueeze(-1);
    return {t_scores, t_boxes, fg, gt_index};
  }

  int64_t num_classes() const { return nc_; }
  const BoxMatcherOptions& options() const { return o_; }

 private:
  int64_t nc_;
  BoxMatcherOptions o_;
};

}  // namespace libreyolo::assign
