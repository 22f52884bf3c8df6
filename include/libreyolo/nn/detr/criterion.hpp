#pragma once
// The DETR set loss (the original's RTDETRLoss = SetCriterion + HungarianMatcher, models/rtdetr/loss.py):
//   matching  per image, min over one-to-one assignments of 2 * focal class cost + 5 * L1 + 2 * (-GIoU)
//             (assign/hungarian.hpp; every output's cost matrices go to the host in one copy),
//   losses    varifocal classification (alpha 0.75, gamma 2, IoU-valued targets), L1 (x5) and GIoU (x2)
//             on the matched boxes, each normalised by the batch's box count (at least 1),
//   for       the last decoder layer, every earlier layer and the encoder proposals (aux, each matched
//             on its own), and every layer's denoising queries (matched by construction, normalised by
//             box count x groups).
// Reported components (the original's get_loss_components): vfl, bbox, giou, each summed over all terms.
#include <libreyolo/assign/hungarian.hpp>
#include <libreyolo/nn/detr/decoder.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// Per image: (prediction indices, target indices), CPU int64.
using MatchIndices = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

struct SetCriterionOptions {
  int64_t num_classes = 80;
  double cost_class = 2, cost_bbox = 5, cost_giou = 2;   // matcher
  double match_alpha = 0.25, match_gamma = 2.0;          // focal class cost
  double vfl_alpha = 0.75, vfl_gamma = 2.0;
  double w_vfl = 1, w_bbox = 5, w_giou = 2;
  bool enc_aux = true;  // v1 adds the encoder proposals' loss; the v2 original's criterion never sees them
};

struct SetLoss {
  torch::Tensor total;  // scalar
  torch::Tensor items;  // [3]: vfl, bbox, giou (detached)
};

class SetCriterion {
 public:
  explicit SetCriterion(SetCriterionOptions o = {}) : o_(o) {}

  // The matching cost matrix [B, Q, T] of one output against the batch's concatenated targets.
  torch::Tensor cost_matrix(const torch::Tensor& logits, const torch::Tensor& boxes, const torch::Tensor& tgt_ids,
                            const torch::Tensor& tgt_boxes) const {
    torch::NoGradGuard ng;
    const int64_t B = logits.size(0), Q = logits.size(1);
    auto prob = torch::sigmoid(logits.flatten(0, 1)).index_select(1, tgt_ids);  // [B*Q, T]
    auto neg = (1 - o_.match_alpha) * prob.pow(o_.match_gamma) * (-(1 - prob + 1e-8).log());
    auto pos = o_.match_alpha * (1 - prob).pow(o_.match_gamma) * (-(prob + 1e-8).log());
    auto out_bbox = boxes.flatten(0, 1);
    auto cost_bbox = (out_bbox.unsqueeze(1) - tgt_boxes.unsqueeze(0)).abs().sum(-1);  // cdist p=1
    auto cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(out_bbox), box_cxcywh_to_xyxy(tgt_boxes));
    auto c = o_.cost_bbox * cost_bbox + o_.cost_class * (pos - neg) + o_.cost_giou * cost_giou;
    return c.view({B, Q, -1});
  }

  // Hungarian matching of several outputs at once (one device-to-host copy for all of them).
  std::vector<MatchIndices> match(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outputs,
                                  const std::vector<DetrTarget>& targets) const {
    std::vector<int64_t> sizes;
    int64_t T = 0;
    for (auto& t : targets) sizes.push_back(t.labels.size(0)), T += t.labels.size(0);
    const auto B = static_cast<int64_t>(targets.size());
    std::vector<MatchIndices> all(outputs.size());
    if (T == 0) {
      for (auto& m : all)
        for (int64_t i = 0; i < B; ++i) m.emplace_back(torch::zeros({0}, torch::kLong), torch::zeros({0}, torch::kLong));
      return all;
    }
    std::vector<torch::Tensor> ids, bx;
    for (auto& t : targets) ids.push_back(t.labels), bx.push_back(t.boxes);
    auto tgt_ids = torch::cat(ids), tgt_boxes = torch::cat(bx);
    std::vector<torch::Tensor> costs;
    for (auto& [l, b] : outputs) costs.push_back(cost_matrix(l.to(torch::kFloat32), b.to(torch::kFloat32), tgt_ids, tgt_boxes));
    std::vector<int64_t> qs;
    for (auto& c : costs) qs.push_back(c.size(1));
    // One copy: every cost matrix flattened into one double buffer.
    std::vector<torch::Tensor> flat;
    for (auto& c : costs) flat.push_back(c.flatten());
    auto host = torch::cat(flat).to(torch::kCPU, torch::kFloat64).contiguous();
    const double* base = host.data_ptr<double>();
    std::vector<double> block;
    for (size_t o = 0; o < costs.size(); ++o) {
      const int64_t Q = qs[o];
      int64_t col0 = 0;
      for (int64_t i = 0; i < B; ++i) {
        const int64_t n = sizes[static_cast<size_t>(i)];
        block.resize(static_cast<size_t>(Q * n));
        const double* img = base + i * Q * T;
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t j = 0; j < n; ++j) block[static_cast<size_t>(q * n + j)] = img[q * T + col0 + j];
        auto a = assign::linear_sum_assignment(block, Q, n);
        all[o].emplace_back(torch::tensor(a.rows, torch::kLong), torch::tensor(a.cols, torch::kLong));
        col0 += n;
      }
      base += B * Q * T;
    }
    return all;
  }

  // The loss of one output for given indices: {vfl, bbox, giou} (already weighted).
  std::array<torch::Tensor, 3> terms(const torch::Tensor& logits_in, const torch::Tensor& boxes_in, const std::vector<DetrTarget>& targets,
                                     const MatchIndices& idx, double num_boxes) const {
    auto logits = logits_in.to(torch::kFloat32);
    auto boxes = boxes_in.to(torch::kFloat32);
    const auto dev = logits.device();
    std::vector<torch::Tensor> bi, si, tb, tl;
    for (size_t i = 0; i < idx.size(); ++i) {
      auto& [src, tgt] = idx[i];
      bi.push_back(torch::full({src.size(0)}, static_cast<int64_t>(i), torch::kLong));
      si.push_back(src);
      auto t = tgt.to(targets[i].labels.device());
      tb.push_back(targets[i].boxes.index_select(0, t));
      tl.push_back(targets[i].labels.index_select(0, t));
    }
    auto batch_idx = torch::cat(bi).to(dev), src_idx = torch::cat(si).to(dev);
    auto target_boxes = torch::cat(tb).to(dev), target_labels = torch::cat(tl).to(dev);
    const int64_t B = logits.size(0), Q = logits.size(1), C = logits.size(2);
    auto flat_idx = batch_idx * Q + src_idx;
    auto src_boxes = boxes.flatten(0, 1).index_select(0, flat_idx);

    // Varifocal: target = IoU at the matched (query, class), 0 elsewhere.
    torch::Tensor ious;
    {
      torch::NoGradGuard ng;
      ious = paired_iou(box_cxcywh_to_xyxy(src_boxes), box_cxcywh_to_xyxy(target_boxes)).detach();
    }
    auto target = torch::zeros({B * Q, C}, logits.options());
    auto target_score = torch::zeros({B * Q, C}, logits.options());
    if (flat_idx.numel() > 0) {
      target.index_put_({flat_idx, target_labels}, torch::ones_like(ious));
      target_score.index_put_({flat_idx, target_labels}, ious);
    }
    target = target.view({B, Q, C});
    target_score = target_score.view({B, Q, C});
    auto pred_score = torch::sigmoid(logits).detach();
    auto weight = o_.vfl_alpha * pred_score.pow(o_.vfl_gamma) * (1 - target) + target_score;
    auto vfl = torch::binary_cross_entropy_with_logits(logits, target_score, weight, {}, at::Reduction::None);
    auto loss_vfl = vfl.mean(1).sum() * (static_cast<double>(Q) / num_boxes) * o_.w_vfl;

    torch::Tensor loss_bbox, loss_giou;
    if (target_boxes.size(0) == 0) {
      loss_bbox = src_boxes.sum() * 0;
      loss_giou = src_boxes.sum() * 0;
    } else {
      loss_bbox = (src_boxes - target_boxes).abs().sum() / num_boxes * o_.w_bbox;
      loss_giou = (1 - paired_giou(box_cxcywh_to_xyxy(src_boxes), box_cxcywh_to_xyxy(target_boxes))).sum() / num_boxes * o_.w_giou;
    }
    return {loss_vfl, loss_bbox, loss_giou};
  }

  // The denoising queries' indices: image i's positives against its targets tiled num_group times.
  static MatchIndices denoising_indices(const DenoisingMeta& meta, const std::vector<DetrTarget>& targets) {
    MatchIndices out;
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t n = targets[i].labels.size(0);
      if (n == 0) {
        out.emplace_back(torch::zeros({0}, torch::kLong), torch::zeros({0}, torch::kLong));
        continue;
      }
      out.emplace_back(meta.positive_idx[i], torch::arange(n, torch::kLong).repeat({meta.num_group}));
    }
    return out;
  }

  SetLoss operator()(const DetrOutput& out, const std::vector<DetrTarget>& targets) const {
    int64_t nb = 0;
    for (auto& t : targets) nb += t.labels.size(0);
    const double num_boxes = std::max<double>(1.0, static_cast<double>(nb));
    std::vector<std::pair<torch::Tensor, torch::Tensor>> matched{{out.pred_logits, out.pred_boxes}};
    for (auto& a : out.aux) matched.push_back(a);
    if (o_.enc_aux)
      for (auto& a : out.enc_aux) matched.push_back(a);
    const auto indices = match(matched, targets);
    std::array<torch::Tensor, 3> sum;
    auto add = [&](const std::array<torch::Tensor, 3>& t) {
      for (int k = 0; k < 3; ++k) sum[k] = sum[k].defined() ? sum[k] + t[k] : t[k];
    };
    for (size_t o = 0; o < matched.size(); ++o) add(terms(matched[o].first, matched[o].second, targets, indices[o], num_boxes));
    if (out.dn_meta && !out.dn_aux.empty()) {
      const auto dn_idx = denoising_indices(*out.dn_meta, targets);
      const double dn_boxes = num_boxes * static_cast<double>(out.dn_meta->num_group);
      for (auto& [l, b] : out.dn_aux) add(terms(l, b, targets, dn_idx, dn_boxes));
    }
    SetLoss r;
    r.total = sum[0] + sum[1] + sum[2];
    r.items = torch::stack({sum[0], sum[1], sum[2]}).detach();
    return r;
  }

  const SetCriterionOptions& options() const { return o_; }

 private:
  SetCriterionOptions o_;
};

}  // namespace libreyolo::nn::detr
