#pragma once
// What every DETR decoder here (RT-DETR v1/v2, the D-FINE line) does the same way before its queries: the
// projected levels flattened into one token sequence, the levels' shapes at the fixed evaluation size, and the
// query-selection anchors (logit-space boxes per cell, +inf where a box leaves the unit square) cached per
// (device, shapes); the selection's test hook (forced_selection).
#include <libreyolo/nn/detr/deformable_attention.hpp>

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// [B, C, H_l, W_l] per level -> [B, sum H_l W_l, C]; the levels' (h, w) are appended to `shapes`.
inline torch::Tensor flatten_levels(const std::vector<torch::Tensor>& maps, SpatialShapes& shapes) {
  std::vector<torch::Tensor> flat;
  for (auto& p : maps) {
    shapes.push_back({p.size(2), p.size(3)});
    flat.push_back(p.flatten(2).permute({0, 2, 1}));
  }
  return torch::cat(flat, 1);
}

// The levels' shapes of a square input of side `size`: the given strides, doubled for each extra level.
inline SpatialShapes square_level_shapes(std::vector<int64_t> strides, int64_t levels, int64_t size) {
  SpatialShapes s;
  while (static_cast<int64_t>(strides.size()) < levels) strides.push_back(strides.back() * 2);
  for (auto st : strides) s.push_back({size / st, size / st});
  return s;
}

// Anchors (logit space, +inf where invalid) and the validity mask for the levels' shapes.
inline std::pair<torch::Tensor, torch::Tensor> query_anchors(const SpatialShapes& shapes, double eps, torch::Device dev) {
  std::vector<torch::Tensor> all;
  for (size_t lvl = 0; lvl < shapes.size(); ++lvl) {
    const int64_t h = shapes[lvl][0], w = shapes[lvl][1];
    auto g = torch::meshgrid({torch::arange(h, torch::kFloat32), torch::arange(w, torch::kFloat32)}, "ij");
    auto xy = (torch::stack({g[1], g[0]}, -1).unsqueeze(0) + 0.5) / torch::tensor({static_cast<float>(w), static_cast<float>(h)});
    auto wh = torch::ones_like(xy) * 0.05 * std::pow(2.0, static_cast<double>(lvl));
    all.push_back(torch::cat({xy, wh}, -1).reshape({-1, h * w, 4}));
  }
  auto a = torch::cat(all, 1);
  auto valid = ((a > eps) & (a < 1 - eps)).all(-1, true);
  a = torch::log(a / (1 - a));
  a = torch::where(valid, a, torch::full_like(a, std::numeric_limits<float>::infinity()));
  return {a.to(dev), valid.to(dev)};
}

// The DETR decoders' test hook (their forced_topk_indices member): the query selection's indices given
// by a test instead of the top-k, checked to be int64 [B, k] for the memory [B, N, C]; on its device.
inline torch::Tensor forced_selection(const torch::Tensor& forced, const torch::Tensor& memory, int64_t k) {
  TORCH_CHECK(forced.dim() == 2 && forced.size(0) == memory.size(0) && forced.size(1) == k && forced.scalar_type() == torch::kLong,
              "forced_topk_indices: expected int64 [", memory.size(0), ", ", k, "], got ", forced.scalar_type(), " ", forced.sizes());
  return forced.to(memory.device());
}

// query_anchors, made once per (device, shapes).
class AnchorCache {
 public:
  std::pair<torch::Tensor, torch::Tensor> get(const SpatialShapes& shapes, double eps, torch::Device dev) {
    std::vector<int64_t> key{static_cast<int64_t>(dev.type()), dev.index()};
    for (auto& s : shapes) key.insert(key.end(), {s[0], s[1]});
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(key, query_anchors(shapes, eps, dev)).first->second;
  }

 private:
  std::map<std::vector<int64_t>, std::pair<torch::Tensor, torch::Tensor>> cache_;
};

}  // namespace libreyolo::nn::detr
