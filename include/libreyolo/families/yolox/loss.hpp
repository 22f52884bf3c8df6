#pragma once
// YOLOX's training loss as the original computes it (YOLOXHead.get_losses, libreyolo/models/yolox/nn.py):
// SimOTA assignment (assign/simota.hpp) on the detached decoded predictions, then over the batch's
// foreground anchors
//   iou  5 · sum(1 - IoU(pred, gt)²)            (IoULoss "iou", eps 1e-16)
//   obj  sum over all anchors BCE(obj logit, fg)
//   cls  sum BCE(class logits, one-hot(gt class) · IoU of the match)
//   l1   sum |raw box output - (gt_cx / s - gx, gt_cy / s - gy, log(gt_w / s + 1e-8), log(gt_h / s + 1e-8))|
//        only once use_l1 is on (the original turns it on when mosaic closes, no_aug_epochs before the end)
// each divided by max(number of foreground anchors in the batch, 1); total = iou + obj + cls + l1.
// Foreground terms are selected by masks (torch::where), so every shape is fixed and nothing reads the
// device: the step launches no host synchronisation.
#include <libreyolo/assign/simota.hpp>
#include <libreyolo/capture/level_cache.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolox {

struct YoloxLossOutput {
  torch::Tensor total;   // scalar, differentiable
  torch::Tensor items;   // [4] iou (×5), obj, cls, l1; detached
  torch::Tensor num_fg;  // scalar, foreground anchors in the batch
};

// Per-anchor rows of the raw head maps: [B, A, 5 + nc] (level by level, row-major within a level).
inline torch::Tensor flatten_levels(const std::vector<torch::Tensor>& feats) {
  std::vector<torch::Tensor> rows;
  rows.reserve(feats.size());
  for (const auto& f : feats) rows.push_back(f.flatten(2).transpose(1, 2));
  return torch::cat(rows, 1);
}

// Grid cell (x, y) [A, 2] and stride [A] of every anchor, levels in order.
inline std::pair<torch::Tensor, torch::Tensor> grids_of(const std::vector<torch::Tensor>& feats,
                                                        const std::vector<int64_t>& strides) {
  std::vector<torch::Tensor> g, s;
  for (size_t i = 0; i < feats.size(); ++i) {
    const int64_t h = feats[i].size(2), w = feats[i].size(3);
    auto opt = torch::TensorOptions().dtype(torch::kFloat32).device(feats[i].device());
    auto ys = torch::arange(h, opt).view({h, 1}).expand({h, w});
    auto xs = torch::arange(w, opt).view({1, w}).expand({h, w});
    g.push_back(torch::stack({xs, ys}, -1).reshape({h * w, 2}));
    s.push_back(torch::full({h * w}, static_cast<double>(strides[i]), opt));
  }
  return {torch::cat(g, 0), torch::cat(s, 0)};
}

// rows [..., 5 + nc] raw -> cxcywh pixels [..., 4]: ((x, y) + grid) · s, exp(w, h) · s.
inline torch::Tensor decode_boxes(const torch::Tensor& rows, const torch::Tensor& grid, const torch::Tensor& strides) {
  auto s = strides.unsqueeze(-1);
  return torch::cat({(rows.narrow(-1, 0, 2) + grid) * s, rows.narrow(-1, 2, 2).exp() * s}, -1);
}

// The product of the last dimension's two entries. Not prod(-1): its backward reads a value back to the
// host (a zero test), which a CUDA graph capture of the whole step cannot do.
inline torch::Tensor prod2(const torch::Tensor& x) { return x.select(-1, 0) * x.select(-1, 1); }

// The IoU of cxcywh boxes, element-wise (IoULoss's formula).
inline torch::Tensor paired_iou(const torch::Tensor& p, const torch::Tensor& t) {
  auto tl = torch::max(p.narrow(-1, 0, 2) - p.narrow(-1, 2, 2) / 2, t.narrow(-1, 0, 2) - t.narrow(-1, 2, 2) / 2);
  auto br = torch::min(p.narrow(-1, 0, 2) + p.narrow(-1, 2, 2) / 2, t.narrow(-1, 0, 2) + t.narrow(-1, 2, 2) / 2);
  auto area_p = prod2(p.narrow(-1, 2, 2)), area_g = prod2(t.narrow(-1, 2, 2));
  auto en = prod2((tl < br).to(tl.scalar_type()));
  auto area_i = prod2(br - tl) * en;
  return area_i / (area_p + area_g - area_i + 1e-16);
}

// The terms YOLOX's head and YOLOv7's SimOTA loss share (families/yolov7/loss.hpp), over the batch, each
// divided by max(number of foreground anchors, 1): iou sum(1 - IoU²) over the foreground (unweighted), obj
// BCE on every anchor against the foreground mask, cls BCE against one-hot(gt class) · the match's IoU over
// the foreground. SimOTA (assign/simota.hpp) runs on the detached boxes and logits.
struct SimOtaTerms {
  torch::Tensor iou, obj, cls;  // scalars
  torch::Tensor fg;             // [B, A] bool
  torch::Tensor t_box;          // [B, A, 4] the matched gt (cxcywh pixels; gt 0 of the image where background)
  torch::Tensor num_fg;         // scalar float, foreground anchors in the batch
  torch::Tensor denom;          // max(num_fg, 1)
};

// boxes [B, A, 4] cxcywh pixels (differentiable), obj [B, A, 1] and cls [B, A, nc] logits; grid [A, 2] cells
// (x, y) and stride [A] of every anchor; targets [B, M, 5] rows (class, x1, y1, x2, y2) in input pixels,
// padding rows with class -1.
inline SimOtaTerms simota_terms(const assign::SimOta& assigner, const torch::Tensor& boxes, const torch::Tensor& obj,
                                const torch::Tensor& cls, const torch::Tensor& grid, const torch::Tensor& stride,
                                const torch::Tensor& targets) {
  const int64_t B = boxes.size(0), A = boxes.size(1), nc = cls.size(-1);
  auto t = targets.to(boxes.device(), torch::kFloat32);
  const int64_t M = t.size(1);
  auto labels = t.select(-1, 0);
  auto xyxy = t.narrow(-1, 1, 4);
  auto gt = torch::cat({(xyxy.narrow(-1, 0, 2) + xyxy.narrow(-1, 2, 2)) / 2, xyxy.narrow(-1, 2, 2) - xyxy.narrow(-1, 0, 2)}, -1);
  auto valid = (labels >= 0).to(torch::kFloat32);

  auto m = assigner(boxes.detach(), cls.detach(), obj.detach(), grid, stride, gt, labels, valid);
  SimOtaTerms r;
  r.fg = m.fg_mask > 0;  // [B, A]
  r.num_fg = m.num_fg;
  r.denom = m.num_fg.clamp_min(1.0);

  // The matched gt of every anchor (gt 0 of the image where background; masked out below).
  torch::Tensor t_cls;
  if (M > 0) {
    auto flat = (m.gt_index + torch::arange(B, m.gt_index.options()).unsqueeze(1) * M).view({-1});
    r.t_box = gt.reshape({-1, 4}).index_select(0, flat).view({B, A, 4});
    t_cls = labels.clamp_min(0).to(torch::kInt64).reshape({-1}).index_select(0, flat).view({B, A, 1});
  } else {
    r.t_box = torch::ones({B, A, 4}, boxes.options());
    t_cls = torch::zeros({B, A, 1}, boxes.options().dtype(torch::kInt64));
  }
  auto zero = torch::zeros({}, boxes.options());

  auto iou_terms = 1.0 - paired_iou(boxes, r.t_box).pow(2);
  r.iou = torch::where(r.fg, iou_terms, zero).sum() / r.denom;

  r.obj = torch::binary_cross_entropy_with_logits(obj.squeeze(-1), m.fg_mask, {}, {}, at::Reduction::None).sum() / r.denom;

  auto cls_target = torch::zeros({B, A, nc}, boxes.options()).scatter_(-1, t_cls, 1.0) * m.iou.unsqueeze(-1);
  auto cls_terms = torch::binary_cross_entropy_with_logits(cls, cls_target, {}, {}, at::Reduction::None).sum(-1);
  r.cls = torch::where(r.fg, cls_terms, zero).sum() / r.denom;
  return r;
}

class YoloxLoss {
 public:
  YoloxLoss(std::vector<int64_t> strides, int64_t nc) : strides_(std::move(strides)), nc_(nc), assigner_(nc) {}

  bool use_l1 = false;

  // feats: the network's raw maps [B, 5 + nc, H/s, W/s]; targets [B, M, 5] rows (class, x1, y1, x2, y2) in
  // input pixels, padding rows with class -1.
  YoloxLossOutput operator()(const std::vector<torch::Tensor>& feats, const torch::Tensor& targets) {
    check(feats, targets);
    std::vector<torch::Tensor> f32;
    for (const auto& f : feats) f32.push_back(f.to(torch::kFloat32));
    auto rows = flatten_levels(f32);  // [B, A, 5 + nc]
    const int64_t A = rows.size(1);
    auto [grid, stride] = grid_cache(f32);
    auto raw_box = rows.narrow(-1, 0, 4);
    auto obj = rows.narrow(-1, 4, 1);
    auto cls = rows.narrow(-1, 5, nc_);
    auto boxes = decode_boxes(rows, grid, stride);  // [B, A, 4] cxcywh, differentiable

    auto st = simota_terms(assigner_, boxes, obj, cls, grid, stride, targets);
    auto zero = torch::zeros({}, rows.options());

    torch::Tensor loss_l1 = zero;
    if (use_l1) {
      auto s = stride.view({1, A, 1});
      auto l1_target = torch::cat({st.t_box.narrow(-1, 0, 2) / s - grid.unsqueeze(0), (st.t_box.narrow(-1, 2, 2) / s + 1e-8).log()}, -1);
      auto l1_terms = (raw_box - l1_target).abs().sum(-1);
      loss_l1 = torch::where(st.fg, l1_terms, zero).sum() / st.denom;
    }

    constexpr double reg_weight = 5.0;
    auto items = torch::stack({reg_weight * st.iou, st.obj, st.cls, loss_l1});
    return {items.sum(), items.detach(), st.num_fg};
  }

  const std::vector<int64_t>& strides() const { return strides_; }

 private:
  void check(const std::vector<torch::Tensor>& feats, const torch::Tensor& targets) const {
    if (feats.size() != strides_.size())
      throw ConfigError("YoloxLoss: got " + std::to_string(feats.size()) + " feature maps for " +
                        std::to_string(strides_.size()) + " strides");
    for (const auto& f : feats)
      if (f.dim() != 4 || f.size(1) != 5 + nc_)
        throw ConfigError("YoloxLoss: feature maps must be [B, " + std::to_string(5 + nc_) + ", H, W] (4 + 1 + nc)");
    if (targets.dim() != 3 || targets.size(2) != 5 || targets.size(0) != feats.front().size(0))
      throw DataError("YoloxLoss: targets must be [B, M, 5] = (class, x1, y1, x2, y2) with B = " +
                      std::to_string(feats.front().size(0)));
  }
  // Grids depend only on the map sizes and the device: built once per shape (outside a graph capture).
  std::pair<torch::Tensor, torch::Tensor> grid_cache(const std::vector<torch::Tensor>& feats) {
    return cache_.get(feats, [&] { return grids_of(feats, strides_); });
  }
  std::vector<int64_t> strides_;
  int64_t nc_;
  assign::SimOta assigner_;
  capture::LevelCache<std::pair<torch::Tensor, torch::Tensor>> cache_;
};

}  // namespace libreyolo::families::yolox
