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
// The outputs of one query count are evaluated together (nn/detr/set_batch.hpp): the matched ones (last
// layer, aux, encoder) as one [O, B, Q, .] stack, the denoising layers as another. Everything is in fixed
// shapes (set_batch's PaddedTargets): the targets as [B, M] slots with a mask, the cost matrices [O * B,
// Q, M] (to the host in one copy), the matches as each slot's query [O, B, M] (to the device in one copy),
// every term masked; the denoising matches are made on the device. So the loss after the matching follows
// only B, Q and M: the form a step graph of the DETR line holds (issue 44).
#include <libreyolo/nn/detr/decoder.hpp>
#include <libreyolo/nn/detr/layers.hpp>
#include <libreyolo/nn/detr/set_batch.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

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

  // The matching cost [N, Q, M] of N outputs (logits [N, Q, C], cxcywh boxes [N, Q, 4]) against their
  // images' target slots (labels [N, M], boxes [N, M, 4]).
  torch::Tensor cost_matrix(const torch::Tensor& logits, const torch::Tensor& boxes, const torch::Tensor& labels,
                            const torch::Tensor& tgt_boxes) const {
    torch::NoGradGuard ng;
    const int64_t N = logits.size(0), Q = logits.size(1), M = labels.size(1);
    auto prob = torch::sigmoid(logits).gather(2, labels.unsqueeze(1).expand({N, Q, M}));  // [N, Q, M]
    auto neg = (1 - o_.match_alpha) * prob.pow(o_.match_gamma) * (-(1 - prob + 1e-8).log());
    auto pos = o_.match_alpha * (1 - prob).pow(o_.match_gamma) * (-(prob + 1e-8).log());
    auto cost_bbox = (boxes.unsqueeze(2) - tgt_boxes.unsqueeze(1)).abs().sum(-1);  // cdist p=1
    auto cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(boxes), box_cxcywh_to_xyxy(tgt_boxes));
    return o_.cost_bbox * cost_bbox + o_.cost_class * (pos - neg) + o_.cost_giou * cost_giou;
  }

  // cost_matrix as the matching's cost function (set_batch).
  auto cost_fn() const {
    return [this](const torch::Tensor& l, const torch::Tensor& b, const torch::Tensor& ids, const torch::Tensor& bx) {
      return cost_matrix(l, b, ids, bx);
    };
  }

  // The matches of several outputs as every target slot's query: per output [B, M] int64, -1 for a padding
  // slot (one device-to-host copy of the costs for all outputs).
  std::vector<torch::Tensor> match_slots(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outputs,
                                         const PaddedTargets& t) const {
    const auto stacks = set_batch::stack_by_queries(outputs);
    const auto per_stack = match_padded(stacks, t);
    std::vector<torch::Tensor> out(outputs.size());
    for (size_t g = 0; g < stacks.size(); ++g)
      for (size_t k = 0; k < stacks[g].members.size(); ++k) out[stacks[g].members[k]] = per_stack[g][static_cast<int64_t>(k)];
    return out;
  }

  // The same as (query, target) index pairs per output and image, queries ascending (CPU int64).
  std::vector<MatchIndices> match(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outputs,
                                  const std::vector<DetrTarget>& targets) const {
    return set_batch::match_indices(outputs, targets, cost_fn());
  }

  SetLoss operator()(const DetrOutput& out, const std::vector<DetrTarget>& targets) const {
    return (*this)(out, pad_targets(targets, out.pred_logits.device()));
  }

  // The outputs the matching sees, in the loss's order: last layer, aux, encoder proposals (v1).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> matched_outputs(const DetrOutput& out) const {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> matched{{out.pred_logits, out.pred_boxes}};
    for (auto& a : out.aux) matched.push_back(a);
    if (o_.enc_aux)
      for (auto& a : out.enc_aux) matched.push_back(a);
    return matched;
  }

  // ---- The segmented form (issue 44: a recorded step's matching between two graphs) ----------------
  // match_costs (device, recordable): the matched outputs' cost matrices and the images' counts in one
  // buffer (set_batch::costs_with_counts); cost_layout: where they sit (shapes only); solve (host): the
  // matches of that buffer brought to the host, as the slots the loss reads (pinned when `pinned`);
  // operator()(out, t, given): the loss with those slots on the device instead of its own matching.
  // match_costs -> copy -> solve -> copy -> operator()(out, t, given) equals operator()(out, t).
  torch::Tensor match_costs(const DetrOutput& out, const PaddedTargets& t) const {
    return set_batch::costs_with_counts(set_batch::stack_costs(set_batch::stack_by_queries(matched_outputs(out)), t, cost_fn()), t);
  }
  set_batch::CostLayout cost_layout(const DetrOutput& out, int64_t B, int64_t M) const {
    return set_batch::layout_of(matched_outputs(out), B, M);
  }
  static torch::Tensor solve(const torch::Tensor& host, const set_batch::CostLayout& l, bool pinned) {
    return set_batch::solve_slots(host.data_ptr<float>(), l, set_batch::counts_of(host, l.B), pinned);
  }

  SetLoss operator()(const DetrOutput& out, const PaddedTargets& t, const torch::Tensor& given = {}) const {
    const auto stacks = set_batch::stack_by_queries(matched_outputs(out));
    const auto qidx = given.defined() ? set_batch::stack_slots(given, stacks, static_cast<int64_t>(t.counts.size()), t.M, t.labels.device())
                                      : match_padded(stacks, t);
    // The batch's box count (at least 1) as a device scalar: nothing after the matching reads the host.
    const auto num_boxes = t.valid.sum().clamp_min(1).to(torch::kFloat32);
    const auto cols = set_batch::match_columns(t);

    std::array<torch::Tensor, 3> sum;
    auto add = [&](const std::array<torch::Tensor, 3>& x) {
      for (int k = 0; k < 3; ++k) sum[k] = sum[k].defined() ? sum[k] + x[k] : x[k];
    };
    for (size_t g = 0; g < stacks.size(); ++g) add(stack_terms(stacks[g].logits, stacks[g].boxes, t, {qidx[g], cols}, num_boxes));
    if (out.dn_meta && !out.dn_aux.empty()) {
      const auto dn = set_batch::denoising_slots(*out.dn_meta, t);
      const auto dn_boxes = num_boxes * out.dn_meta->group_count.to(num_boxes.device(), torch::kFloat32);
      const auto real = out.dn_meta->real.to(num_boxes.device(), torch::kFloat32);  // capacity padding: no loss
      for (auto& s : set_batch::stack_by_queries(out.dn_aux)) add(stack_terms(s.logits, s.boxes, t, dn, dn_boxes, real));
    }
    SetLoss r;
    r.total = sum[0] + sum[1] + sum[2];
    r.items = torch::stack({sum[0], sum[1], sum[2]}).detach();
    return r;
  }

  const SetCriterionOptions& options() const { return o_; }

 private:
  torch::Tensor match_host(const std::vector<set_batch::Stack>& stacks, const PaddedTargets& t) const {
    return set_batch::hungarian_slots_host(stacks, t, cost_fn());
  }
  std::vector<torch::Tensor> match_padded(const std::vector<set_batch::Stack>& stacks, const PaddedTargets& t) const {
    return set_batch::stack_slots(match_host(stacks, t), stacks, static_cast<int64_t>(t.counts.size()), t.M, t.labels.device());
  }

  // The summed terms {vfl, bbox, giou} (weighted) of O stacked outputs [O, B, Q, .] sharing one normaliser
  // (a device scalar), for fixed-shape pairs (set_batch::Slots). Unmatched slots write their varifocal
  // targets into a dummy row past the last query (dropped after) and carry mask 0 in the box terms. `queries`
  // ([Q] float, optional) weighs each query's varifocal term (0: a denoising token of capacity padding).
  std::array<torch::Tensor, 3> stack_terms(const torch::Tensor& logits, const torch::Tensor& boxes, const PaddedTargets& t,
                                           const set_batch::Slots& slots, const torch::Tensor& num_boxes,
                                           const torch::Tensor& queries = {}) const {
    const int64_t O = logits.size(0), B = logits.size(1), Q = logits.size(2), C = logits.size(3);
    const auto p = set_batch::slot_pairs(slots, t, O, Q);
    const auto &row = p.row, &target_labels = p.labels, &target_boxes = p.boxes;
    auto src_boxes = boxes.reshape({-1, 4}).index_select(0, p.flat);
    auto src_xyxy = box_cxcywh_to_xyxy(src_boxes), tgt_xyxy = box_cxcywh_to_xyxy(target_boxes);
    const auto maskf = p.mask.to(logits.scalar_type());

    // Varifocal: target = IoU at the matched (query, class), 0 elsewhere.
    torch::Tensor ious;
    {
      torch::NoGradGuard ng;
      ious = paired_iou(src_xyxy, tgt_xyxy).detach();
    }
    auto target = torch::zeros({O * B * Q + 1, C}, logits.options());
    auto target_score = torch::zeros({O * B * Q + 1, C}, logits.options());
    target.index_put_({row, target_labels}, torch::ones_like(ious));
    target_score.index_put_({row, target_labels}, ious);
    target = target.narrow(0, 0, O * B * Q).view({O, B, Q, C});
    target_score = target_score.narrow(0, 0, O * B * Q).view({O, B, Q, C});
    auto pred_score = torch::sigmoid(logits).detach();
    auto weight = o_.vfl_alpha * pred_score.pow(o_.vfl_gamma) * (1 - target) + target_score;
    auto vfl = torch::binary_cross_entropy_with_logits(logits, target_score, weight, {}, at::Reduction::None);
    if (queries.defined()) vfl = vfl * queries.view({1, 1, Q, 1});
    auto loss_vfl = vfl.mean(2).sum() * static_cast<double>(Q) / num_boxes * o_.w_vfl;

    auto loss_bbox = ((src_boxes - target_boxes).abs().sum(1) * maskf).sum() / num_boxes * o_.w_bbox;
    auto loss_giou = ((1 - paired_giou(src_xyxy, tgt_xyxy)) * maskf).sum() / num_boxes * o_.w_giou;
    return {loss_vfl, loss_bbox, loss_giou};
  }

  SetCriterionOptions o_;
};

}  // namespace libreyolo::nn::detr
