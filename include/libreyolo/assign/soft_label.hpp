#pragma once
// RTMDet's dynamic soft-label assigner (mmyolo's BatchDynamicSoftLabelAssigner, as the original ports it:
// libreyolo/models/rtmdet/loss.py), as a fixed-shape batched tensor computation: padded ground truths
// [B, M], every prior [A], masks instead of boolean indexing, no host reads.
//
//   candidates      a prior is a candidate when its point lies strictly inside at least one real gt;
//                   non-candidates cost 1e8 (they sort last but, as in the original, can still be picked
//                   by a gt whose k exceeds its candidates).
//   cost            soft class cost BCE(logit at the gt class, IoU) · |IoU - sigmoid(logit)|²
//                   + 3 · -log(IoU + 1e-7) + 10^(|prior - gt centre| / stride - 3)
//   dynamic k       per gt, floor(sum of its 13 largest IoUs over all priors), at least 1
//   matching        per gt, its k cheapest priors; a prior picked by several gts goes to the gt of least
//                   cost (among the real gts; the original's argmin also sees padding columns).
// Outputs per prior: foreground, the matched gt, the soft target (IoU with the matched gt). Dynamic k
// never exceeds 13 (a sum of at most 13 IoUs), so the per-gt selection is a topk of width 13 + a k-mask.
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace libreyolo::assign {

struct SoftLabelOptions {
  double soft_center_radius = 3.0;
  int64_t topk = 13;
  double iou_weight = 3.0;
};

struct SoftLabelMatch {
  torch::Tensor fg_mask;    // [B, A] float 0/1
  torch::Tensor gt_index;   // [B, A] int64 matched gt (0 where background)
  torch::Tensor metrics;    // [B, A] IoU of the prediction with its matched gt (0 where background)
  torch::Tensor dynamic_k;  // [B, M] int64 (0 for padding)
  torch::Tensor matching;   // [B, A, M] float 0/1 after conflict resolution
};

// Pairwise IoU of xyxy boxes a [B, A, 4] and b [B, M, 4] -> [B, A, M] (union clamped at 1e-7).
inline torch::Tensor pairwise_iou_xyxy(const torch::Tensor& a, const torch::Tensor& b) {
  auto b1 = a.unsqueeze(2), b2 = b.unsqueeze(1);
  auto lt = torch::max(b1.narrow(-1, 0, 2), b2.narrow(-1, 0, 2));
  auto rb = torch::min(b1.narrow(-1, 2, 2), b2.narrow(-1, 2, 2));
  auto wh = (rb - lt).clamp_min(0);
  auto inter = wh.select(-1, 0) * wh.select(-1, 1);
  auto area1 = (b1.select(-1, 2) - b1.select(-1, 0)) * (b1.select(-1, 3) - b1.select(-1, 1));
  auto area2 = (b2.select(-1, 2) - b2.select(-1, 0)) * (b2.select(-1, 3) - b2.select(-1, 1));
  return inter / (area1 + area2 - inter).clamp_min(1e-7);
}

class SoftLabelAssigner {
 public:
  explicit SoftLabelAssigner(int64_t num_classes, SoftLabelOptions o = {}) : nc_(num_classes), o_(o) {
    if (nc_ < 1) throw ConfigError("SoftLabelAssigner: num_classes must be >= 1, got " + std::to_string(nc_));
    if (o_.topk < 1) throw ConfigError("SoftLabelAssigner: topk must be >= 1, got " + std::to_string(o_.topk));
  }

  // pred_boxes [B, A, 4] xyxy pixels; pred_logits [B, A, nc]; priors [A, 3] = (x, y, stride);
  // gt_boxes [B, M, 4] xyxy pixels; gt_labels [B, M]; valid [B, M] 1 for real gts.
  SoftLabelMatch operator()(const torch::Tensor& pred_boxes, const torch::Tensor& pred_logits,
                            const torch::Tensor& priors, const torch::Tensor& gt_boxes,
                            const torch::Tensor& gt_labels, const torch::Tensor& valid) const {
    torch::NoGradGuard ng;
    const int64_t B = pred_boxes.size(0), A = pred_boxes.size(1), M = gt_boxes.size(1);
    auto f32 = pred_boxes.options().dtype(torch::kFloat32);
    if (M == 0 || A == 0) {
      auto z = torch::zeros({B, A}, f32);
      return {z, torch::zeros({B, A}, f32.dtype(torch::kInt64)), z, torch::zeros({B, M}, f32.dtype(torch::kInt64)),
              torch::zeros({B, A, M}, f32)};
    }
    auto pb = pred_boxes.to(torch::kFloat32), gb = gt_boxes.to(torch::kFloat32);
    auto ok = (valid.to(torch::kFloat32) > 0).view({B, 1, M});
    auto labels = gt_labels.to(torch::kInt64).clamp(0, nc_ - 1).view({B, M});
    auto pts = priors.to(torch::kFloat32);
    auto px = pts.select(1, 0).view({1, A, 1}), py = pts.select(1, 1).view({1, A, 1});
    auto ps = pts.select(1, 2).view({1, A, 1});

    // Inside test [B, A, M] and the candidates [B, A, 1].
    auto gx1 = gb.select(-1, 0).unsqueeze(1), gy1 = gb.select(-1, 1).unsqueeze(1);
    auto gx2 = gb.select(-1, 2).unsqueeze(1), gy2 = gb.select(-1, 3).unsqueeze(1);
    auto inside = (torch::stack({px - gx1, py - gy1, gx2 - px, gy2 - py}, -1).amin(-1) > 0) & ok;
    auto candidate = inside.any(-1, /*keepdim=*/true);

    // Soft centre prior (distances zeroed for non-candidates, as the original).
    auto cx = (gx1 + gx2) * 0.5, cy = (gy1 + gy2) * 0.5;
    auto dist = ((px - cx).pow(2) + (py - cy).pow(2)).sqrt() / ps * candidate.to(torch::kFloat32);
    auto soft_prior = torch::pow(10.0, dist - o_.soft_center_radius);

    auto ious = pairwise_iou_xyxy(pb, gb);                                           // [B, A, M]
    auto iou_cost = -(ious + 1e-7).log() * o_.iou_weight;
    auto logits = pred_logits.to(torch::kFloat32).gather(2, labels.unsqueeze(1).expand({B, A, M}));  // [B, A, M]
    auto scale = (ious - logits.sigmoid()).abs().pow(2.0);
    auto cls_cost = torch::binary_cross_entropy_with_logits(logits, ious, {}, {}, at::Reduction::None) * scale;
    auto cost = cls_cost + iou_cost + soft_prior;
    cost = torch::where(candidate, cost, torch::full_like(cost, 1e8));

    // Dynamic k from the top IoUs over all priors; 0 for padding.
    const int64_t K = std::min(o_.topk, A);
    auto topk_ious = std::get<0>(ious.topk(K, 1));                                   // [B, K, M]
    auto okm = ok.view({B, M});
    auto dynamic_k = topk_ious.sum(1).to(torch::kInt32).clamp_min(1).to(torch::kInt64) * okm;  // [B, M]

    auto cheapest = std::get<1>(cost.topk(K, 1, /*largest=*/false, /*sorted=*/true));  // [B, K, M]
    auto keep = (torch::arange(K, dynamic_k.options()).view({1, K, 1}) < dynamic_k.unsqueeze(1)).to(torch::kFloat32);
    auto matching = torch::zeros({B, A, M}, f32).scatter_(1, cheapest, keep);

    // Conflicts go to the cheapest real gt.
    auto claims = matching.sum(-1, /*keepdim=*/true);                                // [B, A, 1]
    auto real_cost = torch::where(ok, cost, torch::full_like(cost, std::numeric_limits<float>::infinity()));
    auto best = torch::zeros_like(matching).scatter_(-1, real_cost.argmin(-1, /*keepdim=*/true), 1.0);
    matching = torch::where(claims > 1, best, matching);

    auto fg = (claims.squeeze(-1) > 0).to(torch::kFloat32);
    auto gt_index = matching.argmax(-1);
    auto metrics = (matching * ious).sum(-1);
    return {fg, gt_index, metrics, dynamic_k, matching};
  }

  int64_t num_classes() const { return nc_; }

 private:
  int64_t nc_;
  SoftLabelOptions o_;
};

}  // namespace libreyolo::assign
