#pragma once
// From raw YOLOv9 head maps to detections: the head maps flattened per anchor, DFL-decoded into boxes
// (tasks/detect_postprocess.hpp's anchors and DFL, shared with the loss), the detect task's NMS, and
// mapping boxes from the letterboxed network input back to the original image.
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/tasks/detect_postprocess.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::families::yolo9 {

// The detect task's anchors, DFL decoding and NMS (tasks/detect_postprocess.hpp), under the names this
// family's loss and tests use.
using tasks::detect::Anchors;
using tasks::detect::batched_nms;
using tasks::detect::bbox2dist;
using tasks::detect::dfl_bins;
using tasks::detect::dfl_decode;
using tasks::detect::dist2bbox;
using tasks::detect::make_anchors;
using tasks::detect::non_max_suppression;
using NmsOptions = tasks::DecodeOptions;  // the one options type of the detect task's decode and NMS

// Flattens the head maps into per-anchor rows: returns {box logits [B, A, 4·reg_max], class logits
// [B, A, nc]}.
inline std::pair<torch::Tensor, torch::Tensor> split_head_outputs(const std::vector<torch::Tensor>& feats,
                                                                  int64_t reg_max) {
  std::vector<torch::Tensor> flat;
  for (const auto& f : feats) flat.push_back(f.flatten(2));
  auto all = torch::cat(flat, 2).permute({0, 2, 1});
  const int64_t nc = all.size(2) - 4 * reg_max;
  if (nc < 1)
    throw ConfigError("yolo9 head maps have " + std::to_string(all.size(2)) + " channels, fewer than 4·reg_max + 1 = " +
                      std::to_string(4 * reg_max + 1));
  return {all.narrow(2, 0, 4 * reg_max), all.narrow(2, 4 * reg_max, nc)};
}

// Raw head maps -> [B, A, 4 + nc]: xyxy boxes in input pixels, then sigmoid class scores.
inline torch::Tensor decode_predictions(const std::vector<torch::Tensor>& feats, const std::vector<int64_t>& strides,
                                        int64_t reg_max) {
  auto [box_logits, cls_logits] = split_head_outputs(feats, reg_max);
  auto anchors = make_anchors(feats, strides);
  auto boxes = dist2bbox(dfl_decode(box_logits.to(torch::kFloat32), reg_max), anchors.points) * anchors.strides;
  return torch::cat({boxes, cls_logits.to(torch::kFloat32).sigmoid()}, -1);
}

// Raw head maps -> per-image detections in network-input pixels.
inline std::vector<torch::Tensor> postprocess(const std::vector<torch::Tensor>& feats,
                                              const std::vector<int64_t>& strides, int64_t reg_max,
                                              const tasks::DecodeOptions& opt = {}) {
  torch::NoGradGuard no_grad;
  return non_max_suppression(decode_predictions(feats, strides, reg_max), opt);
}

// Undo a letterbox: boxes in the network input (from_hw) were made by resizing the original image
// (to_hw) by `ratio` and padding `pad_xy` on the left/top (data::unletterbox).
inline torch::Tensor scale_boxes(const torch::Tensor& boxes, std::array<int64_t, 2> from_hw,
                                 std::array<int64_t, 2> to_hw, double ratio, std::array<double, 2> pad_xy) {
  return data::unletterbox(boxes, from_hw, to_hw, ratio, pad_xy);
}

// Same, for the centred letterbox: ratio = min(from/to) and the padding split evenly on both sides.
inline torch::Tensor scale_boxes(const torch::Tensor& boxes, std::array<int64_t, 2> from_hw,
                                 std::array<int64_t, 2> to_hw) {
  const double ratio = std::min(static_cast<double>(from_hw[0]) / static_cast<double>(to_hw[0]),
                                static_cast<double>(from_hw[1]) / static_cast<double>(to_hw[1]));
  const double pad_x = (static_cast<double>(from_hw[1]) - static_cast<double>(to_hw[1]) * ratio) / 2;
  const double pad_y = (static_cast<double>(from_hw[0]) - static_cast<double>(to_hw[0]) * ratio) / 2;
  return scale_boxes(boxes, from_hw, to_hw, ratio, {pad_x, pad_y});
}

}  // namespace libreyolo::families::yolo9
