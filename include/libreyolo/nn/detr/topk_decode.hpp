#pragma once
// The DETRs' NMS-free decode (the originals' postprocess/rtdetr.py and postprocess/dfine.py): sigmoid
// scores, the top max_det over the flattened queries x classes, boxes (cx, cy, w, h in [0, 1]) to xyxy in
// input pixels, scores > conf kept. RT-DETR and the D-FINE line differ only in the box conversion
// (D-FINE's clamps width and height at 0): the caller passes it.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace libreyolo::nn::detr {

// pred_logits [B, Q, C], pred_boxes [B, Q, 4] (the last decoder layer) -> per image [n, 6] x1 y1 x2 y2
// score class, in the pixels of an in_h x in_w network input.
inline std::vector<torch::Tensor> topk_decode(const torch::Tensor& pred_logits, const torch::Tensor& pred_boxes, int64_t in_h,
                                              int64_t in_w, double conf, int64_t max_det,
                                              torch::Tensor (*cxcywh_to_xyxy)(const torch::Tensor&)) {
  std::vector<torch::Tensor> dets;
  torch::NoGradGuard ng;
  const int64_t B = pred_logits.size(0), C = pred_logits.size(2);
  auto scores = torch::sigmoid(pred_logits.to(torch::kFloat32)).flatten(1);  // [B, Q*C]
  const int64_t k = std::min<int64_t>(max_det, scores.size(1));
  auto [top, ind] = scores.topk(k, 1);
  auto q = torch::div(ind, C, "floor"), cls = ind.remainder(C);
  auto boxes = pred_boxes.to(torch::kFloat32).gather(1, q.unsqueeze(-1).expand({B, k, 4}));
  auto xyxy = cxcywh_to_xyxy(boxes) *
              torch::tensor({static_cast<float>(in_w), static_cast<float>(in_h), static_cast<float>(in_w), static_cast<float>(in_h)},
                            boxes.options());
  for (int64_t i = 0; i < B; ++i) {
    auto d = torch::cat({xyxy[i], top[i].unsqueeze(1), cls[i].unsqueeze(1).to(torch::kFloat32)}, 1);
    dets.push_back(d.index_select(0, (top[i] > conf).nonzero().squeeze(1)));
  }
  return dets;
}

}  // namespace libreyolo::nn::detr
