#pragma once
// The YOLO-NAS / PP-YOLOE loss as the original trains YOLO-NAS (libreyolo/models/yolonas/loss.py
// PPYoloELoss with use_static_assigner=False, use_varifocal_loss=True, from its trainer.py): no ATSS
// warm-up phase (the original's trainer never enables its static ATSS assigner), the PP-YOLOE
// task-aligned assigner (assign/ppyoloe_tal.hpp: top-13, alpha 1, beta 6) on the detached sigmoid scores
// and the decoded boxes in pixels; varifocal classification loss (alpha 0.75, gamma 2; its weight
// 0.75·p^2·(1 - label) + score·label keeps its gradient, as the original's); on positives GIoU (eps
// 1e-10) between the decoded boxes and the assigned gt in grid units, and distribution focal loss over
// reg_max + 1 = 17 bins against the target distances clipped to [0, reg_max - 0.01], both weighted by
// the positive's summed soft score. Every term is a sum divided by max(total soft score, 1); weights
// cls 1.0, iou 2.5, dfl 0.5; total = their sum (a batch mean, not multiplied by the batch size).
//
// Positives are selected by masks, not boolean indexing: fixed shapes, no device synchronisation.
// Background anchors get a harmless unit target box so every GIoU term stays finite before the mask.
#include <libreyolo/assign/ppyoloe_tal.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/yolonas/network.hpp>

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolonas {

// GIoU loss 1 - GIoU of xyxy boxes, element-wise over [..., 4] (the original's GIoULoss, eps 1e-10).
inline torch::Tensor giou_loss(const torch::Tensor& p, const torch::Tensor& g, double eps = 1e-10) {
  auto x1 = p.select(-1, 0), y1 = p.select(-1, 1), x2 = p.select(-1, 2), y2 = p.select(-1, 3);
  auto gx1 = g.select(-1, 0), gy1 = g.select(-1, 1), gx2 = g.select(-1, 2), gy2 = g.select(-1, 3);
  auto overlap = (torch::min(x2, gx2) - torch::max(x1, gx1)).clamp_min(0) *
                 (torch::min(y2, gy2) - torch::max(y1, gy1)).clamp_min(0);
  auto uni = (x2 - x1) * (y2 - y1) + (gx2 - gx1) * (gy2 - gy1) - overlap + eps;
  auto iou = overlap / uni;
  auto area_c = (torch::max(x2, gx2) - torch::min(x1, gx1)) * (torch::max(y2, gy2) - torch::min(y1, gy1)) + eps;
  return 1.0 - (iou - (area_c - uni) / area_c);
}

// Varifocal loss (Zhang et al. 2021, VarifocalNet), summed: BCE(logits, score) weighted by
// alpha·p^gamma on negatives and by the target score on positives.
inline torch::Tensor varifocal_loss_sum(const torch::Tensor& logits, const torch::Tensor& score,
                                        const torch::Tensor& label, double alpha = 0.75, double gamma = 2.0) {
  auto p = logits.sigmoid();
  auto weight = alpha * p.pow(gamma) * (1.0 - label) + score * label;
  return (weight * torch::binary_cross_entropy_with_logits(logits, score, {}, {}, at::Reduction::None)).sum();
}

// DFL over reg_max + 1 bins: dist [..., 4, R+1] logits, target [..., 4] -> [...] (mean over the sides).
inline torch::Tensor dfl_loss(const torch::Tensor& dist, const torch::Tensor& target) {
  auto logp = dist.log_softmax(-1);
  auto left = target.to(torch::kInt64);
  auto right = left + 1;
  auto w_left = right.to(target.scalar_type()) - target;
  auto w_right = 1.0 - w_left;
  auto nl = -logp.gather(-1, left.unsqueeze(-1)).squeeze(-1);
  auto nr = -logp.gather(-1, right.unsqueeze(-1)).squeeze(-1);
  return (nl * w_left + nr * w_right).mean(-1);
}

struct NasLossOutput {
  torch::Tensor total;  // scalar, differentiable
  torch::Tensor items;  // [3] cls, iou, dfl after their weights; detached
};

class PPYoloELoss {
 public:
  PPYoloELoss(int64_t nc, int64_t reg_max = 16, double cls = 1.0, double iou = 2.5, double dfl = 0.5)
      : nc_(nc), reg_max_(reg_max), cls_w_(cls), iou_w_(iou), dfl_w_(dfl), assigner_(nc) {}

  // out: the network's {boxes, scores, class logits [B, A, nc], DFL logits [B, A, 4·(R+1)]}; hw: each
  // level's map size (strides 8, 16, 32); targets [B, M, 5] = (class, x1, y1, x2, y2) input pixels,
  // padding rows class -1.
  NasLossOutput operator()(const std::vector<torch::Tensor>& out, const std::vector<std::array<int64_t, 2>>& hw,
                           const torch::Tensor& targets) const {
    if (out.size() != 4) throw ConfigError("PPYoloELoss: expected the network's 4 outputs, got " + std::to_string(out.size()));
    auto logits = out[2].to(torch::kFloat32);
    auto dist = out[3].to(torch::kFloat32);
    const int64_t B = logits.size(0), A = logits.size(1);
    if (logits.size(2) != nc_)
      throw ConfigError("PPYoloELoss: class logits have " + std::to_string(logits.size(2)) + " classes, the loss " + std::to_string(nc_));
    if (dist.size(2) != 4 * (reg_max_ + 1))
      throw ConfigError("PPYoloELoss: DFL logits must have 4·(reg_max + 1) = " + std::to_string(4 * (reg_max_ + 1)) + " channels");
    if (targets.dim() != 3 || targets.size(2) != 5 || targets.size(0) != B)
      throw DataError("PPYoloELoss: targets must be [B, M, 5] = (class, x1, y1, x2, y2) with B = " + std::to_string(B));
    auto g = grid_cell_anchors(hw, {8, 16, 32}, logits.device());
    if (g.points.size(0) != A)
      throw ConfigError("PPYoloELoss: the maps give " + std::to_string(g.points.size(0)) + " anchors, the outputs " + std::to_string(A));
    auto points_s = g.points / g.strides;                                     // grid units
    auto bins = dist.view({B, A, 4, reg_max_ + 1});
    auto pred_boxes = distance2bbox(points_s, dfl_expectation(dist, reg_max_));  // grid units

    auto t = targets.to(logits.device(), torch::kFloat32);
    auto gt_cls = t.narrow(2, 0, 1);
    auto gt_box = t.narrow(2, 1, 4);
    // A real gt: class >= 0 and a positive width and height (the original drops w, h <= 0).
    auto valid = ((gt_cls >= 0) & (gt_box.select(2, 2) > gt_box.select(2, 0)).unsqueeze(-1) &
                  (gt_box.select(2, 3) > gt_box.select(2, 1)).unsqueeze(-1)).to(torch::kFloat32);
    gt_box = gt_box * valid;
    auto a = assigner_(logits.detach().sigmoid(), pred_boxes.detach() * g.strides, g.points, gt_cls, gt_box, valid);

    auto one_hot = torch::zeros({B, A, nc_ + 1}, logits.options()).scatter_(-1, a.labels.unsqueeze(-1), 1.0).narrow(-1, 0, nc_);
    auto cls_sum = varifocal_loss_sum(logits, a.scores, one_hot);
    auto score_sum = a.scores.sum();

    auto fg = a.fg_mask.to(torch::kFloat32);                                  // [B, A]
    auto weight = a.scores.sum(-1) * fg;                                      // [B, A]
    auto unit = torch::zeros({B, A, 4}, logits.options());  // (0, 0, 1, 1), made on the device (no host copy)
    unit.narrow(-1, 2, 2).fill_(1.0);
    auto target_boxes = torch::where(a.fg_mask.unsqueeze(-1), a.bboxes / g.strides, unit);  // grid units
    auto iou_sum = (giou_loss(pred_boxes, target_boxes) * weight).sum();
    auto ltrb = torch::cat({points_s - target_boxes.narrow(-1, 0, 2), target_boxes.narrow(-1, 2, 2) - points_s}, -1)
                    .clamp(0, static_cast<double>(reg_max_) - 0.01);
    auto dfl_sum = (dfl_loss(bins, ltrb) * weight).sum();

    auto denom = score_sum.clamp_min(1.0);
    auto items = torch::stack({cls_w_ * cls_sum / denom, iou_w_ * iou_sum / denom, dfl_w_ * dfl_sum / denom});
    return {items.sum(), items.detach()};
  }

  int64_t num_classes() const { return nc_; }

 private:
  int64_t nc_, reg_max_;
  double cls_w_, iou_w_, dfl_w_;
  assign::PPYoloETaskAlignedAssigner assigner_;
};

}  // namespace libreyolo::families::yolonas
