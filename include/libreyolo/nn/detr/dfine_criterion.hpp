#pragma once
// The D-FINE / DEIM set loss (the original's DFINECriterion and DEIMCriterion with their
// HungarianMatcher, models/{dfine,deim}/loss.py + matcher.py), term for term:
//
//   matching  per output and image, the one-to-one assignment minimising 5 * L1 + 2 * focal class
//             cost (alpha 0.25, gamma 2) + 2 * (-GIoU) (NaN costs read as 1); every output's cost matrix
//             goes to the host in one copy (assign/hungarian.hpp solves them), the matches come back in one.
//   GO-LSD    the union of the matches of the last layer, every earlier layer, the pre-decoder head and
//             the encoder proposals: per image every (query, target) pair they name, counted, sorted by
//             count (descending), the first pair of each query kept. The box and local losses of every
//             decoder output use this union (normalised by its size); the class loss uses the output's
//             own match (normalised by the batch's box count).
//   class     VFL (D-FINE: alpha 0.75, gamma 2, IoU-valued targets) or MAL (DEIM: targets IoU^gamma,
//             gamma 1.5, weight p^gamma on negatives and 1 on positives), mean over queries x Q / boxes.
//   boxes     L1 (x5) and 1 - GIoU (x2) of the matched pairs.
//   local     FGL (x0.15): the matched queries' four edge distributions against the target's edge
//             distances (fdr.hpp's bbox2distance from the layer's reference boxes) as a two-bin
//             cross-entropy weighted by the pair's IoU; DDF (x1.5): KL(T=5) of every query's edge
//             distributions against the last layer's (the teacher), weighted by the teacher's best
//             class score (the IoU at matched queries), the matched and unmatched means mixed by
//             sqrt(count * 8 / batch) (the non-denoising outputs' counts serve the denoising ones too).
//   outputs   last layer (class, boxes, FGL), layers 0 .. L-2 (all, DDF against the last layer), the
//             pre-decoder head and the encoder proposals (class, boxes); every denoising layer (all, DDF
//             against the last denoising layer: 0 for that one) and the denoising pre head (class,
//             boxes), matched by construction and normalised by box count x groups.
// Every term is weighted, NaN read as 0. The reported components (the original's get_loss_components)
// are the five sums class, bbox, giou, fgl, ddf. Apart from the matching's one device-to-host copy the
// loss needs no synchronisation, and it runs in fixed shapes (nn/detr/set_batch.hpp): targets in [B, M]
// slots, every pair set as one query per slot with a mask, counts and normalisers as device scalars. The
// outputs of one query count and kind are evaluated together: the matched ones (last layer, aux, pre,
// encoder) as one [O, B, Q, .] stack, the denoising ones as another; each term is still reported on its own.
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/fdr.hpp>
#include <libreyolo/nn/detr/layers.hpp>
#include <libreyolo/nn/detr/set_batch.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// Per image: (prediction indices, target indices), CPU int64 (as criterion.hpp's).
using DFineMatch = MatchIndices;

enum class DFineClassLoss { vfl, mal };

struct DFineCriterionOptions {
  int64_t num_classes = 80;
  double cost_class = 2, cost_bbox = 5, cost_giou = 2;  // matcher
  double match_alpha = 0.25, match_gamma = 2.0;         // its focal class cost
  DFineClassLoss class_loss = DFineClassLoss::vfl;
  double alpha = 0.75, gamma = 2.0;                     // VFL (D-FINE); DEIM's MAL: gamma 1.5
  std::optional<double> mal_alpha;                      // MAL's negative weight factor (the original: none)
  double w_class = 1, w_bbox = 5, w_giou = 2, w_fgl = 0.15, w_ddf = 1.5;
  int64_t reg_max = 32;
  double ddf_temperature = 5;
  // DEIMv2Criterion's controls (models/deimv2/loss.py, matcher.py): local_losses false = its losses
  // ("mal", "boxes"), no FGL / DDF; uni_set false = every output's box terms on its own match, normalised by
  // the batch's box count, not on GO-LSD's union (needs local_losses false: FGL / DDF read the union);
  // matcher_change_epoch >= 0 = from that epoch (set_epoch) the matching cost is -p x IoU^iou_order_alpha.
  bool local_losses = true;
  bool uni_set = true;
  int64_t matcher_change_epoch = -1;
  double iou_order_alpha = 1.0;
};

struct DFineLoss {
  torch::Tensor total;  // scalar
  torch::Tensor items;  // [5]: class (vfl or mal), bbox, giou, fgl, ddf (detached)
  std::vector<std::pair<std::string, torch::Tensor>> terms;  // every weighted term, named as the original's
};

namespace dfine_detail {
// The original's box_ops (D-FINE's copy of DETR's): width and height clamped at 0 before the corners,
// IoU and GIoU without an epsilon.
inline torch::Tensor cxcywh_to_xyxy(const torch::Tensor& b) {
  auto c = b.narrow(-1, 0, 2), half = 0.5 * b.narrow(-1, 2, 2).clamp_min(0);
  return torch::cat({c - half, c + half}, -1);
}
inline torch::Tensor area(const torch::Tensor& a) { return (a.select(-1, 2) - a.select(-1, 0)) * (a.select(-1, 3) - a.select(-1, 1)); }
// Pairwise IoU and union [..., N, M] of a [..., N, 4] and b [..., M, 4] (leading dimensions a batch).
inline std::pair<torch::Tensor, torch::Tensor> pairwise_iou_union(const torch::Tensor& a, const torch::Tensor& b) {
  auto lt = torch::max(a.unsqueeze(-2).narrow(-1, 0, 2), b.unsqueeze(-3).narrow(-1, 0, 2));
  auto rb = torch::min(a.unsqueeze(-2).narrow(-1, 2, 2), b.unsqueeze(-3).narrow(-1, 2, 2));
  auto wh = (rb - lt).clamp_min(0);
  auto inter = wh.select(-1, 0) * wh.select(-1, 1);
  auto uni = area(a).unsqueeze(-1) + area(b).unsqueeze(-2) - inter;
  return {inter / uni, uni};
}
inline torch::Tensor pairwise_giou(const torch::Tensor& a, const torch::Tensor& b) {
  auto [iou, uni] = pairwise_iou_union(a, b);
  auto lt2 = torch::min(a.unsqueeze(-2).narrow(-1, 0, 2), b.unsqueeze(-3).narrow(-1, 0, 2));
  auto rb2 = torch::max(a.unsqueeze(-2).narrow(-1, 2, 2), b.unsqueeze(-3).narrow(-1, 2, 2));
  auto wh2 = (rb2 - lt2).clamp_min(0);
  auto encl = wh2.select(-1, 0) * wh2.select(-1, 1);
  return iou - (encl - uni) / encl;
}
// IoU and GIoU of matched pairs a[i] <-> b[i] (the diagonals of the pairwise ones).
inline std::pair<torch::Tensor, torch::Tensor> paired_iou_union(const torch::Tensor& a, const torch::Tensor& b) {
  auto wh = (torch::min(a.narrow(1, 2, 2), b.narrow(1, 2, 2)) - torch::max(a.narrow(1, 0, 2), b.narrow(1, 0, 2))).clamp_min(0);
  auto inter = wh.select(1, 0) * wh.select(1, 1);
  auto uni = area(a) + area(b) - inter;
  return {inter / uni, uni};
}
inline torch::Tensor paired_giou(const torch::Tensor& a, const torch::Tensor& b) {
  auto [iou, uni] = paired_iou_union(a, b);
  auto wh = (torch::max(a.narrow(1, 2, 2), b.narrow(1, 2, 2)) - torch::min(a.narrow(1, 0, 2), b.narrow(1, 0, 2))).clamp_min(0);
  auto encl = wh.select(1, 0) * wh.select(1, 1);
  return iou - (encl - uni) / encl;
}
}  // namespace dfine_detail

class DFineCriterion {
 public:
  explicit DFineCriterion(DFineCriterionOptions o = {}) : o_(std::move(o)) {
    if (!o_.uni_set && o_.local_losses)
      throw std::invalid_argument("DFineCriterion: uni_set = false needs local_losses = false (FGL / DDF read the union)");
  }
  // The training epoch (0-based), for matcher_change_epoch.
  void set_epoch(int64_t e) { epoch_ = e; }

  // The matching cost [N, Q, M] of N outputs (logits [N, Q, C], cxcywh boxes [N, Q, 4]) against their
  // images' target slots (labels [N, M], boxes [N, M, 4]).
  torch::Tensor cost_matrix(const torch::Tensor& logits, const torch::Tensor& boxes, const torch::Tensor& labels,
                            const torch::Tensor& tgt_boxes) const {
    torch::NoGradGuard ng;
    const int64_t N = logits.size(0), Q = logits.size(1), M = labels.size(1);
    auto prob = torch::sigmoid(logits).gather(2, labels.unsqueeze(1).expand({N, Q, M}));
    auto a = dfine_detail::cxcywh_to_xyxy(boxes), b = dfine_detail::cxcywh_to_xyxy(tgt_boxes);
    if (o_.matcher_change_epoch >= 0 && epoch_ >= o_.matcher_change_epoch)  // DEIMv2: -score x IoU^alpha
      return torch::nan_to_num(-prob * dfine_detail::pairwise_iou_union(a, b).first.pow(o_.iou_order_alpha), 1.0);
    auto neg = (1 - o_.match_alpha) * prob.pow(o_.match_gamma) * (-(1 - prob + 1e-8).log());
    auto pos = o_.match_alpha * (1 - prob).pow(o_.match_gamma) * (-(prob + 1e-8).log());
    auto cost_bbox = torch::cdist(boxes, tgt_boxes, 1);
    auto cost_giou = -dfine_detail::pairwise_giou(a, b);
    return torch::nan_to_num(o_.cost_bbox * cost_bbox + o_.cost_class * (pos - neg) + o_.cost_giou * cost_giou, 1.0);
  }

  // cost_matrix as the matching's cost function (set_batch).
  auto cost_fn() const {
    return [this](const torch::Tensor& l, const torch::Tensor& b, const torch::Tensor& ids, const torch::Tensor& bx) {
      return cost_matrix(l, b, ids, bx);
    };
  }

  // Hungarian matching of several (logits, boxes) outputs (one device-to-host copy for all).
  std::vector<DFineMatch> match(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outputs,
                                const std::vector<DetrTarget>& targets) const {
    return set_batch::match_indices(outputs, targets, cost_fn());
  }

  // GO-LSD's union (the original's _get_go_indices): per image the pairs of all matches, each distinct
  // pair counted, sorted by count (descending, torch's sort on the host as the original), the first pair
  // of every query kept, in that order.
  static DFineMatch go_indices(const std::vector<const DFineMatch*>& matches) {
    std::vector<HostMatch> host;
    for (const auto* m : matches) host.push_back(set_batch::to_host(*m));
    std::vector<const HostMatch*> p;
    for (auto& h : host) p.push_back(&h);
    return set_batch::to_tensors(go_host(p));
  }

  // The loss of the decoder's training output (nn/detr/dfine_output.hpp) for the batch's targets.
  DFineLoss operator()(const DFineOutput& in, const std::vector<DetrTarget>& targets) const {
    return (*this)(in, pad_targets(targets, in.pred_logits.device()));
  }
  // given: the segmented form's slots on the device (solve's buffer; undefined: the loss matches itself).
  DFineLoss operator()(const DFineOutput& in, const PaddedTargets& targets, const torch::Tensor& given = {}) const {
    Run r(*this, in, targets, given);
    return r.run();
  }

  // The outputs the matching sees, in the original's order: last layer, aux..., pre, enc...
  static std::vector<std::pair<torch::Tensor, torch::Tensor>> matched_outputs(const DFineOutput& in) {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> outs{{in.pred_logits, in.pred_boxes}};
    for (auto& a : in.aux_outputs) outs.emplace_back(a.pred_logits, a.pred_boxes);
    outs.emplace_back(in.pre_outputs.pred_logits, in.pre_outputs.pred_boxes);
    for (auto& e : in.enc_aux_outputs) outs.emplace_back(e.pred_logits, e.pred_boxes);
    return outs;
  }

  // ---- The segmented form (issue 44), as SetCriterion's: match_costs on the device (recordable), solve
  // on the host (the matches, then GO-LSD's union from them), the loss from solve's buffer on the device.
  // solve's buffer: the matches' slots [slot_numel], then the union's query per (image, query) slot [B * Q]
  // (-1: none) and its target column [B * Q].
  torch::Tensor match_costs(const DFineOutput& in, const PaddedTargets& t) const {
    return set_batch::costs_with_counts(set_batch::stack_costs(set_batch::stack_by_queries(matched_outputs(in)), t, cost_fn()), t);
  }
  static set_batch::CostLayout cost_layout(const DFineOutput& in, int64_t B, int64_t M) {
    return set_batch::layout_of(matched_outputs(in), B, M);
  }
  static torch::Tensor solve(const torch::Tensor& host, const set_batch::CostLayout& l, bool pinned) {
    const int64_t S = l.slot_numel(), BQ = l.B * union_queries(l);
    auto out = torch::empty({S + 2 * BQ}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(pinned));
    int64_t* p = out.data_ptr<int64_t>();
    set_batch::solve_slots_into(host.data_ptr<float>(), l, set_batch::counts_of(host, l.B), p);
    union_slots(p, l, p + S, p + S + BQ);
    return out;
  }

  const DFineCriterionOptions& options() const { return o_; }

 private:
  torch::Tensor match_host(const std::vector<set_batch::Stack>& stacks, const PaddedTargets& t) const {
    return set_batch::hungarian_slots_host(stacks, t, cost_fn());
  }

  // The matched outputs' one query count (GO-LSD's union needs one).
  static int64_t union_queries(const set_batch::CostLayout& l) {
    const int64_t Q = l.stacks.front()[1];
    for (auto& s : l.stacks)
      if (s[1] != Q)
        throw std::invalid_argument("DFineCriterion: the matched outputs hold " + std::to_string(Q) + " and " + std::to_string(s[1]) +
                                    " queries; GO-LSD's union needs one query count");
    return Q;
  }
  // GO-LSD's union of every output's matches (slots: solve_slots' buffer for layout l) as one slot per
  // (image, query): q[i * Q + r] = r and col[...] = its target where query r is in image i's union, else -1 / 0.
  static void union_slots(const int64_t* slots, const set_batch::CostLayout& l, int64_t* q, int64_t* col) {
    const int64_t B = l.B, Q = union_queries(l);
    std::vector<HostMatch> per_output;
    const int64_t* p = slots;
    for (auto& s : l.stacks)
      for (int64_t o = 0; o < s[0]; ++o) per_output.push_back(set_batch::slots_to_host(p, B, l.M)), p += B * l.M;
    std::vector<const HostMatch*> all;
    for (auto& m : per_output) all.push_back(&m);
    const auto go = go_host(all);
    std::fill(q, q + B * Q, int64_t{-1});
    std::fill(col, col + B * Q, int64_t{0});
    for (int64_t i = 0; i < B; ++i) {
      const auto& [r, c] = go[static_cast<size_t>(i)];
      for (size_t k = 0; k < r.size(); ++k) q[i * Q + r[k]] = r[k], col[i * Q + r[k]] = c[k];
    }
  }

  static HostMatch go_host(const std::vector<const HostMatch*>& matches) {
    const size_t B = matches.front()->size();
    HostMatch out(B);
    for (size_t i = 0; i < B; ++i) {
      std::vector<int64_t> pairs;  // [K, 2]: (query, target), the matches' pairs in order
      for (const auto* m : matches) {
        const auto& [r, c] = (*m)[i];
        for (size_t k = 0; k < r.size(); ++k) pairs.insert(pairs.end(), {r[k], c[k]});
      }
      if (pairs.empty()) continue;
      auto ind = set_batch::long_tensor(pairs).view({-1, 2});
      auto [uniq, inverse, counts] = torch::unique_dim(ind, 0, /*sorted=*/true, /*return_inverse=*/false, /*return_counts=*/true);
      auto order = torch::argsort(counts, 0, /*descending=*/true);
      auto sorted = uniq.index_select(0, order).contiguous();
      const int64_t* p = sorted.data_ptr<int64_t>();
      std::map<int64_t, bool> seen;
      for (int64_t k = 0; k < sorted.size(0); ++k) {
        if (seen.count(p[2 * k])) continue;
        seen[p[2 * k]] = true;
        out[i].first.push_back(p[2 * k]);
        out[i].second.push_back(p[2 * k + 1]);
      }
    }
    return out;
  }

  // One prediction head as the loss reads it (corners undefined: no local losses; teacher_corners
  // undefined: no DDF).
  struct Head {
    torch::Tensor logits, boxes, corners, ref_points, teacher_corners, teacher_logits;
    static Head of(const DFineBoxes& b) { return {b.pred_logits, b.pred_boxes, {}, {}, {}, {}}; }
    static Head of(const DFineLayerOutput& l) {
      return {l.pred_logits, l.pred_boxes, l.pred_corners, l.ref_points, l.teacher_corners, l.teacher_logits};
    }
  };
  // Whether two tensors are the same values by construction (one view of one storage): the original's
  // torch.equal(pred_corners, teacher_corners), true for the last denoising layer, without a sync.
  static bool same_view(const torch::Tensor& a, const torch::Tensor& b) {
    return a.is_same(b) || (a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
                            a.scalar_type() == b.scalar_type());
  }

  // Every output's terms, evaluated per stack of outputs of one query count and kind (matched or
  // denoising): the class loss on each output's own match, boxes and local losses on the union (the
  // denoising outputs: on their own match, normalised by box count x groups), DDF against the output's
  // teacher. The terms come out named and in the original's order. Every pair set is fixed-shape
  // (set_batch::Slots): each output's match [O, B, M], the union one slot per query [1, B, Q], the
  // denoising pairs [1, B, groups x M]; counts and normalisers are device scalars.
  class Run {
   public:
    Run(const DFineCriterion& c, const DFineOutput& in, const PaddedTargets& t, const torch::Tensor& given)
        : c_(c), o_(c.o_), in_(in), t_(t), given_(given) {}

    DFineLoss run() {
      const auto B = static_cast<int64_t>(t_.counts.size());
      dev_ = in_.pred_logits.device();
      num_boxes_ = t_.valid.sum().clamp_min(1).to(torch::kFloat32);

      // The heads in the original's order: main, aux..., pre, enc... (matched), then dn..., dn pre.
      const std::string cls = o_.class_loss == DFineClassLoss::vfl ? "vfl" : "mal";
      specs_.push_back({Head{in_.pred_logits, in_.pred_boxes, in_.pred_corners, in_.ref_points, {}, {}}, false, "", false});
      for (size_t i = 0; i < in_.aux_outputs.size(); ++i) specs_.push_back({Head::of(in_.aux_outputs[i]), false, "_aux_" + std::to_string(i), false});
      specs_.push_back({Head::of(in_.pre_outputs), false, "_pre", false});
      for (size_t i = 0; i < in_.enc_aux_outputs.size(); ++i)
        specs_.push_back({Head::of(in_.enc_aux_outputs[i]), in_.class_agnostic, "_enc_" + std::to_string(i), false});
      const size_t n_match = specs_.size();
      const bool has_dn = in_.dn_meta && !in_.dn_outputs.empty() && in_.dn_meta->num_group > 0;
      if (has_dn) {
        for (size_t i = 0; i < in_.dn_outputs.size(); ++i) specs_.push_back({Head::of(in_.dn_outputs[i]), false, "_dn_" + std::to_string(i), true});
        if (in_.dn_pre_outputs.defined()) specs_.push_back({Head::of(in_.dn_pre_outputs), false, "_dn_pre", true});
      }
      if (!o_.local_losses)  // the box terms only (DEIMv2's losses ("mal", "boxes"))
        for (auto& sp : specs_) sp.h.corners = sp.h.ref_points = sp.h.teacher_corners = sp.h.teacher_logits = torch::Tensor();

      // One matching call (one device-to-host copy); the original matches the encoder outputs against
      // the unchanged targets too. The stacks serve the loss as well.
      const auto outs = matched_outputs(in_);
      auto stacks = set_batch::stack_by_queries(outs);
      const auto layout = set_batch::layout_of(stacks, B, t_.M);
      const int64_t Q = union_queries(layout), S = layout.slot_numel();
      // The matches and GO-LSD's union (one slot per query, its target column or -1), from the segmented
      // form's buffer or from this loss's own matching (the union computed on the host from the same matches).
      torch::Tensor slots;
      if (given_.defined()) {
        slots = given_;
      } else {
        const auto host = c_.match_host(stacks, t_);
        auto buf = set_batch::host_long(S + 2 * B * Q, 0, dev_);
        int64_t* p = buf.data_ptr<int64_t>();
        std::copy(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + S, p);
        union_slots(p, layout, p + S, p + S + B * Q);
        slots = set_batch::to_device(buf, dev_);
      }
      const auto own = set_batch::stack_slots(slots.narrow(0, 0, S), stacks, B, t_.M, dev_);
      go_.qidx = slots.narrow(0, S, B * Q).view({1, B, Q});
      go_.tcol = slots.narrow(0, S + B * Q, B * Q).view({B, Q});
      num_go_ = (go_.qidx >= 0).sum().clamp_min(1).to(torch::kFloat32);
      const auto cols = set_batch::match_columns(t_);
      for (size_t g = 0; g < stacks.size(); ++g) plan(std::move(stacks[g]), false, 0, {own[g], cols});
      if (has_dn) {
        dn_ = set_batch::denoising_slots(*in_.dn_meta, t_);
        dn_boxes_ = (num_boxes_ * in_.dn_meta->group_count.to(dev_, torch::kFloat32)).clamp_min(1);
        dn_real_ = in_.dn_meta->real.to(dev_, torch::kFloat32);
        std::vector<std::pair<torch::Tensor, torch::Tensor>> dn;
        for (size_t k = n_match; k < specs_.size(); ++k) dn.emplace_back(specs_[k].h.logits, specs_[k].h.boxes);
        for (auto& st : set_batch::stack_by_queries(dn)) plan(std::move(st), true, n_match, dn_);
      }
      for (auto& g : groups_) evaluate(g);

      DFineLoss out;
      std::array<std::vector<torch::Tensor>, 5> parts;
      for (auto& sp : specs_) {
        static const char* kinds[] = {nullptr, "loss_bbox", "loss_giou", "loss_fgl", "loss_ddf"};
        for (int k = 0; k < 5; ++k) {
          if (!sp.val[static_cast<size_t>(k)].defined()) continue;
          out.terms.emplace_back(k == 0 ? "loss_" + cls + sp.suffix : kinds[k] + sp.suffix, sp.val[static_cast<size_t>(k)]);
        }
      }
      for (auto& [k, v] : vectors_) parts[static_cast<size_t>(k)].push_back(v.sum());
      std::array<torch::Tensor, 5> sum;
      torch::Tensor total;
      for (size_t k = 0; k < 5; ++k) {
        for (auto& p : parts[k]) sum[k] = sum[k].defined() ? sum[k] + p : p;
        if (sum[k].defined()) total = total.defined() ? total + sum[k] : sum[k];
      }
      for (auto& s : sum)
        if (!s.defined()) s = torch::zeros({}, total.options());
      out.total = total;
      out.items = torch::stack({sum[0], sum[1], sum[2], sum[3], sum[4]}).detach();
      return out;
    }

   private:
    struct Spec {
      Head h;
      bool agnostic = false;
      std::string suffix;
      bool dn = false;
      std::array<torch::Tensor, 5> val{};  // class, bbox, giou, fgl, ddf (weighted, NaN read as 0)
    };
    // A stack of outputs evaluated together.
    struct Group {
      set_batch::Stack st;         // members: positions in specs_ (after `base`)
      bool dn = false;
      size_t base = 0;
      int64_t n_corner = 0;        // members [0, n_corner) carry corners
      set_batch::Slots cls, box;   // the class loss's pairs (each output's own) and the box terms'
      std::vector<std::vector<int64_t>> ddf;  // members (< n_corner) distilled from one teacher, per teacher
    };

    Spec& spec(const Group& g, size_t k) { return specs_[g.base + g.st.members[k]]; }

    void plan(set_batch::Stack st, bool dn, size_t base, set_batch::Slots own) {
      Group g;
      g.st = std::move(st);
      g.dn = dn;
      g.base = base;
      g.cls = std::move(own);
      g.box = dn ? dn_ : o_.uni_set ? go_ : g.cls;
      for (size_t k = 0; k < g.st.members.size(); ++k)
        if (spec(g, k).h.corners.defined()) {
          if (g.n_corner != static_cast<int64_t>(k))
            throw std::invalid_argument("DFineCriterion: an output with pred_corners follows one without (" + spec(g, k).suffix + ")");
          ++g.n_corner;
        }
      // DDF: the layers with a teacher that is not themselves, grouped by teacher.
      std::vector<size_t> first_of;  // per teacher group: the member whose teacher it is
      for (int64_t k = 0; k < g.n_corner; ++k) {
        const auto& h = spec(g, static_cast<size_t>(k)).h;
        if (!h.teacher_corners.defined() || same_view(h.corners, h.teacher_corners)) continue;
        size_t j = 0;
        while (j < g.ddf.size()) {
          const auto& f = spec(g, first_of[j]).h;
          if (same_view(f.teacher_corners, h.teacher_corners) && same_view(f.teacher_logits, h.teacher_logits)) break;
          ++j;
        }
        if (j == g.ddf.size()) g.ddf.emplace_back(), first_of.push_back(static_cast<size_t>(k));
        g.ddf[j].push_back(k);
      }
      groups_.push_back(std::move(g));
    }

    // Rows `members` of t (dim 0): a narrow when they are consecutive.
    torch::Tensor rows(const torch::Tensor& t, const std::vector<int64_t>& members) const {
      bool consecutive = true;
      for (size_t k = 1; k < members.size(); ++k) consecutive = consecutive && members[k] == members[k - 1] + 1;
      if (consecutive) return t.narrow(0, members.front(), static_cast<int64_t>(members.size()));
      return t.index_select(0, set_batch::long_tensor(members).to(t.device()));
    }

    // A per-member vector of one kind: NaN read as 0, kept for the totals, split into the members' terms.
    void put(const Group& g, int kind, torch::Tensor v, const std::vector<int64_t>& members) {
      v = torch::nan_to_num(v, 0.0);
      vectors_.emplace_back(kind, v);
      auto each = v.unbind(0);
      for (size_t k = 0; k < members.size(); ++k) spec(g, static_cast<size_t>(members[k])).val[static_cast<size_t>(kind)] = each[k];
    }

    void evaluate(const Group& g) {
      const auto& logits = g.st.logits;  // [O, B, Q, C]
      const auto& boxes = g.st.boxes;    // [O, B, Q, 4]
      const int64_t O = logits.size(0), B = logits.size(1), Q = logits.size(2), C = logits.size(3);
      std::vector<int64_t> all(static_cast<size_t>(O));
      for (int64_t k = 0; k < O; ++k) all[static_cast<size_t>(k)] = k;
      const auto& nb_class = g.dn ? dn_boxes_ : num_boxes_;
      const auto& nb_box = g.dn ? dn_boxes_ : o_.uni_set ? num_go_ : num_boxes_;
      const auto flat_boxes = boxes.reshape({-1, 4});

      // Class loss, each output on its own match (unmatched slots write into a dummy row, dropped after).
      {
        const auto cp = set_batch::slot_pairs(g.cls, t_, O, Q);
        auto labels = cp.labels;
        bool agnostic = false;
        for (int64_t k = 0; k < O; ++k) agnostic = agnostic || spec(g, static_cast<size_t>(k)).agnostic;
        if (agnostic) {  // class-agnostic outputs: label 0
          labels = labels.view({O, -1}).clone();
          for (int64_t k = 0; k < O; ++k)
            if (spec(g, static_cast<size_t>(k)).agnostic) labels[k].zero_();
          labels = labels.view({-1});
        }
        torch::Tensor ious;
        {
          torch::NoGradGuard ng;
          auto src = flat_boxes.index_select(0, cp.flat);
          ious = dfine_detail::paired_iou_union(dfine_detail::cxcywh_to_xyxy(src), dfine_detail::cxcywh_to_xyxy(cp.boxes)).first;
        }
        auto target = torch::zeros({O * B * Q + 1, C}, logits.options());
        auto score = torch::zeros({O * B * Q + 1, C}, logits.options());
        target.index_put_({cp.row, labels}, torch::ones_like(ious));
        score.index_put_({cp.row, labels}, ious);
        target = target.narrow(0, 0, O * B * Q).view({O, B, Q, C});
        score = score.narrow(0, 0, O * B * Q).view({O, B, Q, C});
        auto p = torch::sigmoid(logits).detach();
        torch::Tensor weight;
        if (o_.class_loss == DFineClassLoss::vfl) {
          weight = o_.alpha * p.pow(o_.gamma) * (1 - target) + score;
        } else {
          score = score.pow(o_.gamma);
          weight = (o_.mal_alpha ? *o_.mal_alpha : 1.0) * p.pow(o_.gamma) * (1 - target) + target;
        }
        auto l = torch::binary_cross_entropy_with_logits(logits, score, weight, {}, at::Reduction::None);
        if (g.dn) l = l * dn_real_.view({1, 1, Q, 1});  // capacity padding carries no loss
        put(g, 0, l.mean(2).sum({1, 2}) * static_cast<double>(Q) / nb_class * o_.w_class, all);
      }

      // Boxes on the union, the same pairs for every output (denoising, or uni_set false: each output's own
      // match). P = B x K pairs per output, masked.
      const auto bp = set_batch::slot_pairs(g.box, t_, O, Q);
      const int64_t P = bp.flat.size(0) / O;
      const auto maskf = bp.mask.to(logits.scalar_type()).view({O, P});
      auto src = flat_boxes.index_select(0, bp.flat);  // [O * P, 4]
      const auto& tb = bp.boxes;
      auto sx = dfine_detail::cxcywh_to_xyxy(src), tx = dfine_detail::cxcywh_to_xyxy(tb);
      put(g, 1, ((src - tb).abs().sum(1).view({O, P}) * maskf).sum(1) / nb_box * o_.w_bbox, all);
      put(g, 2, ((1 - dfine_detail::paired_giou(sx, tx)).view({O, P}) * maskf).sum(1) / nb_box * o_.w_giou, all);
      if (g.n_corner == 0) return;

      // FGL of the outputs with corners (the first n_corner; their pairs are shared: the union or the
      // denoising pairs).
      const int64_t R = o_.reg_max + 1, Oc = g.n_corner;
      std::vector<torch::Tensor> cl;
      for (int64_t k = 0; k < Oc; ++k) cl.push_back(spec(g, static_cast<size_t>(k)).h.corners);
      const auto corners = set_batch::stack_f32(cl);  // [Oc, B, Q, 4R]
      auto pred = corners.reshape({-1, 4 * R}).index_select(0, bp.flat.narrow(0, 0, Oc * P)).reshape({Oc, P * 4, R});
      auto& cache = g.dn ? fgl_dn_ : fgl_;
      if (!cache) {
        torch::NoGradGuard ng;
        auto ref = spec(g, 0).h.ref_points.to(torch::kFloat32).flatten(0, 1).index_select(0, bp.flat.narrow(0, 0, P)).detach();
        cache = bbox2distance(ref, tx.narrow(0, 0, P), o_.reg_max, in_.reg_scale.to(torch::kFloat32), in_.up.to(torch::kFloat32));
      }
      const auto& [tc, wr, wl] = *cache;
      torch::Tensor ious;  // [Oc, P], 0 at masked slots
      {
        torch::NoGradGuard ng;
        ious = dfine_detail::paired_iou_union(sx.narrow(0, 0, Oc * P), tx.narrow(0, 0, Oc * P)).first.view({Oc, P}) * maskf.narrow(0, 0, Oc);
      }
      auto wt = ious.unsqueeze(-1).expand({Oc, P, 4}).reshape({Oc, P * 4});
      auto left = tc.to(torch::kLong);
      // Cross-entropy at the two bins: -log_softmax at each (one log_softmax for both).
      auto bins = torch::stack({left, left + 1}, -1).unsqueeze(0).expand({Oc, P * 4, 2});
      auto ce = -torch::log_softmax(pred, -1).gather(2, bins);
      auto fgl = (ce.select(2, 0) * wl.reshape({-1}) + ce.select(2, 1) * wr.reshape({-1})) * wt;
      std::vector<int64_t> corner_members(all.begin(), all.begin() + Oc);
      put(g, 3, fgl.sum(1) / nb_box * o_.w_fgl, corner_members);

      // DDF per teacher; a layer that is its own teacher (the last denoising one) adds 0.
      for (int64_t k = 0; k < Oc; ++k) {
        auto& sp = spec(g, static_cast<size_t>(k));
        if (sp.h.teacher_corners.defined() && same_view(sp.h.corners, sp.h.teacher_corners))
          sp.val[4] = torch::zeros({}, logits.options());
      }
      if (g.ddf.empty()) return;
      // The pairs' queries in one image-major [B * Q] row (masked slots: a dummy position B * Q).
      const auto mask0 = bp.mask.narrow(0, 0, P);
      const auto at = torch::where(mask0, bp.flat.narrow(0, 0, P), torch::full_like(bp.flat.narrow(0, 0, P), B * Q));
      const auto pos_rows = 4 * mask0.sum().to(torch::kFloat32);
      const double T = o_.ddf_temperature;
      for (const auto& members : g.ddf) {
        const auto D = static_cast<int64_t>(members.size());
        const auto& teacher = spec(g, static_cast<size_t>(members.front())).h;
        auto pc = rows(corners, members).reshape({D, -1, R});  // [D, B*Q*4, R]
        auto tcn = teacher.teacher_corners.to(torch::kFloat32).reshape({-1, R}).detach();
        auto wloc = std::get<0>(torch::sigmoid(teacher.teacher_logits.to(torch::kFloat32)).max(-1)).flatten().detach();  // [B*Q]
        auto wd = torch::cat({wloc, wloc.new_zeros({1})}).unsqueeze(0).expand({D, B * Q + 1}).contiguous();
        wd = wd.scatter(1, at.unsqueeze(0).expand({D, P}), rows(ious, members)).narrow(1, 0, B * Q);
        auto maskq = wloc.new_zeros({B * Q + 1}).index_fill(0, at, 1.0).narrow(0, 0, B * Q);
        auto w4 = wd.unsqueeze(-1).expand({D, B * Q, 4}).reshape({D, -1});
        auto mask = maskq.unsqueeze(-1).expand({B * Q, 4}).reshape({-1});
        // The rows that count as negatives: every unmatched one, less the denoising capacity padding.
        auto negs = 1 - mask;
        if (g.dn) negs = negs * dn_real_.view({1, Q, 1}).expand({B, Q, 4}).reshape({-1});
        auto target = torch::softmax(tcn / T, 1).unsqueeze(0).expand({D, tcn.size(0), R});
        auto kl = torch::kl_div(torch::log_softmax(pc / T, 2), target, at::Reduction::None).sum(-1);  // [D, B*Q*4]
        auto lml = w4 * (T * T) * kl;
        const auto neg_rows = negs.sum();
        if (!g.dn || !num_pos_.defined()) {
          // The original takes these from the non-denoising outputs and reuses them for the denoising ones.
          const double scale = 8.0 / static_cast<double>(B);
          num_pos_ = (pos_rows * scale).sqrt();
          num_neg_ = (neg_rows * scale).sqrt();
        }
        auto l1 = torch::where(pos_rows > 0, (lml * mask).sum(1) / pos_rows.clamp_min(1), torch::zeros({D}, lml.options()));
        auto l2 = torch::where(neg_rows > 0, (lml * negs).sum(1) / neg_rows.clamp_min(1), torch::zeros({D}, lml.options()));
        put(g, 4, (l1 * num_pos_ + l2 * num_neg_) / (num_pos_ + num_neg_) * o_.w_ddf, members);
      }
    }

    const DFineCriterion& c_;
    const DFineCriterionOptions& o_;
    const DFineOutput& in_;
    const PaddedTargets& t_;
    const torch::Tensor& given_;
    torch::Device dev_{torch::kCPU};
    torch::Tensor num_boxes_, num_go_, dn_boxes_;  // device scalars
    torch::Tensor dn_real_;                         // [T] float: the denoising tokens of real groups
    std::vector<Spec> specs_;
    set_batch::Slots go_, dn_;  // GO-LSD's union, the denoising pairs
    std::vector<Group> groups_;
    std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> fgl_, fgl_dn_;
    torch::Tensor num_pos_, num_neg_;
    std::vector<std::pair<int, torch::Tensor>> vectors_;  // (kind, per-member values)
  };
  DFineCriterionOptions o_;
  int64_t epoch_ = 0;
};

}  // namespace libreyolo::nn::detr
