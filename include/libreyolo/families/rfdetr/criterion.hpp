#pragma once
// RF-DETR's training criterion: the original's HungarianMatcher (models/rfdetr/matcher.py) and
// SetCriterion (models/rfdetr/loss.py) for detection, with the arguments its network assembly gives them
// (nn.py _make_args + lwdetr.py build_criterion_and_postprocessors):
//
//   matcher   per image and per Group-DETR group (training: 13 groups, the queries split into 13 blocks of
//             num_queries, each matched on its own to all of the image's targets; eval: one group), the
//             minimum-cost one-to-one assignment (assign/hungarian.hpp, float64 as scipy) of
//               cost = 5 * L1(cxcywh) + 2 * class cost + 2 * (-GIoU),
//               class cost = a (1 - p)^2 (-logsigmoid(x)) - (1 - a) p^2 (-logsigmoid(-x)), a = 0.25
//             (the original hard-codes alpha 0.25 and gamma 2 here, whatever focal_alpha says), computed in
//             float32; non-finite costs replaced by (max finite + max |finite| + 1), as the original.
//   losses    loss_ce      the default IA-BCE ("ia_bce_loss": True): with p = sigmoid(x), for every query and
//                          class a negative weight p^2 (not detached), and at the matched (query, target
//                          class) t = clamp(p^alpha * IoU^(1 - alpha), min 0.01) (detached; IoU of the
//                          detached predicted box and its target, no epsilon), positive weight t and negative
//                          weight 1 - t; loss = sum(w_neg * x - logsigmoid(x) * (w_pos + w_neg)) / num_boxes
//                          (alpha = focal_alpha 0.25). The sigmoid focal (alpha 0.25, gamma 2, one-hot) and
//                          the varifocal flavours of the original are here too (RFDETRClassLoss).
//             loss_bbox    sum |box - target| / num_boxes over matched pairs,
//             loss_giou    sum (1 - GIoU) / num_boxes,
//             class_error  100 - top-1 accuracy of the matched queries (100 with none; logging only),
//             cardinality_error  mean |#(argmax != last logit) - #targets| (logging only),
//   for       the last decoder layer (no suffix), the other layers (_0 .. _{L-2}) and the two-stage encoder
//             proposals (_enc), each matched on its own;
//   num_boxes = max(1, #targets in the batch x group_detr) (sum_group_losses off; one process: the
//             original's all-reduce and division by the world size are identities here);
//   total     sum of loss * weight over the keys of the weight dict (loss_ce 1, loss_bbox 5, loss_giou 2,
//             the same for every _i and _enc), in the original's key order, as its trainer sums them.
// Box ops are the original's (box_ops.py): cxcywh -> xyxy clamps w, h at 0; IoU and GIoU without
// epsilons (not nn/detr/layers.hpp's, which add 1e-6 as RT-DETR's).
// Not here: masks, keypoints, OBB angles, the position-supervised flavour.
#include <libreyolo/assign/hungarian.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/rfdetr/network.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/dfine_criterion.hpp>
#include <libreyolo/nn/detr/set_batch.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::families::rfdetr {

using nn::detr::DetrTarget;
using nn::detr::MatchIndices;
using nn::detr::PaddedTargets;
namespace set_batch = nn::detr::set_batch;

// ---- box ops (the original's box_ops.py) ----------------------------------------------------------------
// DETR's box_ops, as D-FINE's copy (nn/detr/dfine_criterion.hpp dfine_detail): w, h clamped at 0 before the
// corners, IoU and GIoU without an epsilon, the same operations element by element.
using nn::detr::dfine_detail::cxcywh_to_xyxy;
using nn::detr::dfine_detail::paired_giou;
using nn::detr::dfine_detail::paired_iou_union;
using nn::detr::dfine_detail::pairwise_giou;

// ---- matcher ----------------------------------------------------------------------------------------------
struct RFDETRMatcherOptions {
  double cost_class = 2, cost_bbox = 5, cost_giou = 2;  // set_cost_class / _bbox / _giou of _make_args
};

class RFDETRMatcher {
 public:
  explicit RFDETRMatcher(RFDETRMatcherOptions o = {}) : o_(o) {
    if (o_.cost_class == 0 && o_.cost_bbox == 0 && o_.cost_giou == 0) throw ConfigError("RF-DETR matcher: all costs can't be 0");
  }

  // The cost matrix [B, Q, T] (float32, CPU) of one output against the batch's concatenated targets.
  torch::Tensor cost_matrix(const torch::Tensor& logits, const torch::Tensor& boxes, const torch::Tensor& tgt_ids,
                            const torch::Tensor& tgt_boxes) const {
    torch::NoGradGuard ng;
    const int64_t B = logits.size(0), Q = logits.size(1);
    auto x = logits.flatten(0, 1);
    auto prob = x.sigmoid();
    auto out_bbox = boxes.flatten(0, 1);
    auto giou = pairwise_giou(cxcywh_to_xyxy(out_bbox), cxcywh_to_xyxy(tgt_boxes));
    auto cost_giou = -giou;
    const double alpha = 0.25, gamma = 2.0;
    auto neg = (1 - alpha) * prob.pow(gamma) * (-torch::log_sigmoid(-x));
    auto pos = alpha * (1 - prob).pow(gamma) * (-torch::log_sigmoid(x));
    auto cost_class = pos.index_select(1, tgt_ids) - neg.index_select(1, tgt_ids);
    auto cost_bbox = torch::cdist(out_bbox, tgt_boxes, 1);
    auto c = o_.cost_bbox * cost_bbox + o_.cost_class * cost_class + o_.cost_giou * cost_giou;
    return sanitize(c.view({B, Q, -1}).to(torch::kFloat).cpu());
  }

  // Per image (query indices ascending, target indices), the groups' matches concatenated with group g's
  // query indices offset by g * Q / group_detr (the original's order).
  MatchIndices operator()(const torch::Tensor& logits, const torch::Tensor& boxes, const std::vector<DetrTarget>& targets,
                          int64_t group_detr = 1) const {
    const int64_t B = logits.size(0), Q = logits.size(1);
    if (static_cast<int64_t>(targets.size()) != B)
      throw Error("RF-DETR matcher: " + std::to_string(targets.size()) + " targets for a batch of " + std::to_string(B));
    if (group_detr < 1 || Q % group_detr != 0)
      throw Error("RF-DETR matcher: " + std::to_string(Q) + " queries do not split into " + std::to_string(group_detr) + " groups");
    std::vector<int64_t> sizes;
    std::vector<torch::Tensor> ids, bx;
    int64_t T = 0;
    for (auto& t : targets) {
      sizes.push_back(t.labels.size(0));
      T += sizes.back();
      ids.push_back(t.labels.to(logits.device(), torch::kLong));
      bx.push_back(t.boxes.to(boxes.device(), boxes.scalar_type()));
    }
    nn::detr::HostMatch host(static_cast<size_t>(B));
    if (T > 0) {
      const auto c = cost_matrix(logits, boxes, torch::cat(ids), torch::cat(bx)).to(torch::kDouble).contiguous();
      const double* base = c.data_ptr<double>();
      const int64_t gq = Q / group_detr;
      std::vector<double> block;
      for (int64_t b = 0, col0 = 0; b < B; col0 += sizes[static_cast<size_t>(b)], ++b) {
        const int64_t n = sizes[static_cast<size_t>(b)];
        auto& [qi, ti] = host[static_cast<size_t>(b)];
        if (n == 0) continue;
        for (int64_t g = 0; g < group_detr; ++g) {
          block.resize(static_cast<size_t>(gq * n));
          for (int64_t q = 0; q < gq; ++q)
            for (int64_t j = 0; j < n; ++j)
              block[static_cast<size_t>(q * n + j)] = base[(b * Q + g * gq + q) * T + col0 + j];
          const auto a = assign::linear_sum_assignment(block, gq, n);
          for (size_t k = 0; k < a.rows.size(); ++k) {
            qi.push_back(a.rows[k] + g * gq);
            ti.push_back(a.cols[k]);
          }
        }
      }
    }
    return nn::detr::set_batch::to_tensors(host);
  }

  const RFDETRMatcherOptions& options() const { return o_; }

 private:
  static torch::Tensor sanitize(torch::Tensor c) {
    auto finite = torch::isfinite(c);
    if (finite.all().item<bool>()) return c;
    const double fmax = std::numeric_limits<float>::max();
    double repl = fmax;
    if (finite.any().item<bool>()) {
      auto f = c.masked_select(finite);
      auto r = f.max() + f.abs().max() + 1.0;
      repl = std::isfinite(r.item<float>()) ? std::min<double>(r.item<float>(), fmax) : fmax;
    }
    c = c.clone();
    c.masked_fill_(finite.logical_not(), repl);
    return c;
  }
  RFDETRMatcherOptions o_;
};

// ---- criterion ----------------------------------------------------------------------------------------------
enum class RFDETRClassLoss {
  IaBce,      // the default ("ia_bce_loss": True)
  Varifocal,  // use_varifocal_loss (with ia_bce_loss off)
  Focal,      // neither: sigmoid focal on the one-hot targets
};

struct RFDETRCriterionOptions {
  int64_t num_classes = 81;  // the criterion's num_classes: the data's classes + 1 = the logits' width
  RFDETRMatcherOptions matcher{};
  double focal_alpha = 0.25;
  double cls_loss_coef = 1, bbox_loss_coef = 5, giou_loss_coef = 2;
  int64_t group_detr = 13;
  bool sum_group_losses = false;
  RFDETRClassLoss class_loss = RFDETRClassLoss::IaBce;
  int64_t dec_layers = 3;  // for the weight dict: loss_*_0 .. loss_*_{dec_layers - 2}
  bool aux_loss = true, two_stage = true;
};

struct RFDETRLosses {
  std::vector<std::pair<std::string, torch::Tensor>> terms;  // the original's dict, in its order (unweighted)
  torch::Tensor total;                                       // sum over weighted keys of term * weight
  std::vector<MatchIndices> indices;                         // main, aux 0 .., enc (as matched)

  const torch::Tensor& at(const std::string& k) const {
    for (auto& [n, v] : terms)
      if (n == k) return v;
    throw Error("RF-DETR criterion: no loss term '" + k + "'");
  }
};

class RFDETRCriterion {
 public:
  explicit RFDETRCriterion(RFDETRCriterionOptions o = {}) : o_(o), matcher_(o.matcher) {
    const std::vector<std::pair<std::string, double>> base{
        {"loss_ce", o_.cls_loss_coef}, {"loss_bbox", o_.bbox_loss_coef}, {"loss_giou", o_.giou_loss_coef}};
    weights_ = base;
    if (o_.aux_loss) {
      for (int64_t i = 0; i + 1 < o_.dec_layers; ++i)
        for (auto& [k, v] : base) weights_.emplace_back(k + "_" + std::to_string(i), v);
      if (o_.two_stage)
        for (auto& [k, v] : base) weights_.emplace_back(k + "_enc", v);
    }
  }

  // The options for a network (num_classes + 1 logits, its decoder depth and group count).
  static RFDETRCriterionOptions for_network(const RFDETROptions& net) {
    RFDETRCriterionOptions o;
    o.num_classes = net.num_classes + 1;
    o.dec_layers = rfdetr_size(net.size)->dec_layers;
    o.group_detr = net.group_detr;
    return o;
  }

  const std::vector<std::pair<std::string, double>>& weight_dict() const { return weights_; }
  const RFDETRMatcher& matcher() const { return matcher_; }
  const RFDETRCriterionOptions& options() const { return o_; }

  // training: the original's criterion.training (13 groups matched separately; eval matches one group).
  RFDETRLosses operator()(const RFDETROutput& out, const std::vector<DetrTarget>& targets, bool training) const {
    const int64_t G = training ? o_.group_detr : 1;
    int64_t nb = 0;
    for (auto& t : targets) nb += t.labels.size(0);
    if (!o_.sum_group_losses) nb *= G;
    const double num_boxes = std::max(1.0, static_cast<double>(static_cast<float>(nb)));

    std::vector<DetrTarget> tg;  // on the outputs' device
    for (auto& t : targets)
      tg.push_back({t.labels.to(out.pred_logits.device(), torch::kLong), t.boxes.to(out.pred_boxes.device(), out.pred_boxes.scalar_type())});

    RFDETRLosses r;
    auto run = [&](const torch::Tensor& logits, const torch::Tensor& boxes, const std::string& suffix, bool log) {
      auto idx = matcher_(logits, boxes, tg, G);
      // the original's losses order: labels, boxes, cardinality
      labels_loss(logits, boxes, tg, idx, num_boxes, suffix, log, r.terms);
      boxes_loss(boxes, tg, idx, num_boxes, suffix, r.terms);
      cardinality(logits, tg, suffix, r.terms);
      r.indices.push_back(std::move(idx));
    };
    const auto outs = matched_outputs(out);
    for (size_t o = 0; o < outs.size(); ++o) run(outs[o].first, outs[o].second, suffix_of(out, o, outs.size()), o == 0);

    total_of(r, out);
    return r;
  }

  // ---- The fixed-slot form (issue 44's segmented step: RFDETRFamily::match_segment / loss_given) ---------
  // Each (image, group) is one image of nn/detr/set_batch.hpp: every matched output [B, G x gq, .] is viewed
  // as [B x G, gq, .] and the padded targets are tiled G times, so the matching's costs, their host solve and
  // the slots ([O, B x G, M]: each target slot's query within its group, -1 for none) need no group logic.
  // The losses then follow B, Q, M and G only, not the batch's counts: the matched pairs are masked slots,
  // IA-BCE's weights dense maps made by one scatter each, num_boxes a device scalar. The terms equal the
  // per-image form's (operator() above): loss_ce and cardinality bit for bit, class_error and the box terms up
  // to rounding (the order of their sums). Not kept here: RFDETRLosses::indices (empty).
  // The costs' non-finite entries are replaced as the original's matcher does (max finite + max |finite| +
  // 1, per output), the maximum taken over the padded matrix (the padding columns' costs are finite).

  // The outputs the matching sees, in the original's order: last layer, aux 0 .., enc.
  static std::vector<std::pair<torch::Tensor, torch::Tensor>> matched_outputs(const RFDETROutput& out) {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> v{{out.pred_logits, out.pred_boxes}};
    for (auto& a : out.aux_outputs) v.emplace_back(a.pred_logits, a.pred_boxes);
    if (out.enc_outputs.pred_logits.defined()) v.emplace_back(out.enc_outputs.pred_logits, out.enc_outputs.pred_boxes);
    return v;
  }
  // The loss keys' suffix of matched_outputs' o-th of n: "" (last layer), "_<i>" (aux layer i), "_enc".
  static std::string suffix_of(const RFDETROutput& out, size_t o, size_t n) {
    if (o == 0) return "";
    return out.enc_outputs.pred_logits.defined() && o + 1 == n ? "_enc" : "_" + std::to_string(o - 1);
  }
  // The matching costs of every output as set_batch::costs_with_counts lays them out (recordable: device work only).
  torch::Tensor match_costs(const RFDETROutput& out, const PaddedTargets& t, bool training) const {
    const int64_t G = groups(training);
    const auto tt = tiled(t, G);
    return set_batch::costs_with_counts(set_batch::stack_costs(set_batch::stack_by_queries(grouped(matched_outputs(out), G)), tt, cost_fn(tt)), tt);
  }
  static set_batch::CostLayout cost_layout(const RFDETROutput& out, int64_t B, int64_t M, int64_t G) {
    return set_batch::layout_of(grouped(matched_outputs(out), G), B * G, M);
  }
  // The host's solve of match_costs' buffer: the slots, pinned for an asynchronous upload when `pinned`.
  static torch::Tensor solve(const torch::Tensor& host, const set_batch::CostLayout& l, bool pinned) {
    return set_batch::solve_slots(host.data_ptr<float>(), l, set_batch::counts_of(host, l.B), pinned);
  }
  // The losses from padded targets (nn/detr/denoising.hpp pad_targets); given: solve's slots on the device
  // (undefined: matched here, through the host).
  RFDETRLosses operator()(const RFDETROutput& out, const PaddedTargets& t, bool training, const torch::Tensor& given = {}) const {
    const int64_t G = groups(training), B = static_cast<int64_t>(t.counts.size()), M = t.M;
    const auto outs = matched_outputs(out);
    const auto by_group = grouped(outs, G);
    const auto l = set_batch::layout_of(by_group, B * G, M);
    torch::Tensor slots = given;
    if (!slots.defined()) {
      const auto tt = tiled(t, G);
      slots = set_batch::to_device(set_batch::hungarian_slots_host(set_batch::stack_by_queries(by_group), tt, cost_fn(tt)),
                                   out.pred_logits.device());
    }
    TORCH_CHECK(slots.numel() == l.slot_numel(), "RF-DETR criterion: ", slots.numel(), " match slots for a layout of ", l.slot_numel());
    // Each output's slots [B x G, M]: the layout's stacks (outputs of one query count) one after another,
    // each stack's outputs in order.
    std::vector<torch::Tensor> per_output(outs.size());
    int64_t at = 0;
    for (const auto& st : l.stacks)
      for (size_t o = 0; o < outs.size(); ++o)
        if (outs[o].first.size(1) / G == st[1]) per_output[o] = slots.narrow(0, at, B * G * M).view({B * G, M}), at += B * G * M;
    auto nb = t.valid.sum().to(torch::kFloat32);
    if (!o_.sum_group_losses) nb = nb * static_cast<double>(G);
    const auto num_boxes = nb.clamp_min(1.0).to(out.pred_logits.device());
    const auto counts = t.valid.sum(1);
    RFDETRLosses r;
    for (size_t o = 0; o < outs.size(); ++o) {
      const std::string suffix = suffix_of(out, o, outs.size());
      const auto p = fixed_pairs(per_output[o], t, G, outs[o].first.size(1));
      fixed_labels_loss(outs[o].first, outs[o].second, p, num_boxes, suffix, o == 0, r.terms);
      fixed_boxes_loss(outs[o].second, p, num_boxes, suffix, r.terms);
      cardinality_of(outs[o].first, counts, suffix, r.terms);
    }
    total_of(r, out);
    return r;
  }

 private:
  int64_t groups(bool training) const { return training ? o_.group_detr : 1; }
  void total_of(RFDETRLosses& r, const RFDETROutput& out) const {
    for (auto& [k, v] : r.terms)
      for (auto& [wk, w] : weights_)
        if (wk == k) r.total = r.total.defined() ? r.total + v * w : v * w;
    if (!r.total.defined()) r.total = torch::zeros({}, out.pred_logits.options());
  }
  // Outputs [B, G x gq, .] as [B x G, gq, .] (row b x G + g: image b's group g).
  static std::vector<std::pair<torch::Tensor, torch::Tensor>> grouped(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outs,
                                                                      int64_t G) {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> v;
    for (auto& [lg, bx] : outs) {
      const int64_t B = lg.size(0), Q = lg.size(1);
      if (Q % G != 0) throw Error("RF-DETR criterion: " + std::to_string(Q) + " queries do not split into " + std::to_string(G) + " groups");
      v.emplace_back(lg.reshape({B * G, Q / G, lg.size(2)}), bx.reshape({B * G, Q / G, 4}));
    }
    return v;
  }
  // x [B, ...] with each row repeated G times in place ([B x G, ...]; an expand and a copy: no host sync, so
  // a recorded segment can hold it).
  static torch::Tensor tile_rows(const torch::Tensor& x, int64_t G) {
    auto sizes = x.sizes().vec();
    sizes.insert(sizes.begin() + 1, G);
    auto out = sizes;
    out.erase(out.begin() + 1);
    out[0] *= G;
    return x.unsqueeze(1).expand(sizes).reshape(out);
  }
  // The padded targets with each image's row repeated G times (its groups'); counts likewise.
  static PaddedTargets tiled(const PaddedTargets& t, int64_t G) {
    if (G == 1) return t;
    PaddedTargets out;
    out.labels = tile_rows(t.labels, G);
    out.boxes = tile_rows(t.boxes, G);
    out.valid = tile_rows(t.valid, G);
    for (auto c : t.counts)
      for (int64_t g = 0; g < G; ++g) out.counts.push_back(c);
    out.M = t.M;
    return out;
  }
  // The matcher's cost (cost_matrix's element-wise operations) batched over N = O x B x G rows of
  // (logits [N, gq, C], boxes [N, gq, 4]) against the tiled target slots (labels [N, M], boxes [N, M, 4]), the
  // non-finite entries replaced per output (t's B x G rows each).
  using CostFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
  CostFn cost_fn(const PaddedTargets& tt) const {
    const int64_t rows = tt.labels.size(0);
    return [this, rows](const torch::Tensor& logits, const torch::Tensor& boxes, const torch::Tensor& ids, const torch::Tensor& bx) {
      torch::NoGradGuard ng;
      const int64_t N = logits.size(0), Q = logits.size(1), M = ids.size(1);
      auto prob = logits.sigmoid();
      const double alpha = 0.25, gamma = 2.0;
      auto neg = (1 - alpha) * prob.pow(gamma) * (-torch::log_sigmoid(-logits));
      auto pos = alpha * (1 - prob).pow(gamma) * (-torch::log_sigmoid(logits));
      auto idx = ids.unsqueeze(1).expand({N, Q, M});
      auto cost_class = pos.gather(2, idx) - neg.gather(2, idx);
      auto cost_bbox = torch::cdist(boxes, bx, 1);
      auto cost_giou = -pairwise_giou(cxcywh_to_xyxy(boxes), cxcywh_to_xyxy(bx));
      auto c = (o_.matcher.cost_bbox * cost_bbox + o_.matcher.cost_class * cost_class + o_.matcher.cost_giou * cost_giou).to(torch::kFloat);
      // the replacement of non-finite entries, per output (rows x Q x M entries each), on the device
      auto per = c.view({N / rows, -1});
      auto finite = torch::isfinite(per);
      const double fmax = std::numeric_limits<float>::max();
      auto mx = torch::where(finite, per, torch::full({}, -std::numeric_limits<float>::infinity(), per.options())).amax(1, true);
      auto amax = torch::where(finite, per.abs(), torch::zeros({}, per.options())).amax(1, true);
      auto repl = mx + amax + 1.0;
      repl = torch::where(torch::isfinite(repl), repl.clamp_max(fmax), torch::full({}, fmax, per.options()));
      return torch::where(finite, per, repl).view({N, Q, M});
    };
  }

  // The class losses' sums from their dense inputs, which each form builds its own way: IA-BCE's weights
  // (pos_w, neg_w [B, Q, C]), varifocal's IoU targets (tgt [B, Q, C]), focal's class per query (tc [B, Q];
  // C for none). The callers normalise (focal and varifocal: / num_boxes x Q).
  static torch::Tensor ia_bce_sum(const torch::Tensor& logits, const torch::Tensor& pos_w, const torch::Tensor& neg_w) {
    return (neg_w * logits - torch::log_sigmoid(logits) * (pos_w + neg_w)).sum();
  }
  static torch::Tensor varifocal_sum(const torch::Tensor& logits, const torch::Tensor& tgt, double alpha, double gamma) {
    auto prob = logits.sigmoid();
    auto fw = tgt * (tgt > 0.0).to(tgt.scalar_type()) + (1 - alpha) * (prob - tgt).abs().pow(gamma) * (tgt <= 0.0).to(tgt.scalar_type());
    auto ce = torch::binary_cross_entropy_with_logits(logits, tgt, {}, {}, at::Reduction::None);
    return (ce * fw).mean(1).sum();
  }
  static torch::Tensor focal_sum(const torch::Tensor& logits, const torch::Tensor& tc, double alpha, double gamma) {
    auto onehot = torch::zeros({logits.size(0), logits.size(1), logits.size(2) + 1}, logits.options());
    onehot.scatter_(2, tc.unsqueeze(-1), 1);
    onehot = onehot.narrow(2, 0, logits.size(2));
    auto prob = logits.sigmoid();
    auto ce = torch::binary_cross_entropy_with_logits(logits, onehot, {}, {}, at::Reduction::None);
    auto p_t = prob * onehot + (1 - prob) * (1 - onehot);
    auto loss = ce * (1 - p_t).pow(gamma);
    if (alpha >= 0) loss = (alpha * onehot + (1 - alpha) * (1 - onehot)) * loss;
    return loss.mean(1).sum();
  }

  // One output's matched pairs, flattened over its [B x G, M] slots: the mask, the pair's row of the output's
  // [B x Q] (image x Q + query; masked slots: query 0 of their image, so gathers stay in range), the label, the box.
  struct FixedPairs {
    torch::Tensor mask, row, label, box;  // [P] bool, [P] int64, [P] int64, [P, 4]
    int64_t B = 0, Q = 0;
  };
  static FixedPairs fixed_pairs(const torch::Tensor& slots, const PaddedTargets& t, int64_t G, int64_t Q) {
    const int64_t B = t.labels.size(0), M = t.M;
    const auto lopt = slots.options();
    auto r = torch::arange(B * G, lopt);
    auto image = torch::div(r, G, "floor").unsqueeze(1).expand({B * G, M});
    auto q = slots.clamp_min(0) + (r.remainder(G) * (Q / G)).unsqueeze(1);
    FixedPairs p;
    p.mask = (slots >= 0).reshape({-1});
    p.row = (image * Q + torch::where(slots >= 0, q, torch::zeros_like(q))).reshape({-1});
    p.label = tile_rows(t.labels, G).reshape({-1}).to(slots.device());
    p.box = tile_rows(t.boxes, G).reshape({-1, 4}).to(slots.device());
    p.B = B, p.Q = Q;
    return p;
  }
  // A dense [rows] map from the pairs: `value` at index[k] where mask[k], `fill` elsewhere (masked pairs are
  // written to one extra element and dropped). Within one output a query is matched at most once, so the
  // kept indices are distinct.
  static torch::Tensor scatter_pairs(int64_t rows, const torch::Tensor& index, const FixedPairs& p, const torch::Tensor& value,
                                     const torch::Tensor& fill) {
    auto at = torch::where(p.mask, index, torch::full_like(index, rows));
    auto buf = torch::cat({fill.expand({rows}), fill.reshape({1})});
    buf.index_put_({at}, value);
    return buf.narrow(0, 0, rows);
  }

  void fixed_labels_loss(const torch::Tensor& logits, const torch::Tensor& boxes, const FixedPairs& p, const torch::Tensor& num_boxes,
                         const std::string& suffix, bool log, std::vector<std::pair<std::string, torch::Tensor>>& terms) const {
    const int64_t C = logits.size(2), BQC = p.B * p.Q * C;
    const auto at_cls = p.row * C + p.label;  // [P]: (image, query, class) in the flat logits
    auto ious = [&]() {
      torch::NoGradGuard ng;
      auto src = boxes.reshape({-1, 4}).index_select(0, p.row).detach();
      return paired_iou_union(cxcywh_to_xyxy(src), cxcywh_to_xyxy(p.box.to(src.scalar_type()))).first.detach();
    };
    const double alpha = o_.focal_alpha, gamma = 2;
    const auto zero = torch::zeros({}, logits.options());
    torch::Tensor loss_ce;
    if (o_.class_loss == RFDETRClassLoss::IaBce) {
      auto prob = logits.sigmoid();
      auto t = (prob.reshape({-1}).index_select(0, at_cls).pow(alpha) * ious().pow(1 - alpha)).clamp_min(0.01).detach();
      auto pos_w = scatter_pairs(BQC, at_cls, p, t.to(logits.scalar_type()), zero).view_as(logits);
      auto matched = scatter_pairs(BQC, at_cls, p, torch::ones_like(t, t.options().dtype(torch::kBool)),
                                   torch::zeros({}, t.options().dtype(torch::kBool)))
                         .view_as(logits);
      auto neg_w = torch::where(matched, 1 - pos_w, prob.pow(gamma));
      loss_ce = ia_bce_sum(logits, pos_w, neg_w) / num_boxes;
    } else if (o_.class_loss == RFDETRClassLoss::Varifocal) {
      auto tgt = scatter_pairs(BQC, at_cls, p, ious().to(logits.scalar_type()), zero).view_as(logits);
      loss_ce = varifocal_sum(logits, tgt, alpha, gamma) / num_boxes * static_cast<double>(logits.size(1));
    } else {
      const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(logits.device());
      auto tc = scatter_pairs(p.B * p.Q, p.row, p, p.label, torch::full({}, o_.num_classes, lopt)).view({p.B, p.Q});
      loss_ce = focal_sum(logits, tc, alpha, gamma) / num_boxes * static_cast<double>(logits.size(1));
    }
    terms.emplace_back("loss_ce" + suffix, loss_ce);
    if (log) {
      torch::NoGradGuard ng;
      auto pred = std::get<1>(logits.reshape({-1, C}).index_select(0, p.row).topk(1, 1, true, true)).squeeze(1);
      const auto n = p.mask.sum().to(torch::kFloat);
      auto correct = (pred.eq(p.label) & p.mask).sum().to(torch::kFloat);
      auto err = torch::where(n > 0, 100 - correct * (100.0 / n.clamp_min(1)), torch::full({}, 100.0, n.options()));
      terms.emplace_back("class_error" + suffix, err.to(logits.scalar_type()));
    }
  }
  static void fixed_boxes_loss(const torch::Tensor& boxes, const FixedPairs& p, const torch::Tensor& num_boxes, const std::string& suffix,
                               std::vector<std::pair<std::string, torch::Tensor>>& terms) {
    auto src = boxes.reshape({-1, 4}).index_select(0, p.row);
    auto tb = p.box.to(src.scalar_type());
    auto keep = p.mask.unsqueeze(1);
    auto l1 = torch::where(keep, torch::l1_loss(src, tb, at::Reduction::None), torch::zeros({}, src.options()));
    terms.emplace_back("loss_bbox" + suffix, l1.sum() / num_boxes);
    auto giou = paired_giou(cxcywh_to_xyxy(src), cxcywh_to_xyxy(tb));
    terms.emplace_back("loss_giou" + suffix, torch::where(p.mask, 1 - giou, torch::zeros({}, giou.options())).sum() / num_boxes);
  }
  static void cardinality_of(const torch::Tensor& logits, const torch::Tensor& counts, const std::string& suffix,
                             std::vector<std::pair<std::string, torch::Tensor>>& terms) {
    torch::NoGradGuard ng;
    auto card = (logits.argmax(-1) != logits.size(-1) - 1).sum(1);
    terms.emplace_back("cardinality_error" + suffix, torch::l1_loss(card.to(torch::kFloat), counts.to(logits.device(), torch::kFloat)));
  }

  static std::pair<torch::Tensor, torch::Tensor> src_permutation(const MatchIndices& idx, torch::Device dev) {
    std::vector<torch::Tensor> bi, si;
    for (size_t i = 0; i < idx.size(); ++i) {
      bi.push_back(torch::full_like(idx[i].first, static_cast<int64_t>(i)));
      si.push_back(idx[i].first);
    }
    return {torch::cat(bi).to(dev), torch::cat(si).to(dev)};
  }
  static torch::Tensor gather_targets(const std::vector<DetrTarget>& tg, const MatchIndices& idx, bool boxes) {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < idx.size(); ++i) {
      const auto& src = boxes ? tg[i].boxes : tg[i].labels;
      parts.push_back(src.index_select(0, idx[i].second.to(src.device())));
    }
    return torch::cat(parts);
  }

  void labels_loss(const torch::Tensor& logits, const torch::Tensor& boxes, const std::vector<DetrTarget>& tg, const MatchIndices& idx,
                   double num_boxes, const std::string& suffix, bool log, std::vector<std::pair<std::string, torch::Tensor>>& terms) const {
    const auto [bi, qi] = src_permutation(idx, logits.device());
    const auto cls_o = gather_targets(tg, idx, false);
    const int64_t n = bi.size(0);
    auto ious = [&]() {
      torch::NoGradGuard ng;
      auto src = boxes.index({bi, qi}).detach();
      auto tb = gather_targets(tg, idx, true);
      return paired_iou_union(cxcywh_to_xyxy(src), cxcywh_to_xyxy(tb)).first.detach();
    };
    const double alpha = o_.focal_alpha, gamma = 2;
    torch::Tensor loss_ce;
    if (o_.class_loss == RFDETRClassLoss::IaBce) {
      auto prob = logits.sigmoid();
      auto pos_w = torch::zeros_like(logits);
      auto neg_w = prob.pow(gamma);
      if (n > 0) {
        const auto pos_ious = ious();
        auto t = (prob.index({bi, qi, cls_o}).pow(alpha) * pos_ious.pow(1 - alpha)).clamp_min(0.01).detach();
        pos_w.index_put_({bi, qi, cls_o}, t.to(pos_w.scalar_type()));
        neg_w.index_put_({bi, qi, cls_o}, 1 - t.to(neg_w.scalar_type()));
      }
      loss_ce = ia_bce_sum(logits, pos_w, neg_w) / num_boxes;
    } else if (o_.class_loss == RFDETRClassLoss::Varifocal) {
      auto tgt = torch::zeros({logits.size(0), logits.size(1), o_.num_classes}, logits.options());
      if (n > 0) tgt.index_put_({bi, qi, cls_o}, ious());
      loss_ce = varifocal_sum(logits, tgt, alpha, gamma) / num_boxes * static_cast<double>(logits.size(1));
    } else {
      auto tc = torch::full({logits.size(0), logits.size(1)}, o_.num_classes, torch::TensorOptions().dtype(torch::kLong).device(logits.device()));
      if (n > 0) tc.index_put_({bi, qi}, cls_o);
      loss_ce = focal_sum(logits, tc, alpha, gamma) / num_boxes * static_cast<double>(logits.size(1));
    }
    terms.emplace_back("loss_ce" + suffix, loss_ce);
    if (log) {
      torch::NoGradGuard ng;
      torch::Tensor err;
      if (n == 0) {
        err = 100 - torch::zeros({}, logits.options());
      } else {
        auto pred = std::get<1>(logits.index({bi, qi}).topk(1, 1, true, true)).t();  // [1, n]
        auto correct = pred.eq(cls_o.view({1, -1}).expand_as(pred)).view(-1).to(torch::kFloat).sum(0);
        err = 100 - correct.mul_(100.0 / static_cast<double>(n));
      }
      terms.emplace_back("class_error" + suffix, err);
    }
  }

  static void cardinality(const torch::Tensor& logits, const std::vector<DetrTarget>& tg, const std::string& suffix,
                          std::vector<std::pair<std::string, torch::Tensor>>& terms) {
    std::vector<int64_t> lens;
    for (auto& t : tg) lens.push_back(t.labels.size(0));
    cardinality_of(logits, torch::tensor(lens, torch::kLong), suffix, terms);
  }

  static void boxes_loss(const torch::Tensor& boxes, const std::vector<DetrTarget>& tg, const MatchIndices& idx, double num_boxes,
                         const std::string& suffix, std::vector<std::pair<std::string, torch::Tensor>>& terms) {
    const auto [bi, qi] = src_permutation(idx, boxes.device());
    auto src = boxes.index({bi, qi});
    auto tb = gather_targets(tg, idx, true);
    terms.emplace_back("loss_bbox" + suffix, torch::l1_loss(src, tb, at::Reduction::None).sum() / num_boxes);
    auto giou = paired_giou(cxcywh_to_xyxy(src), cxcywh_to_xyxy(tb));
    terms.emplace_back("loss_giou" + suffix, (1 - giou).sum() / num_boxes);
  }

  RFDETRCriterionOptions o_;
  RFDETRMatcher matcher_;
  std::vector<std::pair<std::string, double>> weights_;
};

}  // namespace libreyolo::families::rfdetr
