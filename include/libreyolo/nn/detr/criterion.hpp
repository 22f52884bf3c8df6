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
// layer, aux, encoder) as one [O, B, Q, .] stack, the denoising layers as another; every index set goes to
// the device in one copy, the cost matrices to the host in one.
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
    const set_batch::Targets t(targets);
    auto host = match_host(set_batch::stack_by_queries(outputs), outputs.size(), t);
    std::vector<MatchIndices> all;
    for (auto& m : host) all.push_back(set_batch::to_tensors(m));
    return all;
  }

  // The loss of one output for given indices: {vfl, bbox, giou} (already weighted).
  std::array<torch::Tensor, 3> terms(const torch::Tensor& logits, const torch::Tensor& boxes, const std::vector<DetrTarget>& targets,
                                     const MatchIndices& idx, double num_boxes) const {
    const set_batch::Targets t(targets);
    const auto m = set_batch::to_host(idx);
    set_batch::DeviceIndices di;
    const size_t seg = di.add({&m}, {0}, logits.size(0), logits.size(1), t.offsets);
    di.upload(logits.device());
    return stack_terms(set_batch::stack_f32({logits}), set_batch::stack_f32({boxes}), t, di[seg], num_boxes);
  }

  // The denoising queries' indices: image i's positives against its targets tiled num_group times.
  static MatchIndices denoising_indices(const DenoisingMeta& meta, const std::vector<DetrTarget>& targets) {
    return set_batch::to_tensors(set_batch::denoising_match(meta, targets));
  }

  SetLoss operator()(const DetrOutput& out, const std::vector<DetrTarget>& targets) const {
    int64_t nb = 0;
    for (auto& t : targets) nb += t.labels.size(0);
    const double num_boxes = std::max<double>(1.0, static_cast<double>(nb));
    const auto dev = out.pred_logits.device();
    set_batch::Targets t(targets);
    if (t.labels.defined() && t.labels.device() != dev) t.labels = t.labels.to(dev), t.boxes = t.boxes.to(dev);
    std::vector<std::pair<torch::Tensor, torch::Tensor>> matched{{out.pred_logits, out.pred_boxes}};
    for (auto& a : out.aux) matched.push_back(a);
    if (o_.enc_aux)
      for (auto& a : out.enc_aux) matched.push_back(a);
    const auto stacks = set_batch::stack_by_queries(matched);
    const auto indices = match_host(stacks, matched.size(), t);
    // Every index set in one host-to-device copy.
    set_batch::DeviceIndices di;
    std::vector<size_t> segs;
    for (auto& s : stacks) {
      std::vector<const HostMatch*> ms;
      std::vector<int64_t> slots;
      for (size_t k = 0; k < s.members.size(); ++k) ms.push_back(&indices[s.members[k]]), slots.push_back(static_cast<int64_t>(k));
      segs.push_back(di.add(ms, slots, s.logits.size(1), s.logits.size(2), t.offsets));
    }
    std::vector<set_batch::Stack> dn_stacks;
    std::vector<size_t> dn_segs;
    HostMatch dn_idx;
    const bool has_dn = out.dn_meta && !out.dn_aux.empty();
    if (has_dn) {
      dn_idx = set_batch::denoising_match(*out.dn_meta, targets);
      dn_stacks = set_batch::stack_by_queries(out.dn_aux);
      for (auto& s : dn_stacks) {
        std::vector<const HostMatch*> ms(s.members.size(), &dn_idx);
        std::vector<int64_t> slots;
        for (size_t k = 0; k < s.members.size(); ++k) slots.push_back(static_cast<int64_t>(k));
        dn_segs.push_back(di.add(ms, slots, s.logits.size(1), s.logits.size(2), t.offsets));
      }
    }
    di.upload(dev);

    std::array<torch::Tensor, 3> sum;
    auto add = [&](const std::array<torch::Tensor, 3>& x) {
      for (int k = 0; k < 3; ++k) sum[k] = sum[k].defined() ? sum[k] + x[k] : x[k];
    };
    for (size_t g = 0; g < stacks.size(); ++g) add(stack_terms(stacks[g].logits, stacks[g].boxes, t, di[segs[g]], num_boxes));
    if (has_dn) {
      const double dn_boxes = num_boxes * static_cast<double>(out.dn_meta->num_group);
      for (size_t g = 0; g < dn_stacks.size(); ++g) add(stack_terms(dn_stacks[g].logits, dn_stacks[g].boxes, t, di[dn_segs[g]], dn_boxes));
    }
    SetLoss r;
    r.total = sum[0] + sum[1] + sum[2];
    r.items = torch::stack({sum[0], sum[1], sum[2]}).detach();
    return r;
  }

  const SetCriterionOptions& options() const { return o_; }

 private:
  std::vector<HostMatch> match_host(const std::vector<set_batch::Stack>& stacks, size_t n, const set_batch::Targets& t) const {
    return set_batch::hungarian(stacks, n, t, [&](const torch::Tensor& l, const torch::Tensor& b, const torch::Tensor& ids, const torch::Tensor& bx) {
      return cost_matrix(l, b, ids, bx);
    });
  }

  // The summed terms {vfl, bbox, giou} (weighted) of O stacked outputs [O, B, Q, .] sharing one
  // normalisation, for the matched pairs of `seg` (flat indices over the stack).
  std::array<torch::Tensor, 3> stack_terms(const torch::Tensor& logits, const torch::Tensor& boxes, const set_batch::Targets& t,
                                           const set_batch::DeviceIndices::Segment& seg, double num_boxes) const {
    const int64_t O = logits.size(0), B = logits.size(1), Q = logits.size(2), C = logits.size(3);
    auto src_boxes = boxes.reshape({-1, 4}).index_select(0, seg.flat);
    torch::Tensor target_boxes, target_labels;
    if (seg.n > 0) {
      target_boxes = t.boxes.index_select(0, seg.tidx);
      target_labels = t.labels.index_select(0, seg.tidx);
    }

    // Varifocal: target = IoU at the matched (query, class), 0 elsewhere.
    auto target = torch::zeros({O * B * Q, C}, logits.options());
    auto target_score = torch::zeros({O * B * Q, C}, logits.options());
    if (seg.n > 0) {
      torch::Tensor ious;
      {
        torch::NoGradGuard ng;
        ious = paired_iou(box_cxcywh_to_xyxy(src_boxes), box_cxcywh_to_xyxy(target_boxes)).detach();
      }
      target.index_put_({seg.flat, target_labels}, torch::ones_like(ious));
      target_score.index_put_({seg.flat, target_labels}, ious);
    }
    target = target.view({O, B, Q, C});
    target_score = target_score.view({O, B, Q, C});
    auto pred_score = torch::sigmoid(logits).detach();
    auto weight = o_.vfl_alpha * pred_score.pow(o_.vfl_gamma) * (1 - target) + target_score;
    auto vfl = torch::binary_cross_entropy_with_logits(logits, target_score, weight, {}, at::Reduction::None);
    auto loss_vfl = vfl.mean(2).sum() * (static_cast<double>(Q) / num_boxes) * o_.w_vfl;

    torch::Tensor loss_bbox, loss_giou;
    if (seg.n == 0) {
      loss_bbox = src_boxes.sum() * 0;
      loss_giou = src_boxes.sum() * 0;
    } else {
      loss_bbox = (src_boxes - target_boxes).abs().sum() / num_boxes * o_.w_bbox;
      loss_giou = (1 - paired_giou(box_cxcywh_to_xyxy(src_boxes), box_cxcywh_to_xyxy(target_boxes))).sum() / num_boxes * o_.w_giou;
    }
    return {loss_vfl, loss_bbox, loss_giou};
  }

  SetCriterionOptions o_;
};

}  // namespace libreyolo::nn::detr
