#pragma once
// PP-YOLOE's task-aligned assigner (Xu et al. 2022, after TOOD), as YOLO-NAS trains with it (the
// original's libreyolo/models/yolonas/loss.py TaskAlignedAssigner, from SuperGradients): it differs from
// the YOLOv8 one in assign/tal.hpp in using plain IoU (eps 1e-9) in the metric score^alpha · IoU^beta,
// alpha 1, beta 6, top-13; the top-k is taken over metric × inside-gt and then kept only inside the gt;
// an anchor claimed by several gts goes to the gt whose box its *prediction* overlaps most (argmax over
// all gts, padding included, like the original); soft scores = metric / (max metric of the gt + eps) ×
// max IoU of the gt, the largest over gts. Fixed shapes throughout and no host read (the original's
// `if mask_positive_sum.max() > 1` branch is applied unconditionally: where() leaves the other anchors
// as they are), so it can run inside a step without synchronising the device.
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace libreyolo::assign {

// Pairwise IoU of [B, M, 4] and [B, A, 4] xyxy boxes -> [B, M, A]; areas clamped at 0, eps in the union
// (the original's batch_iou_similarity).
inline torch::Tensor batch_iou_similarity(const torch::Tensor& a, const torch::Tensor& b, double eps = 1e-9) {
  auto a4 = a.unsqueeze(2), b4 = b.unsqueeze(1);
  auto lt = torch::max(a4.narrow(-1, 0, 2), b4.narrow(-1, 0, 2));
  auto rb = torch::min(a4.narrow(-1, 2, 2), b4.narrow(-1, 2, 2));
  auto overlap = (rb - lt).clamp_min(0).prod(-1);
  auto area_a = (a4.narrow(-1, 2, 2) - a4.narrow(-1, 0, 2)).clamp_min(0).prod(-1);
  auto area_b = (b4.narrow(-1, 2, 2) - b4.narrow(-1, 0, 2)).clamp_min(0).prod(-1);
  return overlap / (area_a + area_b - overlap + eps);
}

// [B, M, A] 1 where anchor point a lies strictly inside gt m (every margin > eps).
inline torch::Tensor points_inside_boxes(const torch::Tensor& points, const torch::Tensor& boxes, double eps = 1e-9) {
  auto p = points.view({1, 1, -1, 2});
  auto lt = p - boxes.narrow(-1, 0, 2).unsqueeze(2);
  auto rb = boxes.narrow(-1, 2, 2).unsqueeze(2) - p;
  return (torch::cat({lt, rb}, -1).amin(-1) > eps).to(boxes.scalar_type());
}

struct PPYoloETalOptions {
  int64_t topk = 13;
  double alpha = 1.0;
  double beta = 6.0;
  double eps = 1e-9;
};

struct PPYoloETalResult {
  torch::Tensor labels;   // [B, A] int64 class of the assigned gt, bg_index (= num_classes) for background
  torch::Tensor bboxes;   // [B, A, 4] the assigned gt's box (gt 0's box for background, as the original)
  torch::Tensor scores;   // [B, A, nc] one-hot class × normalised alignment; zero rows for background
  torch::Tensor fg_mask;  // [B, A] bool
};

class PPYoloETaskAlignedAssigner {
 public:
  explicit PPYoloETaskAlignedAssigner(int64_t num_classes, PPYoloETalOptions o = {}) : nc_(num_classes), opt_(o) {
    if (nc_ < 1) throw ConfigError("PPYoloETaskAlignedAssigner: num_classes must be >= 1, got " + std::to_string(nc_));
    if (opt_.topk < 1) throw ConfigError("PPYoloETaskAlignedAssigner: topk must be >= 1, got " + std::to_string(opt_.topk));
  }

  // pred_scores [B, A, nc] probabilities; pred_bboxes [B, A, 4] xyxy pixels; anchor_points [A, 2] pixels;
  // gt_labels [B, M, 1] (any value on padding rows); gt_bboxes [B, M, 4] xyxy pixels (zeros on padding);
  // pad_gt_mask [B, M, 1] 1 = a real gt.
  PPYoloETalResult operator()(const torch::Tensor& pred_scores, const torch::Tensor& pred_bboxes,
                              const torch::Tensor& anchor_points, const torch::Tensor& gt_labels,
                              const torch::Tensor& gt_bboxes, const torch::Tensor& pad_gt_mask) const {
    torch::NoGradGuard ng;
    const int64_t B = pred_scores.size(0), A = pred_scores.size(1), M = gt_bboxes.size(1);
    auto fopts = pred_scores.options().dtype(torch::kFloat32);
    if (M == 0) {
      return {torch::full({B, A}, nc_, fopts.dtype(torch::kInt64)), torch::zeros({B, A, 4}, fopts),
              torch::zeros({B, A, nc_}, fopts), torch::zeros({B, A}, fopts.dtype(torch::kBool))};
    }
    auto scores = pred_scores.to(torch::kFloat32);
    auto gboxes = gt_bboxes.to(torch::kFloat32);
    auto labels = gt_labels.to(torch::kInt64).view({B, M}).clamp(0, nc_ - 1);
    auto pad = pad_gt_mask.to(torch::kFloat32).view({B, M, 1});

    auto ious = batch_iou_similarity(gboxes, pred_bboxes.to(torch::kFloat32));  // [B, M, A]
    auto cls = scores.permute({0, 2, 1}).gather(1, labels.unsqueeze(-1).expand({B, M, A}));  // [B, M, A]
    auto metric = cls.pow(opt_.alpha) * ious.pow(opt_.beta);

    auto in_gts = points_inside_boxes(anchor_points.to(torch::kFloat32), gboxes);
    const int64_t k = std::min<int64_t>(opt_.topk, A);
    auto idx = std::get<1>((metric * in_gts).topk(k, -1, /*largest=*/true));
    auto in_topk = torch::zeros_like(metric).scatter_(-1, idx, 1.0) * pad;
    auto positive = in_topk * in_gts * pad;                                         // [B, M, A]

    // Anchors positive for several gts: the gt with the largest IoU to the anchor's prediction.
    auto multi = (positive.sum(1, true) > 1).expand({B, M, A});
    auto best = torch::zeros_like(positive).scatter_(1, ious.argmax(1, true), 1.0);
    positive = torch::where(multi, best, positive);
    auto fg = positive.sum(1) > 0;                                                   // [B, A]

    auto gt_index = positive.argmax(1) + torch::arange(B, labels.options()).unsqueeze(1) * M;  // [B, A]
    auto t_labels = labels.view({-1}).index_select(0, gt_index.view({-1})).view({B, A});
    t_labels = torch::where(fg, t_labels, torch::full_like(t_labels, nc_));
    auto t_boxes = gboxes.view({-1, 4}).index_select(0, gt_index.view({-1})).view({B, A, 4});
    // one_hot(labels, nc + 1) without the background column; scatter rather than one_hot (no host read).
    auto t_scores = torch::zeros({B, A, nc_ + 1}, fopts).scatter_(-1, t_labels.unsqueeze(-1), 1.0).narrow(-1, 0, nc_);

    metric = metric * positive;
    auto max_metric = metric.amax(-1, true);
    auto max_iou = (ious * positive).amax(-1, true);
    auto norm = (metric / (max_metric + opt_.eps) * max_iou).amax(1).unsqueeze(-1);  // [B, A, 1]
    return {t_labels, t_boxes, t_scores * norm, fg};
  }

  int64_t num_classes() const { return nc_; }
  const PPYoloETalOptions& options() const { return opt_; }

 private:
  int64_t nc_;
  PPYoloETalOptions opt_;
};

}  // namespace libreyolo::assign
