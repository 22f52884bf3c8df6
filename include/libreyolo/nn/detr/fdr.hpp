#pragma once
// Fine-grained Distribution Refinement (FDR), the numerical core of D-FINE's box head (the original's
// models/dfine/fdr.py; DEIM and RT-DETRv4 share it). A box is predicted as four distributions, one per
// edge (left, top, right, bottom), over reg_max + 1 bins whose positions are the non-uniform sequence
// W(n) (weighting_function); the edge offset is the distribution's expectation over W (integral), and
// the box is the reference box moved by those offsets (distance2bbox). bbox2distance is the inverse the
// localisation loss (FGL) needs: a target box as per-edge bin positions plus the two-bin interpolation
// weights (translate_gt).
//
// Every function here is fixed-shape and sync-free (no .item(), no boolean indexing): up and reg_scale
// stay tensors on their device.
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <tuple>

namespace libreyolo::nn::detr {

// W(n), n = 0 .. reg_max: [reg_max + 1] values, increasing, W(reg_max / 2) = 0.
//   u1 = |up| * |reg_scale|, u2 = 2 * u1, step = (u1 + 1)^(2 / (reg_max - 2))
//   W = [-u2, -(step^(h-1)) + 1, ..., -(step^1) + 1, 0, step^1 - 1, ..., step^(h-1) - 1, u2],  h = reg_max / 2
// up, reg_scale: one-element tensors ([1]); the result has up's dtype and device. reg_max even, >= 4.
inline torch::Tensor weighting_function(int64_t reg_max, const torch::Tensor& up, const torch::Tensor& reg_scale) {
  TORCH_CHECK(reg_max >= 4 && reg_max % 2 == 0, "weighting_function: reg_max must be even and >= 4, got ", reg_max);
  auto u = up.reshape({-1}).narrow(0, 0, 1).abs();
  auto r = reg_scale.reshape({-1}).narrow(0, 0, 1).abs().to(u.scalar_type());
  auto u1 = u * r, u2 = u * r * 2;
  auto step = torch::pow(u1 + 1, 2.0 / static_cast<double>(reg_max - 2));
  auto i = torch::arange(1, reg_max / 2, u.options());  // 1 .. h-1
  auto p = torch::pow(step, i);                        // step^i
  auto right = p - 1;
  auto left = -p.flip({0}) + 1;
  return torch::cat({-u2, left, torch::zeros_like(u), right, u2}, 0);
}

// The expectation of each edge's distribution: softmax over the reg_max + 1 bins, dotted with W.
// x [..., 4 * (reg_max + 1)] logits, project [reg_max + 1] (weighting_function) -> [..., 4].
inline torch::Tensor integral(const torch::Tensor& x, const torch::Tensor& project, int64_t reg_max) {
  auto sizes = x.sizes().vec();
  auto p = torch::softmax(x.reshape({-1, reg_max + 1}), 1);
  auto y = torch::linear(p, project.to(p.device(), p.scalar_type()).unsqueeze(0)).reshape({-1, 4});
  sizes.back() = 4;
  return y.reshape(sizes);
}

// Reference box (cx, cy, w, h) moved by per-edge distances (left, top, right, bottom), in units of
// w / |reg_scale| (h / |reg_scale|) beyond the half box (0.5 * |reg_scale| units):
//   x1 = cx - (0.5 |s| + d_l) * w / |s|,   y1 = cy - (0.5 |s| + d_t) * h / |s|
//   x2 = cx + (0.5 |s| + d_r) * w / |s|,   y2 = cy + (0.5 |s| + d_b) * h / |s|
// returned as cx, cy, w, h. Zero distances give the reference box back.
// points [..., 4], distance [..., 4], reg_scale a one-element tensor (broadcast).
inline torch::Tensor distance2bbox(const torch::Tensor& points, const torch::Tensor& distance, const torch::Tensor& reg_scale) {
  auto s = reg_scale.abs().to(points.scalar_type()).reshape({-1}).narrow(0, 0, 1);
  auto cx = points.select(-1, 0), cy = points.select(-1, 1), w = points.select(-1, 2), h = points.select(-1, 3);
  auto x1 = cx - (0.5 * s + distance.select(-1, 0)) * (w / s);
  auto y1 = cy - (0.5 * s + distance.select(-1, 1)) * (h / s);
  auto x2 = cx + (0.5 * s + distance.select(-1, 2)) * (w / s);
  auto y2 = cy + (0.5 * s + distance.select(-1, 3)) * (h / s);
  return box_xyxy_to_cxcywh(torch::stack({x1, y1, x2, y2}, -1));
}

// A continuous edge distance as a position between two adjacent bins of W (the original's translate_gt):
// for each value g (gt flattened), the left bin i = #{n : W(n) <= g} - 1 and the weights
//   weight_right = |g - W(i)| / (|g - W(i)| + |W(i+1) - g|), weight_left = 1 - weight_right   (0 <= i < reg_max);
// below W(0): i = 0, weight_left 1, weight_right 0; at or above W(reg_max): i = reg_max - 0.1,
// weight_left 0, weight_right 1. Returns (i as float [N], weight_right [N], weight_left [N]).
inline std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> translate_gt(const torch::Tensor& gt, int64_t reg_max,
                                                                            const torch::Tensor& reg_scale, const torch::Tensor& up) {
  auto g = gt.reshape({-1});
  auto fv = weighting_function(reg_max, up, reg_scale).to(g.scalar_type());
  auto left_idx = ((fv.unsqueeze(0) - g.unsqueeze(1)) <= 0).sum(1) - 1;  // int64 [N], -1 .. reg_max
  auto indices = left_idx.to(g.scalar_type());
  auto valid = (left_idx >= 0) & (left_idx < reg_max);
  auto ic = left_idx.clamp(0, reg_max - 1);
  auto lv = fv.index_select(0, ic), rv = fv.index_select(0, ic + 1);
  auto ld = (g - lv).abs(), rd = (rv - g).abs();
  auto wr_valid = ld / (ld + rd);
  auto zeros = torch::zeros_like(g), ones = torch::ones_like(g);
  auto neg = left_idx < 0, pos = left_idx >= reg_max;
  auto weight_right = torch::where(valid, wr_valid, torch::where(pos, ones, zeros));
  auto weight_left = torch::where(valid, 1.0 - wr_valid, torch::where(pos, zeros, ones));
  indices = torch::where(neg, zeros, indices);
  indices = torch::where(pos, torch::full_like(g, static_cast<double>(reg_max) - 0.1), indices);
  return {indices, weight_right, weight_left};
}

// The inverse of distance2bbox for the localisation targets (the original's bbox2distance): the edge
// distances of target boxes bbox (x1, y1, x2, y2) from reference points (cx, cy, w, h),
//   d_l = (cx - x1) / (w / |s| + 1e-16) - 0.5 |s|,  d_t = (cy - y1) / (h / |s| + 1e-16) - 0.5 |s|,
//   d_r = (x2 - cx) / (w / |s| + 1e-16) - 0.5 |s|,  d_b = (y2 - cy) / (h / |s| + 1e-16) - 0.5 |s|,
// each turned into its left bin and weights by translate_gt, the bin clamped to [0, reg_max - eps].
// points [n, 4], bbox [n, 4] -> (bins [4n], weight_right [4n], weight_left [4n]), all detached, in the
// order point 0's (l, t, r, b), point 1's, ...
inline std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> bbox2distance(const torch::Tensor& points, const torch::Tensor& bbox,
                                                                             int64_t reg_max, const torch::Tensor& reg_scale,
                                                                             const torch::Tensor& up, double eps = 0.1) {
  auto s = reg_scale.abs().to(points.scalar_type()).reshape({-1}).narrow(0, 0, 1);
  auto cx = points.select(-1, 0), cy = points.select(-1, 1), w = points.select(-1, 2), h = points.select(-1, 3);
  auto left = (cx - bbox.select(-1, 0)) / (w / s + 1e-16) - 0.5 * s;
  auto top = (cy - bbox.select(-1, 1)) / (h / s + 1e-16) - 0.5 * s;
  auto right = (bbox.select(-1, 2) - cx) / (w / s + 1e-16) - 0.5 * s;
  auto bottom = (bbox.select(-1, 3) - cy) / (h / s + 1e-16) - 0.5 * s;
  auto four = torch::stack({left, top, right, bottom}, -1);
  auto [bins, wr, wl] = translate_gt(four, reg_max, s, up);
  bins = bins.clamp(0.0, static_cast<double>(reg_max) - eps);
  return {bins.reshape({-1}).detach(), wr.detach(), wl.detach()};
}

// The inverse of distance2bbox as continuous distances (no binning): what bbox2distance computes before
// translate_gt. points [..., 4] (cx, cy, w, h), bbox [..., 4] (x1, y1, x2, y2) -> [..., 4] (l, t, r, b).
inline torch::Tensor bbox2distance_continuous(const torch::Tensor& points, const torch::Tensor& bbox, const torch::Tensor& reg_scale) {
  auto s = reg_scale.abs().to(points.scalar_type()).reshape({-1}).narrow(0, 0, 1);
  auto cx = points.select(-1, 0), cy = points.select(-1, 1), w = points.select(-1, 2), h = points.select(-1, 3);
  return torch::stack({(cx - bbox.select(-1, 0)) / (w / s + 1e-16) - 0.5 * s, (cy - bbox.select(-1, 1)) / (h / s + 1e-16) - 0.5 * s,
                       (bbox.select(-1, 2) - cx) / (w / s + 1e-16) - 0.5 * s, (bbox.select(-1, 3) - cy) / (h / s + 1e-16) - 0.5 * s},
                      -1);
}

}  // namespace libreyolo::nn::detr
