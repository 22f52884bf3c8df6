#pragma once
// SimOTA (YOLOX, Ge et al. 2021), with the rules of the original's YOLOXHead.get_assignments /
// simota_matching (libreyolo/models/yolox/nn.py), as a fixed-shape batched tensor computation: padded
// ground truths [B, M], every anchor [A], masks instead of boolean indexing, no host reads.
//
//   centre prior    anchor a is in gt m's centre region when its cell centre ((grid + 0.5) · stride) lies
//                   strictly within 1.5 strides of the gt centre on both axes; the candidates of an image
//                   are the anchors in the centre region of at least one of its gts (the original's
//                   anchor_filter); other anchors are never assigned.
//   cost            BCE(sqrt(sigmoid(cls) · sigmoid(obj)), one-hot class) summed over classes
//                   + 3 · -log(IoU + 1e-8) + 1e6 where a candidate is outside this gt's centre region.
//   dynamic k       per gt, floor(sum of its 10 largest IoUs over the candidates), at least 1.
//   matching        per gt, its k cheapest candidates; an anchor picked by several gts goes to the gt of
//                   least cost (over all gts of the image).
// Outputs per anchor: foreground, the matched gt, the class target (one-hot × IoU with the matched gt).
// The BCE log terms are clamped at -100 as torch's binary_cross_entropy does. The class BCE summed over
// classes is computed as sum_c -log(1 - p_c) - (log p_g - log(1 - p_g)), without a [B, M, A, nc] tensor.
// Dynamic k never exceeds 10 (a sum of at most 10 IoUs), so the per-gt top-k is a topk of width 10 over
// the anchors with a k-mask: fixed shapes throughout.
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace libreyolo::assign {

struct SimOtaOptions {
  double center_radius = 1.5;  // strides
  int64_t candidate_k = 10;    // IoUs summed for the dynamic k (and its upper bound)
  double iou_weight = 3.0;
  double outside_cost = 1e6;   // added where a candidate lies outside the gt's centre region
};

struct SimOtaMatch {
  torch::Tensor fg_mask;      // [B, A] float 0/1
  torch::Tensor gt_index;     // [B, A] int64, the matched gt in its image (0 where background)
  torch::Tensor iou;          // [B, A] IoU of the prediction with its matched gt (0 where background)
  torch::Tensor dynamic_k;    // [B, M] int64, the dynamic k of each gt (0 for padding)
  torch::Tensor matching;     // [B, M, A] float 0/1 after conflict resolution
  torch::Tensor num_fg;       // scalar float, the number of foreground anchors in the batch
};

// Pairwise IoU of cxcywh boxes a [..., M, 1, 4] and b [..., 1, A, 4] as the original's bboxes_iou
// (xyxy=False): no epsilon, intersection only where tl < br on both axes.
inline torch::Tensor cxcywh_iou(const torch::Tensor& a, const torch::Tensor& b) {
  auto a_tl = a.narrow(-1, 0, 2) - a.narrow(-1, 2, 2) / 2, a_br = a.narrow(-1, 0, 2) + a.narrow(-1, 2, 2) / 2;
  auto b_tl = b.narrow(-1, 0, 2) - b.narrow(-1, 2, 2) / 2, b_br = b.narrow(-1, 0, 2) + b.narrow(-1, 2, 2) / 2;
  auto tl = torch::max(a_tl, b_tl), br = torch::min(a_br, b_br);
  auto en = (tl < br).to(tl.scalar_type()).prod(-1);
  auto area_i = (br - tl).prod(-1) * en;
  auto area_a = a.narrow(-1, 2, 2).prod(-1), area_b = b.narrow(-1, 2, 2).prod(-1);
  return area_i / (area_a + area_b - area_i);
}

class SimOta {
 public:
  explicit SimOta(int64_t num_classes, SimOtaOptions o = {}) : nc_(num_classes), o_(o) {
    if (nc_ < 1) throw ConfigError("SimOta: num_classes must be >= 1, got " + std::to_string(nc_));
    if (o_.candidate_k < 1) throw ConfigError("SimOta: candidate_k must be >= 1, got " + std::to_string(o_.candidate_k));
  }

  // pred_boxes [B, A, 4] cxcywh pixels; cls_logits [B, A, nc]; obj_logits [B, A, 1];
  // grid [A, 2] cell indices (x, y); strides [A]; gt_boxes [B, M, 4] cxcywh pixels; gt_labels [B, M]
  // (any integer type or float); valid [B, M] 1 for real gts, 0 for padding.
  SimOtaMatch operator()(const torch::Tensor& pred_boxes, const torch::Tensor& cls_logits,
                         const torch::Tensor& obj_logits, const torch::Tensor& grid, const torch::Tensor& strides,
                         const torch::Tensor& gt_boxes, const torch::Tensor& gt_labels,
                         const torch::Tensor& valid) const {
    torch::NoGradGuard ng;
    const int64_t B = pred_boxes.size(0), A = pred_boxes.size(1), M = gt_boxes.size(1);
    auto f32 = pred_boxes.options().dtype(torch::kFloat32);
    if (M == 0) {
      auto z = torch::zeros({B, A}, f32);
      return {z, torch::zeros({B, A}, f32.dtype(torch::kInt64)), z, torch::zeros({B, 0}, f32.dtype(torch::kInt64)),
              torch::zeros({B, 0, A}, f32), torch::zeros({}, f32)};
    }
    auto pb = pred_boxes.to(torch::kFloat32);
    auto gb = gt_boxes.to(torch::kFloat32);
    auto ok = valid.to(torch::kFloat32).view({B, M, 1}) > 0;  // [B, M, 1]
    auto labels = gt_labels.to(torch::kInt64).clamp(0, nc_ - 1).view({B, M});

    // Centre prior [B, M, A] and the candidates [B, 1, A].
    auto s = strides.to(torch::kFloat32).view({1, 1, A});
    auto g = grid.to(torch::kFloat32);
    auto cx = (g.select(1, 0).view({1, 1, A}) + 0.5) * s, cy = (g.select(1, 1).view({1, 1, A}) + 0.5) * s;
    auto r = s * o_.center_radius;
    auto gx = gb.select(-1, 0).unsqueeze(-1), gy = gb.select(-1, 1).unsqueeze(-1);  // [B, M, 1]
    auto d = torch::stack({cx - (gx - r), cy - (gy - r), (gx + r) - cx, (gy + r) - cy}, -1);
    auto in_center = (d.amin(-1) > 0) & ok;                                          // [B, M, A]
    auto candidate = in_center.any(1, /*keepdim=*/true);                             // [B, 1, A]

    auto ious = cxcywh_iou(gb.unsqueeze(2), pb.unsqueeze(1));                        // [B, M, A]
    ious = torch::where(candidate & ok, ious, torch::zeros_like(ious));

    // Class cost: BCE of p = sqrt(sigmoid(cls) sigmoid(obj)) against the one-hot gt class.
    auto p = (cls_logits.to(torch::kFloat32).sigmoid() * obj_logits.to(torch::kFloat32).sigmoid()).sqrt();  // [B, A, nc]
    auto logp = p.log().clamp_min(-100.0), log1mp = (1 - p).log().clamp_min(-100.0);
    auto neg_sum = -log1mp.sum(-1).unsqueeze(1);                                     // [B, 1, A]
    auto idx = labels.unsqueeze(-1).expand({B, M, A});
    auto at_gt = (logp - log1mp).transpose(1, 2).gather(1, idx);                     // [B, M, A]
    auto cls_cost = neg_sum - at_gt;

    auto cost = cls_cost + o_.iou_weight * -(ious + 1e-8).log() + o_.outside_cost * (~in_center).to(torch::kFloat32);
    const float inf = std::numeric_limits<float>::infinity();
    cost = torch::where(candidate & ok, cost, torch::full_like(cost, inf));

    // Dynamic k per gt: floor(sum of the top candidate IoUs), at least 1; 0 for padding.
    const int64_t K = std::min(o_.candidate_k, A);
    auto topk_ious = std::get<0>(ious.topk(K, -1));
    auto dynamic_k = topk_ious.sum(-1).to(torch::kInt32).clamp_min(1).to(torch::kInt64) * ok.squeeze(-1);  // [B, M]

    // Each gt's k cheapest candidates (the k-mask keeps the first dynamic_k of the sorted K).
    auto cheapest = std::get<1>(cost.topk(K, -1, /*largest=*/false, /*sorted=*/true));                 // [B, M, K]
    auto keep = (torch::arange(K, dynamic_k.options()).view({1, 1, K}) < dynamic_k.unsqueeze(-1)).to(torch::kFloat32);
    auto matching = torch::zeros({B, M, A}, f32).scatter_(-1, cheapest, keep);
    matching = matching * (candidate & ok).to(torch::kFloat32);

    // Anchors claimed by several gts go to the gt of least cost.
    auto claims = matching.sum(1, /*keepdim=*/true);                                                  // [B, 1, A]
    auto best_gt = torch::zeros_like(matching).scatter_(1, cost.argmin(1, /*keepdim=*/true), 1.0);
    matching = torch::where(claims > 1, best_gt, matching);

    auto fg = (claims.squeeze(1) > 0).to(torch::kFloat32);                                            // [B, A]
    auto gt_index = matching.argmax(1);                                                               // [B, A]
    auto iou = (matching * ious).sum(1);                                                              // [B, A]
    return {fg, gt_index, iou, dynamic_k, matching, fg.sum()};
  }

  int64_t num_classes() const { return nc_; }

 private:
  int64_t nc_;
  SimOtaOptions o_;
};

}  // namespace libreyolo::assign
