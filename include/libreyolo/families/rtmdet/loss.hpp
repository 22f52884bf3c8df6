#pragma once
// RTMDet's training loss as the original computes it (RTMDetLoss, libreyolo/models/rtmdet/loss.py; mmyolo's
// loss_by_feat): priors at cell corners (x · s, y · s), boxes = prior ∓ the predicted distances, the dynamic
// soft-label assigner (assign/soft_label.hpp) on the detached predictions, then
//   cls   quality focal loss (beta 2): BCE(logit, t) · |t - sigmoid(logit)|² over every prior and class,
//         t = IoU with the matched gt at its class (0 elsewhere)
//   bbox  2 · sum over positives (1 - GIoU(pred, gt)) · IoU
// both divided by max(sum of the positives' IoUs, 1); total = cls + bbox. Masks instead of boolean
// indexing and a tensor normaliser (the original reads it with .item()): fixed shapes, no host sync.
#include <libreyolo/assign/soft_label.hpp>
#include <libreyolo/capture/level_cache.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::rtmdet {

struct RtmdetLossOutput {
  torch::Tensor total;  // scalar, differentiable
  torch::Tensor items;  // [2] cls, bbox; detached
  torch::Tensor num_fg; // scalar
};

// Priors [A, 3] = (x · s, y · s, s) per level, row-major (mmdet's MlvlPointGenerator, offset 0).
inline torch::Tensor make_priors(const std::vector<torch::Tensor>& feats, const std::vector<int64_t>& strides) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < feats.size(); ++i) {
    const int64_t h = feats[i].size(2), w = feats[i].size(3);
    const double s = static_cast<double>(strides[i]);
    auto opt = torch::TensorOptions().dtype(torch::kFloat32).device(feats[i].device());
    auto ys = (torch::arange(h, opt) * s).view({h, 1}).expand({h, w});
    auto xs = (torch::arange(w, opt) * s).view({1, w}).expand({h, w});
    out.push_back(torch::stack({xs, ys, torch::full({h, w}, s, opt)}, -1).reshape({h * w, 3}));
  }
  return torch::cat(out, 0);
}

// Per-prior rows [B, A, 4 + nc] of the head maps.
inline torch::Tensor flatten_levels(const std::vector<torch::Tensor>& feats) {
  std::vector<torch::Tensor> rows;
  for (const auto& f : feats) rows.push_back(f.to(torch::kFloat32).flatten(2).transpose(1, 2));
  return torch::cat(rows, 1);
}

// (l, t, r, b) distances [B, A, 4] from the prior points [A, 2] -> xyxy.
inline torch::Tensor distance2bbox(const torch::Tensor& points, const torch::Tensor& d) {
  return torch::cat({points - d.narrow(-1, 0, 2), points + d.narrow(-1, 2, 2)}, -1);
}

// GIoU of paired xyxy boxes [..., 4] -> [...] (the original's bbox_giou_aligned).
inline torch::Tensor giou_aligned(const torch::Tensor& p, const torch::Tensor& t) {
  auto lt = torch::max(p.narrow(-1, 0, 2), t.narrow(-1, 0, 2)), rb = torch::min(p.narrow(-1, 2, 2), t.narrow(-1, 2, 2));
  auto wh = (rb - lt).clamp_min(0);
  auto inter = wh.select(-1, 0) * wh.select(-1, 1);
  auto area_p = (p.select(-1, 2) - p.select(-1, 0)).clamp_min(0) * (p.select(-1, 3) - p.select(-1, 1)).clamp_min(0);
  auto area_t = (t.select(-1, 2) - t.select(-1, 0)).clamp_min(0) * (t.select(-1, 3) - t.select(-1, 1)).clamp_min(0);
  auto uni = area_p + area_t - inter;
  auto elt = torch::min(p.narrow(-1, 0, 2), t.narrow(-1, 0, 2)), erb = torch::max(p.narrow(-1, 2, 2), t.narrow(-1, 2, 2));
  auto ewh = (erb - elt).clamp_min(0);
  auto enc = ewh.select(-1, 0) * ewh.select(-1, 1);
  return inter / uni.clamp_min(1e-7) - (enc - uni) / enc.clamp_min(1e-7);
}

class RtmdetLoss {
 public:
  RtmdetLoss(std::vector<int64_t> strides, int64_t nc, double cls_weight = 1.0, double bbox_weight = 2.0)
      : strides_(std::move(strides)), nc_(nc), cls_w_(cls_weight), box_w_(bbox_weight), assigner_(nc) {}

  // feats: [B, 4 + nc, H/s, W/s] (pixel distances, class logits); targets [B, M, 5] (class, x1, y1, x2, y2)
  // in input pixels, padding rows with class -1.
  RtmdetLossOutput operator()(const std::vector<torch::Tensor>& feats, const torch::Tensor& targets) {
    check(feats, targets);
    auto rows = flatten_levels(feats);
    const int64_t B = rows.size(0), A = rows.size(1);
    auto priors = prior_cache(feats);
    auto boxes = distance2bbox(priors.narrow(1, 0, 2), rows.narrow(-1, 0, 4));  // [B, A, 4]
    auto logits = rows.narrow(-1, 4, nc_);

    auto t = targets.to(rows.device(), torch::kFloat32);
    const int64_t M = t.size(1);
    auto labels = t.select(-1, 0);
    auto gt = t.narrow(-1, 1, 4);
    // Real gts: a class and a positive width and height (the original drops w <= 0 or h <= 0).
    auto valid = ((labels >= 0) & (gt.select(-1, 2) > gt.select(-1, 0)) & (gt.select(-1, 3) > gt.select(-1, 1)))
                     .to(torch::kFloat32);
    auto m = assigner_(boxes.detach(), logits.detach(), priors, gt, labels, valid);
    auto fg = m.fg_mask > 0;
    auto avg = m.metrics.sum().clamp_min(1.0);

    torch::Tensor t_box, t_cls;
    if (M > 0) {
      auto flat = (m.gt_index + torch::arange(B, m.gt_index.options()).unsqueeze(1) * M).view({-1});
      t_box = gt.reshape({-1, 4}).index_select(0, flat).view({B, A, 4});
      t_cls = labels.clamp_min(0).to(torch::kInt64).reshape({-1}).index_select(0, flat).view({B, A, 1});
    } else {
      t_box = torch::zeros({B, A, 4}, rows.options());
      t_cls = torch::zeros({B, A, 1}, rows.options().dtype(torch::kInt64));
    }
    auto score = m.metrics * m.fg_mask;                                                    // [B, A]
    auto target = torch::zeros({B, A, nc_}, rows.options()).scatter_(-1, t_cls, score.unsqueeze(-1));
    auto qfl = torch::binary_cross_entropy_with_logits(logits, target, {}, {}, at::Reduction::None) *
               (target - logits.sigmoid()).abs().pow(2.0);
    auto loss_cls = cls_w_ * qfl.sum() / avg;

    auto zero = torch::zeros({}, rows.options());
    auto box_terms = (1.0 - giou_aligned(boxes, t_box)) * m.metrics;
    auto loss_bbox = box_w_ * torch::where(fg, box_terms, zero).sum() / avg;

    auto items = torch::stack({loss_cls, loss_bbox});
    return {items.sum(), items.detach(), m.fg_mask.sum()};
  }

 private:
  void check(const std::vector<torch::Tensor>& feats, const torch::Tensor& targets) const {
    if (feats.size() != strides_.size())
      throw ConfigError("RtmdetLoss: got " + std::to_string(feats.size()) + " feature maps for " +
                        std::to_string(strides_.size()) + " strides");
    for (const auto& f : feats)
      if (f.dim() != 4 || f.size(1) != 4 + nc_)
        throw ConfigError("RtmdetLoss: feature maps must be [B, " + std::to_string(4 + nc_) + ", H, W] (4 + nc)");
    if (targets.dim() != 3 || targets.size(2) != 5 || targets.size(0) != feats.front().size(0))
      throw DataError("RtmdetLoss: targets must be [B, M, 5] = (class, x1, y1, x2, y2) with B = " +
                      std::to_string(feats.front().size(0)));
  }
  // Priors depend only on the map sizes and the device: built once per shape (outside a graph capture).
  torch::Tensor prior_cache(const std::vector<torch::Tensor>& feats) {
    return cache_.get(feats, [&] { return make_priors(feats, strides_); });
  }
  std::vector<int64_t> strides_;
  int64_t nc_;
  double cls_w_, box_w_;
  assign::SoftLabelAssigner assigner_;
  capture::LevelCache<torch::Tensor> cache_;
};

}  // namespace libreyolo::families::rtmdet
