#pragma once
// Contrastive denoising (the original's get_contrastive_denoising_training_group): noised copies of the
// ground truth as extra decoder queries, a positive and a negative copy per group. The group count
// follows the batch's largest ground-truth count G: num_group = max(1, num_denoising / G), so the
// denoising part holds 2 * G * num_group queries and its size changes from batch to batch (why the
// decoder runs eager under CUDA graphs). An attention mask keeps the matching queries from seeing the
// denoising ones and the groups from seeing each other.
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

struct DenoisingMeta {
  int64_t num_group = 0;
  int64_t num_denoising = 0;           // 2 * max_gt * num_group queries before the matching ones
  int64_t num_queries = 0;
  int64_t max_gt = 0;
  std::vector<torch::Tensor> positive_idx;  // per image: its positive denoising queries (CPU int64, group-major)
};

struct DenoisingGroup {
  torch::Tensor query_class;   // [B, num_dn, hidden] embedded (noised) labels
  torch::Tensor query_bbox;    // [B, num_dn, 4] noised boxes, inverse-sigmoid space
  torch::Tensor attn_mask;     // bool [num_dn + num_queries, same], true = blocked
  DenoisingMeta meta;
};

// The group's size only: 2 * G * max(1, num_denoising / G) queries for a batch whose largest count is G
// (0 when G == 0 or num_denoising <= 0).
inline int64_t denoising_query_count(int64_t max_gt, int64_t num_denoising) {
  if (num_denoising <= 0 || max_gt <= 0) return 0;
  return 2 * max_gt * std::max<int64_t>(1, num_denoising / max_gt);
}

// The attention mask of a denoising part of num_dn = 2 * G * groups queries followed by num_queries
// matching ones (true = blocked): matching queries do not see denoising ones; each group sees itself
// only among the denoising queries.
inline torch::Tensor denoising_attn_mask(int64_t G, int64_t groups, int64_t num_queries, torch::Device dev) {
  const int64_t dn = 2 * G * groups, total = dn + num_queries;
  auto i = torch::arange(total, torch::TensorOptions().dtype(torch::kLong).device(dev));
  auto gi = torch::where(i < dn, torch::div(i, 2 * G, "floor"), torch::full_like(i, -1));
  auto row = gi.unsqueeze(1), col = gi.unsqueeze(0);
  auto col_dn = (i < dn).unsqueeze(0);
  // row in a group, col in another group; or row a matching query, col a denoising one.
  return col_dn & (((row >= 0) & (row != col)) | (row < 0));
}

inline std::optional<DenoisingGroup> contrastive_denoising_group(const std::vector<DetrTarget>& targets, int64_t num_classes,
                                                                 int64_t num_queries, torch::nn::Embedding& class_embed,
                                                                 int64_t num_denoising = 100, double label_noise_ratio = 0.5,
                                                                 double box_noise_scale = 1.0) {
  if (num_denoising <= 0 || targets.empty()) return std::nullopt;
  std::vector<int64_t> num_gts;
  for (const auto& t : targets) num_gts.push_back(t.labels.size(0));
  const int64_t G = *std::max_element(num_gts.begin(), num_gts.end());
  if (G == 0) return std::nullopt;
  const int64_t groups = std::max<int64_t>(1, num_denoising / G);
  const auto B = static_cast<int64_t>(targets.size());
  const auto dev = class_embed->weight.device();
  auto fopt = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  auto [cls, bbox, pad] = scatter_targets(targets, G, num_classes, {0.f, 0.f, 0.f, 0.f}, dev);
  cls = cls.repeat({1, 2 * groups});
  bbox = bbox.repeat({1, 2 * groups, 1});
  pad = pad.repeat({1, 2 * groups});
  // 1 for the negative half of each group ([G, 2G)), 0 for the positive half.
  auto neg = torch::zeros({B, 2 * G, 1}, fopt);
  neg.narrow(1, G, G).fill_(1);
  neg = neg.repeat({1, groups, 1});
  const int64_t dn = 2 * G * groups;

  DenoisingMeta meta;
  meta.num_group = groups;
  meta.num_denoising = dn;
  meta.num_queries = num_queries;
  meta.max_gt = G;
  for (int64_t i = 0; i < B; ++i) {  // positives: g * 2G + [0, n) for every group g (made on the host)
    const int64_t n = num_gts[static_cast<size_t>(i)];
    auto p = torch::empty({groups * n}, torch::kLong);
    int64_t* w = p.data_ptr<int64_t>();
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t j = 0; j < n; ++j) *w++ = g * 2 * G + j;
    meta.positive_idx.push_back(p);
  }

  if (label_noise_ratio > 0) {
    auto flip = torch::rand({B, dn}, fopt) < label_noise_ratio * 0.5;
    auto fresh = torch::randint(0, num_classes, {B, dn}, torch::TensorOptions().dtype(torch::kLong).device(dev));
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
    bbox = inverse_sigmoid(box_xyxy_to_cxcywh(known));
  }
  DenoisingGroup out;
  out.query_class = class_embed->forward(cls);
  out.query_bbox = bbox;
  out.attn_mask = denoising_attn_mask(G, groups, num_queries, dev);
  out.meta = std::move(meta);
  return out;
}

}  // namespace libreyolo::nn::detr
