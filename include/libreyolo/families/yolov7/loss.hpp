#pragma once
// YOLOv7's training loss as the original trains the `b` model (Libre-YOLO/libreyolo
// libreyolo/models/yolo7/loss.py YOLOv7Loss): YOLOX's SimOTA dynamic assignment (Ge et al. 2021) driven by
// v7's anchor decode. Per level the raw map [B, 3·(5+nc), H, W] is decoded anchor-major to boxes in
// input pixels, cx = (2σ(tx) - 0.5 + col)·s, cy likewise, w = (2σ(tw))²·anchor_w, h likewise, with the
// objectness and class logits beside them; all in float32 whatever the autocast dtype (v7's pixel-scale
// anchors overflow float16 box areas).
//
// SimOTA per image: candidates are the anchors whose cell centre ((col + 0.5)·s) lies within 1.5 strides
// of some gt centre; cost = BCE(sqrt(σ(cls)·σ(obj)), one-hot) summed over classes + 3·(-log(IoU + 1e-8))
// + 1e6 where the anchor is outside that gt's centre window; each gt takes its dynamic_k = max(1,
// int(sum of its 10 best IoUs)) cheapest anchors; an anchor taken by several gts keeps the cheapest.
// Losses over the batch, each divided by max(number of positives, 1): IoU loss 1 - IoU² on positives
// (weight 5), BCE objectness on every anchor against the positive mask, BCE classes on positives against
// one-hot × the matched IoU. total = 5·iou + obj + cls (a batch mean).
//
// Fixed-shape (cuda_graph=step records it): SimOTA runs as assign::SimOta on the padded targets (the same rules
// as the original's per-image loop: the candidates' top-10 IoUs, each gt's k cheapest, conflicts to the
// cheapest gt), the terms are YOLOX's (families/yolox/loss.hpp simota_terms: masks instead of boolean indexing,
// the normaliser a device tensor), and the per-anchor constants (cells, strides, anchor sizes) are built once
// per map size (capture::LevelCache): nothing reads the device back.
#include <libreyolo/assign/simota.hpp>
#include <libreyolo/capture/level_cache.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/yolov7/network.hpp>
#include <libreyolo/families/yolox/loss.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolov7 {

// The per-anchor constants of three maps' sizes, anchor-major within each level (the original's order):
// cell (col, row) [N, 2], stride [N], anchor (w, h) in pixels [N, 2].
struct Priors {
  torch::Tensor grid, strides, anchor_wh;
};

inline void check_maps(const std::vector<torch::Tensor>& maps, int64_t nc) {
  if (maps.size() != 3) throw ConfigError("yolov7: expected 3 head maps, got " + std::to_string(maps.size()));
  for (size_t l = 0; l < 3; ++l)
    if (maps[l].dim() != 4 || maps[l].size(1) != kAnchorsPerCell * (5 + nc))
      throw ConfigError("yolov7: head map " + std::to_string(l) + " has " + std::to_string(maps[l].size(1)) +
                        " channels, expected 3·(5 + " + std::to_string(nc) + ")");
}

inline Priors priors_of(const std::vector<torch::Tensor>& maps) {
  std::vector<torch::Tensor> grid, st, wh;
  const auto s = strides();
  for (size_t l = 0; l < 3; ++l) {
    const int64_t H = maps[l].size(2), W = maps[l].size(3);
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(maps[l].device());
    auto g = torch::meshgrid({torch::arange(H, opts), torch::arange(W, opts)}, "ij");
    grid.push_back(torch::stack({g[1].reshape(-1), g[0].reshape(-1)}, -1).repeat({kAnchorsPerCell, 1}));
    st.push_back(torch::full({kAnchorsPerCell * H * W}, static_cast<double>(s[l]), opts));
    // Fills only (no copy from the host): safe where a capture records it.
    for (const auto& an : anchors()[l])
      wh.push_back(torch::stack({torch::full({H * W}, an[0], opts), torch::full({H * W}, an[1], opts)}, -1));
  }
  return {torch::cat(grid), torch::cat(st), torch::cat(wh)};
}

// The three raw maps [B, 3·(5 + nc), H, W] -> [B, N, 5 + nc]: cx, cy, w, h (pixels), objectness logit, class
// logits, in float32.
inline torch::Tensor decode_rows(const std::vector<torch::Tensor>& maps, int64_t nc, const Priors& p) {
  std::vector<torch::Tensor> rows;
  for (const auto& m : maps) {
    auto raw = m.to(torch::kFloat32);
    const int64_t B = raw.size(0), H = raw.size(2), W = raw.size(3);
    rows.push_back(raw.view({B, kAnchorsPerCell, 5 + nc, H, W}).permute({0, 1, 3, 4, 2}).reshape({B, kAnchorsPerCell * H * W, 5 + nc}));
  }
  auto r = torch::cat(rows, 1);
  auto sig = r.narrow(-1, 0, 4).sigmoid();
  auto xy = (sig.narrow(-1, 0, 2) * 2 - 0.5 + p.grid) * p.strides.unsqueeze(-1);
  auto wh = (sig.narrow(-1, 2, 2) * 2).pow(2) * p.anchor_wh;
  return torch::cat({xy, wh, r.narrow(-1, 4, 1 + nc)}, -1);
}

struct Decoded {
  torch::Tensor out;      // [B, N, 5 + nc]: cx, cy, w, h (pixels), objectness logit, class logits
  torch::Tensor centres;  // [N, 2] cell centres (col + 0.5, row + 0.5)·stride in pixels
  torch::Tensor strides;  // [N]
};

// The three raw maps -> per-anchor predictions (prediction and validation; the loss caches its priors).
inline Decoded decode_maps(const std::vector<torch::Tensor>& maps, int64_t nc) {
  check_maps(maps, nc);
  const auto p = priors_of(maps);
  return {decode_rows(maps, nc, p), (p.grid + 0.5) * p.strides.unsqueeze(-1), p.strides};
}

struct V7LossOutput {
  torch::Tensor total;   // scalar
  torch::Tensor items;   // [3] iou (×5), obj, cls; detached
  torch::Tensor num_fg;  // scalar float, positives in the batch
};

class SimOTALoss {
 public:
  explicit SimOTALoss(int64_t nc, double reg_weight = 5.0) : nc_(nc), reg_weight_(reg_weight), assigner_(nc) {}

  // maps: the network's three raw maps; targets [B, M, 5] = (class, x1, y1, x2, y2) input pixels, padding
  // rows class -1.
  V7LossOutput operator()(const std::vector<torch::Tensor>& maps, const torch::Tensor& targets) {
    check_maps(maps, nc_);
    const int64_t B = maps.front().size(0);
    if (targets.dim() != 3 || targets.size(2) != 5 || targets.size(0) != B)
      throw DataError("yolov7 loss: targets must be [B, M, 5] = (class, x1, y1, x2, y2) with B = " + std::to_string(B));
    const auto p = cache_.get(maps, [&] { return priors_of(maps); });
    auto out = decode_rows(maps, nc_, p);
    auto st = yolox::simota_terms(assigner_, out.narrow(2, 0, 4), out.narrow(2, 4, 1), out.narrow(2, 5, nc_), p.grid,
                                  p.strides, targets);
    auto items = torch::stack({reg_weight_ * st.iou, st.obj, st.cls});
    return {items.sum(), items.detach(), st.num_fg};
  }

 private:
  int64_t nc_;
  double reg_weight_;
  assign::SimOta assigner_;
  capture::LevelCache<Priors> cache_;
};

}  // namespace libreyolo::families::yolov7
