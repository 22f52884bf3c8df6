#pragma once
// Box geometry shared by the assigners, the losses and the evaluators. Boxes are xyxy (x1, y1, x2, y2)
// in the last dimension; every function broadcasts over the leading dimensions like LibTorch ops do.
#include <torch/torch.h>

#include <cmath>

namespace libreyolo::assign {

// Intersection-over-union of a and b, element-wise with broadcasting: [..., 4] x [..., 4] -> [...].
// eps keeps the division finite for empty boxes (the same 1e-7 Ultralytics uses).
inline torch::Tensor iou(const torch::Tensor& a, const torch::Tensor& b, double eps = 1e-7) {
  auto ax1 = a.select(-1, 0), ay1 = a.select(-1, 1), ax2 = a.select(-1, 2), ay2 = a.select(-1, 3);
  auto bx1 = b.select(-1, 0), by1 = b.select(-1, 1), bx2 = b.select(-1, 2), by2 = b.select(-1, 3);
  auto inter = (torch::min(ax2, bx2) - torch::max(ax1, bx1)).clamp_min(0) *
               (torch::min(ay2, by2) - torch::max(ay1, by1)).clamp_min(0);
  auto area_a = (ax2 - ax1) * (ay2 - ay1);
  auto area_b = (bx2 - bx1) * (by2 - by1);
  return inter / (area_a + area_b - inter + eps);
}

// Complete IoU (Zheng et al. 2020): IoU - centre distance² / enclosing diagonal² - alpha·v, where v
// measures the aspect-ratio mismatch. alpha is treated as a constant for the gradient, as in the
// paper's reference code and Ultralytics. Broadcasts like iou().
inline torch::Tensor ciou(const torch::Tensor& a, const torch::Tensor& b, double eps = 1e-7) {
  auto ax1 = a.select(-1, 0), ay1 = a.select(-1, 1), ax2 = a.select(-1, 2), ay2 = a.select(-1, 3);
  auto bx1 = b.select(-1, 0), by1 = b.select(-1, 1), bx2 = b.select(-1, 2), by2 = b.select(-1, 3);
  auto w1 = ax2 - ax1, h1 = ay2 - ay1 + eps;
  auto w2 = bx2 - bx1, h2 = by2 - by1 + eps;
  auto inter = (torch::min(ax2, bx2) - torch::max(ax1, bx1)).clamp_min(0) *
               (torch::min(ay2, by2) - torch::max(ay1, by1)).clamp_min(0);
  auto uni = w1 * h1 + w2 * h2 - inter + eps;
  auto plain = inter / uni;
  auto cw = torch::max(ax2, bx2) - torch::min(ax1, bx1);  // enclosing box width
  auto ch = torch::max(ay2, by2) - torch::min(ay1, by1);  // enclosing box height
  auto c2 = cw.pow(2) + ch.pow(2) + eps;
  auto rho2 = ((bx1 + bx2 - ax1 - ax2).pow(2) + (by1 + by2 - ay1 - ay2).pow(2)) / 4;
  auto v = (4.0 / (M_PI * M_PI)) * (torch::atan(w2 / h2) - torch::atan(w1 / h1)).pow(2);
  torch::Tensor alpha;
  {
    torch::NoGradGuard no_grad;
    alpha = v / (v - plain + (1 + eps));
  }
  return plain - (rho2 / c2 + v * alpha);
}

// Pairwise IoU matrix: a [N, 4], b [M, 4] -> [N, M].
inline torch::Tensor box_iou(const torch::Tensor& a, const torch::Tensor& b, double eps = 1e-7) {
  return iou(a.unsqueeze(1), b.unsqueeze(0), eps);
}

}  // namespace libreyolo::assign
