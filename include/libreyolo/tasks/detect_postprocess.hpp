#pragma once
// The detection task's post-processing that families share: the one options type a family's decode()
// is asked for (DecodeOptions), anchor points and DFL decoding of anchor-free heads (YOLOv9; its loss
// too), and the confidence filter + class-aware NMS + max_det on decoded rows (YOLOv9, YOLOX, RTMDet,
// YOLOv7, YOLO-NAS). A family turns its head outputs into rows [B, A, 4 + nc] (xyxy boxes in
// network-input pixels, then class scores) and calls non_max_suppression; the DETRs decode NMS-free
// (nn/detr/topk_decode.hpp).
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::tasks {

// What a family's decode() is asked for (the NMS families read every field, the NMS-free DETRs conf and
// max_det).
struct DecodeOptions {
  double conf = 0.25;         // minimum class score kept (Ultralytics predicts at 0.25, validates at 0.001)
  double iou = 0.7;           // NMS IoU above which a lower-scored box of the same class is dropped
  int64_t max_det = 300;      // detections kept per image
  int64_t max_nms = 30000;    // candidates entering NMS per image, best first
  bool multi_label = false;   // one row per (box, class) above conf instead of the best class only
  bool agnostic = false;      // NMS across classes
  // Per image of the batch, the image's own region in the network input (x1, y1, x2, y2: inside the letterbox
  // padding): boxes are clamped to it and the empty ones dropped before NMS, as every NMS original's postprocess
  // clamps to the original image first (postprocess/yolo9.py :480, common.py :80, yolonas.py :93). Empty: no clamp.
  std::vector<std::array<double, 4>> clip;
};

// The originals' validation post-processing during training: conf 0.001, class-aware NMS at IoU 0.65
// (training/trainer.py:1728 at c41461e), 300 detections per image; every (box, class) pair above conf
// (multi_label: Ultralytics', YOLOv9's) or the best class of each box (YOLOX's, YOLOv7's, YOLO-NAS's own
// postprocess). A checkpoint validated on its own (`val`) runs NMS at kStandaloneValIou instead.
// The original's `val()` default NMS IoU (models/base/model.py:1062, ValidationConfig.iou_thres): what `libreyolo
// val` runs, where the validation inside training runs validation_decode's 0.65.
inline constexpr double kStandaloneValIou = 0.6;

inline DecodeOptions validation_decode(bool multi_label) {
  DecodeOptions o;
  o.conf = 0.001;
  o.iou = 0.65;
  o.max_det = 300;
  o.multi_label = multi_label;
  return o;
}

namespace detect {

struct Anchors {
  torch::Tensor points;   // [A, 2] cell centres (x, y) in grid units of their level
  torch::Tensor strides;  // [A, 1] the stride of each anchor's level
};

// One anchor per cell of every map, level by level, row-major; centres at +0.5 like Ultralytics.
inline Anchors make_anchors(const std::vector<torch::Tensor>& feats, const std::vector<int64_t>& strides,
                            double offset = 0.5) {
  if (feats.size() != strides.size())
    throw ConfigError("make_anchors: " + std::to_string(feats.size()) + " feature maps but " +
                      std::to_string(strides.size()) + " strides");
  std::vector<torch::Tensor> points, stride_cols;
  for (size_t i = 0; i < feats.size(); ++i) {
    const int64_t h = feats[i].size(-2), w = feats[i].size(-1);
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(feats[i].device());
    auto sx = torch::arange(w, opts) + offset;
    auto sy = torch::arange(h, opts) + offset;
    auto grid = torch::meshgrid({sy, sx}, "ij");
    points.push_back(torch::stack({grid[1], grid[0]}, -1).view({-1, 2}));
    stride_cols.push_back(torch::full({h * w, 1}, static_cast<double>(strides[i]), opts));
  }
  return {torch::cat(points), torch::cat(stride_cols)};
}

// Expected distance of each box side from its DFL logits: softmax over reg_max bins · (0..reg_max-1).
// pred_dist [..., 4·reg_max] viewed as [..., 4, reg_max] (the bins of each box side).
inline torch::Tensor dfl_bins(const torch::Tensor& pred_dist, int64_t reg_max) {
  if (pred_dist.dim() < 1 || pred_dist.size(-1) != 4 * reg_max)
    throw ConfigError("DFL: the last dimension must be 4·reg_max = " + std::to_string(4 * reg_max) + ", got shape " +
                      c10::str(pred_dist.sizes()));
  std::vector<int64_t> sizes(pred_dist.sizes().begin(), pred_dist.sizes().end() - 1);
  sizes.push_back(4);
  sizes.push_back(reg_max);
  return pred_dist.reshape(sizes);
}

// pred_dist [..., 4·reg_max] -> [..., 4].
inline torch::Tensor dfl_decode(const torch::Tensor& pred_dist, int64_t reg_max) {
  auto prob = dfl_bins(pred_dist, reg_max).softmax(-1);
  auto bins = torch::arange(reg_max, prob.options());
  return (prob * bins).sum(-1);
}

// (left, top, right, bottom) distances from anchor points -> xyxy boxes. [..., 4] with points [..., 2].
inline torch::Tensor dist2bbox(const torch::Tensor& ltrb, const torch::Tensor& points) {
  auto lt = ltrb.narrow(-1, 0, 2), rb = ltrb.narrow(-1, 2, 2);
  return torch::cat({points - lt, points + rb}, -1);
}

// xyxy boxes -> (l, t, r, b) distances from the anchor points, clamped to what the DFL bins can say.
inline torch::Tensor bbox2dist(const torch::Tensor& points, const torch::Tensor& boxes, double max_dist) {
  auto lt = points - boxes.narrow(-1, 0, 2), rb = boxes.narrow(-1, 2, 2) - points;
  return torch::cat({lt, rb}, -1).clamp(0, max_dist);
}

// Greedy NMS that never merges boxes of different classes. boxes [N, 4] xyxy, scores [N], classes
// [N]. Returns the kept indices (int64, on the input's device), best score first, at most max_keep.
// Stopping after max_keep keeps the cost at max_keep × N even for tens of thousands of candidates.
inline torch::Tensor batched_nms(const torch::Tensor& boxes, const torch::Tensor& scores, const torch::Tensor& classes,
                                 double iou_threshold, int64_t max_keep = -1) {
  const auto device = boxes.device();
  auto order = std::get<1>(scores.to(torch::kFloat32).sort(0, /*descending=*/true)).to(torch::kCPU);
  auto b = boxes.to(torch::kCPU, torch::kFloat32).index_select(0, order).contiguous();
  auto c = classes.to(torch::kCPU, torch::kInt64).index_select(0, order).contiguous();
  const int64_t n = b.size(0);
  const float* bp = b.data_ptr<float>();
  const int64_t* cp = c.data_ptr<int64_t>();
  const int64_t* op = order.data_ptr<int64_t>();
  std::vector<char> suppressed(static_cast<size_t>(n), 0);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < n && (max_keep < 0 || static_cast<int64_t>(keep.size()) < max_keep); ++i) {
    if (suppressed[i]) continue;
    keep.push_back(op[i]);
    const float* bi = bp + 4 * i;
    const float area_i = (bi[2] - bi[0]) * (bi[3] - bi[1]);
    for (int64_t j = i + 1; j < n; ++j) {
      if (suppressed[j] || cp[j] != cp[i]) continue;
      const float* bj = bp + 4 * j;
      const float iw = std::max(0.0f, std::min(bi[2], bj[2]) - std::max(bi[0], bj[0]));
      const float ih = std::max(0.0f, std::min(bi[3], bj[3]) - std::max(bi[1], bj[1]));
      const float inter = iw * ih;
      const float uni = area_i + (bj[2] - bj[0]) * (bj[3] - bj[1]) - inter;
      if (uni > 0 && inter / uni > iou_threshold) suppressed[j] = 1;
    }
  }
  return torch::tensor(keep, torch::kInt64).to(device);
}

// decoded [B, A, 4 + nc] (xyxy, then class scores) -> per image [N, 6] = x1, y1, x2, y2, score, class.
inline std::vector<torch::Tensor> non_max_suppression(const torch::Tensor& decoded, const DecodeOptions& opt = {}) {
  if (opt.conf < 0 || opt.conf > 1 || opt.iou < 0 || opt.iou > 1)
    throw ConfigError("NMS thresholds must lie in [0, 1], got conf=" + std::to_string(opt.conf) +
                      " iou=" + std::to_string(opt.iou));
  std::vector<torch::Tensor> out;
  for (int64_t img = 0; img < decoded.size(0); ++img) {
    auto rows = decoded[img];
    auto boxes = rows.narrow(1, 0, 4), scores = rows.narrow(1, 4, rows.size(1) - 4);
    torch::Tensor det;
    if (opt.multi_label) {
      auto pairs = (scores > opt.conf).nonzero();  // [K, 2] = anchor, class
      auto a = pairs.select(1, 0), k = pairs.select(1, 1);
      det = torch::cat({boxes.index_select(0, a), scores.index({a, k}).unsqueeze(1),
                        k.unsqueeze(1).to(rows.scalar_type())}, 1);
    } else {
      auto [best, cls] = scores.max(1);
      auto sel = (best > opt.conf).nonzero().squeeze(1);
      det = torch::cat({boxes.index_select(0, sel), best.index_select(0, sel).unsqueeze(1),
                        cls.index_select(0, sel).unsqueeze(1).to(rows.scalar_type())}, 1);
    }
    if (det.size(0) > opt.max_nms) det = det.index_select(0, std::get<1>(det.select(1, 4).topk(opt.max_nms)));
    if (!opt.clip.empty()) {
      if (static_cast<int64_t>(opt.clip.size()) != decoded.size(0))
        throw Error("non_max_suppression: " + std::to_string(opt.clip.size()) + " clip regions for a batch of " +
                    std::to_string(decoded.size(0)) + " images");
      const auto& r = opt.clip[static_cast<size_t>(img)];
      det.select(1, 0).clamp_(r[0], r[2]), det.select(1, 2).clamp_(r[0], r[2]);
      det.select(1, 1).clamp_(r[1], r[3]), det.select(1, 3).clamp_(r[1], r[3]);
      det = det.index_select(0, ((det.select(1, 2) > det.select(1, 0)) & (det.select(1, 3) > det.select(1, 1))).nonzero().squeeze(1));
    }
    auto classes = opt.agnostic ? torch::zeros({det.size(0)}, det.options().dtype(torch::kInt64)) : det.select(1, 5);
    auto keep = batched_nms(det.narrow(1, 0, 4), det.select(1, 4), classes, opt.iou, opt.max_det);
    out.push_back(det.index_select(0, keep));
  }
  return out;
}

}  // namespace detect

}  // namespace libreyolo::tasks
