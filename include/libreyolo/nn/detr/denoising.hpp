#pragma once
// Contrastive denoising (the original's get_contrastive_denoising_training_group): noised copies of the
// ground truth as extra decoder queries, a positive and a negative copy per group. The group count
// follows the batch's largest ground-truth count G: num_group = max(1, num_denoising / G), so the
// denoising part holds 2 * G * num_group queries and its size changes from batch to batch (why the
// decoder runs eager under today's CUDA graphs). An attention mask keeps the matching queries from seeing
// the denoising ones and the groups from seeing each other. A fixed capacity (denoising_capacity) pads the
// part to one size for every batch with at most M targets per image, G and the groups then computed on the
// device: the form a recorded step needs (issue 44). The batch's targets come in as fixed [B, M] slots
// (PaddedTargets, below), the form the set losses read too.
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// One image's ground truth: labels int64 [n], boxes float [n, 4] (cx, cy, w, h normalised to [0, 1]).
struct DetrTarget {
  torch::Tensor labels, boxes;
};

// A detection batch's label rows (per image [n, 5]: class, x1, y1, x2, y2, on the host) as one float32
// tensor of the rows with x2 > x1 and y2 > y1, and how many of them each image keeps: what the families
// turn into DetrTargets, for the whole batch at once (a handful of operators, not some thirty per image).
inline std::pair<torch::Tensor, std::vector<int64_t>> detr_valid_rows(const std::vector<torch::Tensor>& rows) {
  std::vector<int64_t> counts;
  if (rows.empty()) return {torch::zeros({0, 5}), counts};
  auto all = (rows.size() == 1 ? rows.front() : torch::cat(rows)).to(torch::kCPU, torch::kFloat32).contiguous();
  const float* p = all.data_ptr<float>();
  std::vector<int64_t> keep;
  int64_t at = 0;
  for (const auto& r : rows) {
    int64_t n = 0;
    for (int64_t k = 0; k < r.size(0); ++k, ++at)
      if (p[at * 5 + 3] > p[at * 5 + 1] && p[at * 5 + 4] > p[at * 5 + 2]) keep.push_back(at), ++n;
    counts.push_back(n);
  }
  if (static_cast<int64_t>(keep.size()) == all.size(0)) return {all, counts};
  auto idx = torch::empty({static_cast<int64_t>(keep.size())}, torch::kLong);
  if (!keep.empty()) std::memcpy(idx.data_ptr<int64_t>(), keep.data(), keep.size() * sizeof(int64_t));
  return {all.index_select(0, idx), counts};
}

// A detection batch's label rows as per-image DetrTargets on `dev`: the rows detr_valid_rows keeps, their
// labels, and the boxes `cxcywh(x1, y1, x2, y2)` makes of their corner columns (input pixels -> [N, 4],
// each DETR family's normalisation). The whole batch is converted at once and copied to the device in
// two copies; each image's targets are views of those.
template <class CxCyWh>
std::vector<DetrTarget> detr_targets_of(const std::vector<torch::Tensor>& rows, torch::Device dev, CxCyWh&& cxcywh) {
  const auto [r, counts] = detr_valid_rows(rows);
  auto labels = r.select(1, 0).to(torch::kLong).to(dev, /*non_blocking=*/true);
  auto boxes = cxcywh(r.select(1, 1), r.select(1, 2), r.select(1, 3), r.select(1, 4)).to(dev, /*non_blocking=*/true);
  std::vector<DetrTarget> out;
  if (counts.empty()) return out;
  auto ls = labels.split_with_sizes(counts), bs = boxes.split_with_sizes(counts);
  for (size_t i = 0; i < counts.size(); ++i) out.push_back({ls[i], bs[i]});
  return out;
}

// Per-image targets written into fixed [B, M] slots: image i's n_i labels and boxes at columns [0, n_i) in
// their order, the other slots holding `label_fill` and `box_fill` (cx, cy, w, h), `valid` true exactly at
// the written slots. Every image's targets go in at once (one index copy to the device, not three copies
// per image). M must be at least every n_i.
struct PaddedSlots {
  torch::Tensor labels;  // [B, M] int64
  torch::Tensor boxes;   // [B, M, 4] float32
  torch::Tensor valid;   // [B, M] bool
};
inline PaddedSlots scatter_targets(const std::vector<DetrTarget>& targets, int64_t M, int64_t label_fill,
                                   std::array<float, 4> box_fill, torch::Device dev) {
  const auto B = static_cast<int64_t>(targets.size());
  const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev);
  PaddedSlots out;
  out.labels = torch::full({B, M}, label_fill, lopt);
  out.boxes = torch::full({B, M, 4}, box_fill[0], lopt.dtype(torch::kFloat32));
  for (int64_t k = 1; k < 4; ++k)
    if (box_fill[static_cast<size_t>(k)] != box_fill[0]) out.boxes.select(2, k).fill_(box_fill[static_cast<size_t>(k)]);
  out.valid = torch::zeros({B, M}, lopt.dtype(torch::kBool));
  std::vector<int64_t> slots;
  std::vector<torch::Tensor> labels, boxes;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t n = targets[static_cast<size_t>(i)].labels.size(0);
    if (n == 0) continue;
    if (n > M) throw std::invalid_argument("scatter_targets: an image has " + std::to_string(n) + " targets, more than the " +
                                           std::to_string(M) + " slots");
    for (int64_t j = 0; j < n; ++j) slots.push_back(i * M + j);
    labels.push_back(targets[static_cast<size_t>(i)].labels);
    boxes.push_back(targets[static_cast<size_t>(i)].boxes);
  }
  if (slots.empty()) return out;
  auto host = torch::empty({static_cast<int64_t>(slots.size())}, torch::kLong);
  std::memcpy(host.data_ptr<int64_t>(), slots.data(), slots.size() * sizeof(int64_t));
  auto slot_idx = dev.is_cpu() ? host : host.to(dev);
  out.labels.view({-1}).index_put_({slot_idx}, (labels.size() == 1 ? labels.front() : torch::cat(labels)).to(dev, torch::kLong));
  out.boxes.view({-1, 4}).index_put_({slot_idx}, (boxes.size() == 1 ? boxes.front() : torch::cat(boxes)).to(dev, torch::kFloat32));
  out.valid.view({-1}).index_fill_(0, slot_idx, true);
  return out;
}

// The batch's targets in M slots per image (M = the largest count, at least 1, when 0 is passed): image
// i's n_i targets at [0, n_i); padding slots hold label 0 and the box (0.5, 0.5, 1, 1), a finite box with
// area, so the masked pairs' IoU and GIoU stay finite (a 0 * NaN would poison the sums and gradients).
struct PaddedTargets : PaddedSlots {
  std::vector<int64_t> counts;  // n_i, on the host
  int64_t M = 0;
  int64_t total() const {
    int64_t n = 0;
    for (auto c : counts) n += c;
    return n;
  }
};
inline PaddedTargets pad_targets(const std::vector<DetrTarget>& t, torch::Device dev, int64_t M = 0) {
  PaddedTargets out;
  for (auto& x : t) out.counts.push_back(x.labels.size(0)), M = std::max(M, out.counts.back());
  out.M = std::max<int64_t>(M, 1);
  static_cast<PaddedSlots&>(out) = scatter_targets(t, out.M, 0, {0.5f, 0.5f, 1.f, 1.f}, dev);
  return out;
}

// The denoising part of one batch. Its token count T is 2 * G * groups for a batch whose largest count is G
// (groups = max(1, num_denoising / G)), or a fixed capacity above that (a step graph's shape: see
// denoising_capacity); tokens past 2 * G * groups belong to no group, see only the matching queries, are
// seen by none and carry no loss. G and groups are also device scalars: every index the part needs is made
// on the device from them, so a recorded step can take them as inputs.
struct DenoisingMeta {
  int64_t num_group = 0;      // groups
  int64_t num_denoising = 0;  // T: the denoising queries before the matching ones
  int64_t num_queries = 0;
  int64_t max_gt = 0;         // G
  torch::Tensor largest, group_count;  // G and groups as int64 device scalars
  torch::Tensor real;                  // [T] bool: the tokens of the groups (false: capacity padding)
};

// The meta of a part of `tokens` tokens for device scalars G (int64; 0: no target in the batch, then no
// token is real) and groups; the host fields stay 0 (the caller sets them where it knows them).
inline DenoisingMeta denoising_meta(const torch::Tensor& G, const torch::Tensor& groups, int64_t tokens, int64_t num_queries) {
  DenoisingMeta m;
  m.num_denoising = tokens, m.num_queries = num_queries;
  m.largest = G.clamp_min(1);  // a divisor of the token indices (no token is real when G is 0)
  m.group_count = groups;
  m.real = torch::arange(tokens, G.options()) < 2 * G * groups;
  return m;
}
inline DenoisingMeta denoising_meta(int64_t G, int64_t groups, int64_t tokens, int64_t num_queries, torch::Device dev) {
  if (G <= 0 || groups <= 0 || tokens < 2 * G * groups)
    throw std::invalid_argument("denoising_meta: " + std::to_string(tokens) + " tokens cannot hold " + std::to_string(groups) +
                                " groups of 2 x " + std::to_string(G));
  const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev);
  auto m = denoising_meta(torch::full({}, G, lopt), torch::full({}, groups, lopt), tokens, num_queries);
  m.num_group = groups, m.max_gt = G;
  return m;
}

// The group's size only: 2 * G * max(1, num_denoising / G) queries for a batch whose largest count is G
// (0 when G == 0 or num_denoising <= 0).
inline int64_t denoising_query_count(int64_t max_gt, int64_t num_denoising) {
  if (num_denoising <= 0 || max_gt <= 0) return 0;
  return 2 * max_gt * std::max<int64_t>(1, num_denoising / max_gt);
}
// The largest denoising part of any batch whose largest count is at most M: the fixed token count a step
// graph keyed by M pads to (at most 2 * max(num_denoising, M)).
inline int64_t denoising_capacity(int64_t M, int64_t num_denoising) {
  int64_t c = 0;
  for (int64_t g = 1; g <= M; ++g) c = std::max(c, denoising_query_count(g, num_denoising));
  return c;
}

// Per token k of the denoising part, from the device scalars: its group k / 2G (-1 for capacity padding),
// its target column k % G, and whether it is a negative copy ((k % 2G) >= G).
struct DenoisingTokens {
  torch::Tensor group, column, negative;  // [T] int64, int64, bool
};
inline DenoisingTokens denoising_tokens(const DenoisingMeta& m, torch::Device dev) {
  const auto G = m.largest.to(dev), real = m.real.to(dev);
  auto k = torch::arange(m.num_denoising, torch::TensorOptions().dtype(torch::kLong).device(dev));
  auto r = k.remainder(2 * G);
  DenoisingTokens t;
  t.group = torch::where(real, torch::div(k, 2 * G, "floor"), torch::full_like(k, -1));
  t.column = k.remainder(G);
  t.negative = r >= G;
  return t;
}

// The attention mask of the denoising part followed by num_queries matching ones (true = blocked): matching
// queries (and capacity padding) do not see denoising ones; each group sees itself only among them.
inline torch::Tensor denoising_attn_mask(const DenoisingMeta& m, int64_t num_queries, torch::Device dev) {
  auto gi = torch::cat({denoising_tokens(m, dev).group, torch::full({num_queries}, int64_t{-1}, torch::TensorOptions().dtype(torch::kLong).device(dev))});
  auto row = gi.unsqueeze(1), col = gi.unsqueeze(0);
  auto col_dn = (torch::arange(gi.size(0), gi.options()) < m.num_denoising).unsqueeze(0);
  // row in a group, col in another group (or padding); or row a matching query or padding, col a denoising one.
  return col_dn & (((row >= 0) & (row != col)) | (row < 0));
}

struct DenoisingGroup {
  torch::Tensor query_class;   // [B, T, hidden] embedded (noised) labels
  torch::Tensor query_bbox;    // [B, T, 4] noised boxes, inverse-sigmoid space
  torch::Tensor attn_mask;     // bool [T + num_queries, same], true = blocked
  DenoisingMeta meta;
};

// The group for the batch's padded targets (on the class embedding's device). tokens = 0: exactly
// 2 * G * groups tokens (the original's size; nullopt without targets). tokens > 0: that fixed count (at
// least 2 * G * groups; denoising_capacity), with G and groups computed on the device from the targets'
// mask, so that nothing here reads the host: the form a recorded step takes (a batch without targets then
// gives a part without real tokens, which adds no loss). abs_boxes: a noised box's negative width or height
// (a negative copy whose corners crossed) made positive before the inverse sigmoid, as the D-FINE line's
// originals do (dfine/denoising.py:95, deim/denoising.py:94); without it such a box collapses to a point.
inline std::optional<DenoisingGroup> contrastive_denoising_group(const PaddedTargets& t, int64_t num_classes, int64_t num_queries,
                                                                 torch::nn::Embedding& class_embed, int64_t num_denoising = 100,
                                                                 double label_noise_ratio = 0.5, double box_noise_scale = 1.0,
                                                                 int64_t tokens = 0, bool abs_boxes = false) {
  if (num_denoising <= 0 || t.counts.empty()) return std::nullopt;
  const int64_t G = *std::max_element(t.counts.begin(), t.counts.end());  // the host's view (eager: this batch)
  if (G == 0 && tokens == 0) return std::nullopt;
  const auto B = static_cast<int64_t>(t.counts.size());
  const auto dev = class_embed->weight.device();
  auto fopt = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  DenoisingMeta meta;
  if (tokens > 0) {
    if (G > 0 && tokens < denoising_query_count(G, num_denoising))
      throw std::invalid_argument("contrastive_denoising_group: a capacity of " + std::to_string(tokens) + " tokens is below the " +
                                  std::to_string(denoising_query_count(G, num_denoising)) + " a batch whose largest count is " +
                                  std::to_string(G) + " needs (denoising_capacity)");
    auto Gt = t.valid.to(dev).sum(1).max();
    auto groups_t = torch::div(torch::full({}, num_denoising, Gt.options()), Gt.clamp_min(1), "floor").clamp_min(1);
    meta = denoising_meta(Gt, groups_t, tokens, num_queries);
    meta.max_gt = G, meta.num_group = std::max<int64_t>(1, num_denoising / std::max<int64_t>(G, 1));
  } else {
    meta = denoising_meta(G, std::max<int64_t>(1, num_denoising / G), 2 * G * std::max<int64_t>(1, num_denoising / G), num_queries, dev);
  }
  const int64_t T = meta.num_denoising;
  const auto tok = denoising_tokens(meta, dev);
  // Token k of image i copies target k % G: its label and box where that target exists in a real group
  // (`pad`), else the padding class num_classes and a zero box.
  auto col = tok.column.unsqueeze(0).expand({B, T});
  auto pad = t.valid.to(dev).gather(1, col) & meta.real.unsqueeze(0);
  auto cls = torch::where(pad, t.labels.to(dev).gather(1, col), torch::full({B, T}, num_classes, col.options()));
  auto bbox = torch::where(pad.unsqueeze(-1), t.boxes.to(dev).gather(1, col.unsqueeze(-1).expand({B, T, 4})), torch::zeros({B, T, 4}, fopt));
  auto neg = tok.negative.to(torch::kFloat32).view({1, T, 1});  // 1 for the negative half of each group

  if (label_noise_ratio > 0) {
    auto flip = torch::rand({B, T}, fopt) < label_noise_ratio * 0.5;
    auto fresh = torch::randint(0, num_classes, {B, T}, torch::TensorOptions().dtype(torch::kLong).device(dev));
    cls = torch::where(flip & pad, fresh, cls);
  }
  if (box_noise_scale > 0) {
    auto known = box_cxcywh_to_xyxy(bbox);
    auto diff = bbox.narrow(-1, 2, 2).mul(0.5).repeat({1, 1, 2}) * box_noise_scale;
    auto sign = torch::randint(0, 2, bbox.sizes(), fopt) * 2.0 - 1.0;
    auto part = torch::rand(bbox.sizes(), fopt);
    part = (part + 1.0) * neg + part * (1 - neg);
    part = part * sign;
    known = (known + part * diff).clamp(0.0, 1.0);
    auto cxcywh = box_xyxy_to_cxcywh(known);
    bbox = inverse_sigmoid(abs_boxes ? cxcywh.abs() : cxcywh);
  }
  DenoisingGroup out;
  out.query_class = class_embed->forward(cls);
  out.query_bbox = bbox;
  out.attn_mask = denoising_attn_mask(meta, num_queries, dev);
  out.meta = std::move(meta);
  return out;
}
inline std::optional<DenoisingGroup> contrastive_denoising_group(const std::vector<DetrTarget>& targets, int64_t num_classes,
                                                                 int64_t num_queries, torch::nn::Embedding& class_embed,
                                                                 int64_t num_denoising = 100, double label_noise_ratio = 0.5,
                                                                 double box_noise_scale = 1.0) {
  if (num_denoising <= 0 || targets.empty()) return std::nullopt;
  return contrastive_denoising_group(pad_targets(targets, class_embed->weight.device()), num_classes, num_queries, class_embed,
                                     num_denoising, label_noise_ratio, box_noise_scale);
}

}  // namespace libreyolo::nn::detr
