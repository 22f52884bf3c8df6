#pragma once
// The D-FINE / DEIM set loss (the original's DFINECriterion and DEIMCriterion with their
// HungarianMatcher, models/{dfine,deim}/loss.py + matcher.py), term for term:
//
//   matching  per output and image, the one-to-one assignment minimising 5 * L1 + 2 * focal class
//             cost (alpha 0.25, gamma 2) + 2 * (-GIoU) (NaN costs read as 1); every output's cost matrix
//             goes to the host in one copy (assign/hungarian.hpp solves them).
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
// loss needs no synchronisation: counts are known on the host, masks are multiplications.
#include <libreyolo/assign/hungarian.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/fdr.hpp>
#include <libreyolo/nn/detr/layers.hpp>

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
using DFineMatch = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

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
  auto cx = b.select(-1, 0), cy = b.select(-1, 1), w = b.select(-1, 2).clamp_min(0), h = b.select(-1, 3).clamp_min(0);
  return torch::stack({cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h}, -1);
}
inline torch::Tensor area(const torch::Tensor& a) { return (a.select(-1, 2) - a.select(-1, 0)) * (a.select(-1, 3) - a.select(-1, 1)); }
inline torch::Tensor pairwise_giou(const torch::Tensor& a, const torch::Tensor& b) {
  auto area1 = area(a), area2 = area(b);
  auto lt = torch::max(a.unsqueeze(1).narrow(2, 0, 2), b.narrow(1, 0, 2));
  auto rb = torch::min(a.unsqueeze(1).narrow(2, 2, 2), b.narrow(1, 2, 2));
  auto wh = (rb - lt).clamp_min(0);
  auto inter = wh.select(2, 0) * wh.select(2, 1);
  auto uni = area1.unsqueeze(1) + area2 - inter;
  auto iou = inter / uni;
  auto lt2 = torch::min(a.unsqueeze(1).narrow(2, 0, 2), b.narrow(1, 0, 2));
  auto rb2 = torch::max(a.unsqueeze(1).narrow(2, 2, 2), b.narrow(1, 2, 2));
  auto wh2 = (rb2 - lt2).clamp_min(0);
  auto encl = wh2.select(2, 0) * wh2.select(2, 1);
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
  explicit DFineCriterion(DFineCriterionOptions o = {}) : o_(std::move(o)) {}

  // The matching cost [B, Q, T] of one output against the batch's concatenated targets.
  torch::Tensor cost_matrix(const torch::Tensor& logits, const torch::Tensor& boxes, const torch::Tensor& tgt_ids,
                            const torch::Tensor& tgt_boxes) const {
    torch::NoGradGuard ng;
    const int64_t B = logits.size(0), Q = logits.size(1);
    auto prob = torch::sigmoid(logits.flatten(0, 1)).index_select(1, tgt_ids);
    auto neg = (1 - o_.match_alpha) * prob.pow(o_.match_gamma) * (-(1 - prob + 1e-8).log());
    auto pos = o_.match_alpha * (1 - prob).pow(o_.match_gamma) * (-(prob + 1e-8).log());
    auto out_bbox = boxes.flatten(0, 1);
    auto cost_bbox = torch::cdist(out_bbox, tgt_boxes, 1);
    auto cost_giou = -dfine_detail::pairwise_giou(dfine_detail::cxcywh_to_xyxy(out_bbox), dfine_detail::cxcywh_to_xyxy(tgt_boxes));
    auto c = o_.cost_bbox * cost_bbox + o_.cost_class * (pos - neg) + o_.cost_giou * cost_giou;
    return torch::nan_to_num(c, 1.0).view({B, Q, -1});
  }

  // Hungarian matching of several (logits, boxes) outputs (one device-to-host copy for all).
  std::vector<DFineMatch> match(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outputs,
                                const std::vector<DetrTarget>& targets) const {
    std::vector<int64_t> sizes;
    int64_t T = 0;
    for (auto& t : targets) sizes.push_back(t.labels.size(0)), T += t.labels.size(0);
    const auto B = static_cast<int64_t>(targets.size());
    std::vector<DFineMatch> all(outputs.size());
    if (T == 0) {
      for (auto& m : all)
        for (int64_t i = 0; i < B; ++i) m.emplace_back(torch::zeros({0}, torch::kLong), torch::zeros({0}, torch::kLong));
      return all;
    }
    std::vector<torch::Tensor> ids, bx;
    for (auto& t : targets) ids.push_back(t.labels), bx.push_back(t.boxes);
    auto tgt_ids = torch::cat(ids), tgt_boxes = torch::cat(bx).to(torch::kFloat32);
    std::vector<torch::Tensor> flat;
    std::vector<int64_t> qs;
    for (auto& [l, b] : outputs) {
      auto c = cost_matrix(l.to(torch::kFloat32), b.to(torch::kFloat32), tgt_ids, tgt_boxes);
      qs.push_back(c.size(1));
      flat.push_back(c.flatten());
    }
    auto host = torch::cat(flat).to(torch::kCPU).to(torch::kFloat64).contiguous();
    const double* base = host.data_ptr<double>();
    std::vector<double> block;
    for (size_t o = 0; o < outputs.size(); ++o) {
      const int64_t Q = qs[o];
      int64_t col0 = 0;
      for (int64_t i = 0; i < B; ++i) {
        const int64_t n = sizes[static_cast<size_t>(i)];
        block.resize(static_cast<size_t>(Q * n));
        const double* img = base + i * Q * T;
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t j = 0; j < n; ++j) block[static_cast<size_t>(q * n + j)] = img[q * T + col0 + j];
        auto a = assign::linear_sum_assignment(block.data(), Q, n);
        all[o].emplace_back(torch::tensor(a.rows, torch::kLong), torch::tensor(a.cols, torch::kLong));
        col0 += n;
      }
      base += B * Q * T;
    }
    return all;
  }

  // GO-LSD's union (the original's _get_go_indices): per image the pairs of all matches, each distinct
  // pair counted, sorted by count (descending, torch's sort on the host as the original), the first pair
  // of every query kept, in that order.
  static DFineMatch go_indices(const std::vector<const DFineMatch*>& matches) {
    const size_t B = matches.front()->size();
    DFineMatch out;
    for (size_t i = 0; i < B; ++i) {
      std::vector<torch::Tensor> rows, cols;
      for (const auto* m : matches) rows.push_back((*m)[i].first), cols.push_back((*m)[i].second);
      auto ind = torch::stack({torch::cat(rows), torch::cat(cols)}, 1);  // [K, 2]
      std::vector<int64_t> fr, fc;
      if (ind.size(0) > 0) {
        auto [uniq, inverse, counts] = torch::unique_dim(ind, 0, /*sorted=*/true, /*return_inverse=*/false, /*return_counts=*/true);
        auto order = torch::argsort(counts, 0, /*descending=*/true);
        auto sorted = uniq.index_select(0, order).contiguous();
        const int64_t* p = sorted.data_ptr<int64_t>();
        std::map<int64_t, bool> seen;
        for (int64_t k = 0; k < sorted.size(0); ++k) {
          if (seen.count(p[2 * k])) continue;
          seen[p[2 * k]] = true;
          fr.push_back(p[2 * k]);
          fc.push_back(p[2 * k + 1]);
        }
      }
      out.emplace_back(torch::tensor(fr, torch::kLong), torch::tensor(fc, torch::kLong));
    }
    return out;
  }

  // The denoising queries' indices: image i's positives against its targets tiled num_group times.
  static DFineMatch denoising_indices(const DenoisingMeta& meta, const std::vector<DetrTarget>& targets) {
    DFineMatch out;
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t n = targets[i].labels.size(0);
      if (n == 0) {
        out.emplace_back(torch::zeros({0}, torch::kLong), torch::zeros({0}, torch::kLong));
        continue;
      }
      out.emplace_back(meta.positive_idx[i].to(torch::kCPU), torch::arange(n, torch::kLong).repeat({meta.num_group}));
    }
    return out;
  }

  // The loss of the decoder's training output (nn/detr/dfine_output.hpp) for the batch's targets.
  DFineLoss operator()(const DFineOutput& in, const std::vector<DetrTarget>& targets) const {
    Run r(*this, in, targets);
    return r.run();
  }

  const DFineCriterionOptions& options() const { return o_; }

 private:
  // The matched pairs of one index set, resolved on the device for queries of one count.
  struct Resolved {
    torch::Tensor flat;           // [N] image * Q + query
    torch::Tensor tidx;           // [N] the matched targets' indices in the batch's concatenated targets
    torch::Tensor boxes, labels;  // [N, 4], [N] the matched targets
    int64_t n = 0;
  };
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

  class Run {
   public:
    Run(const DFineCriterion& c, const DFineOutput& in, const std::vector<DetrTarget>& targets)
        : c_(c), o_(c.o_), in_(in), targets_(targets) {}

    DFineLoss run() {
      const auto& t = targets_;
      dev_ = in_.pred_logits.device();
      int64_t nb = 0;
      for (auto& x : t) nb += x.labels.size(0);
      num_boxes_ = std::max<double>(1.0, static_cast<double>(nb));

      const Head main{in_.pred_logits, in_.pred_boxes, in_.pred_corners, in_.ref_points, {}, {}};
      // Matches: main, aux..., pre, enc... (the original's order).
      std::vector<std::pair<torch::Tensor, torch::Tensor>> outs{{in_.pred_logits, in_.pred_boxes}};
      for (auto& a : in_.aux_outputs) outs.emplace_back(a.pred_logits, a.pred_boxes);
      outs.emplace_back(in_.pre_outputs.pred_logits, in_.pre_outputs.pred_boxes);
      // One matching call (one device-to-host copy); the original matches the encoder outputs against
      // the unchanged targets too.
      const size_t n_dec = outs.size();
      for (auto& a : in_.enc_aux_outputs) outs.emplace_back(a.pred_logits, a.pred_boxes);
      auto m = c_.match(outs, t);
      std::vector<DFineMatch> m_enc(std::make_move_iterator(m.begin() + static_cast<std::ptrdiff_t>(n_dec)),
                                    std::make_move_iterator(m.end()));
      m.resize(n_dec);
      std::vector<const DFineMatch*> all;
      for (auto& x : m) all.push_back(&x);
      for (auto& x : m_enc) all.push_back(&x);
      go_ = go_indices(all);
      int64_t ng = 0;
      for (auto& [s, _] : go_) ng += s.size(0);
      num_go_ = std::max<double>(1.0, static_cast<double>(ng));

      // The device side: the targets concatenated, every index set's indices in one copy.
      std::vector<torch::Tensor> tb, tl;
      for (auto& x : t) tb.push_back(x.boxes), tl.push_back(x.labels);
      all_boxes_ = torch::cat(tb).to(dev_).to(torch::kFloat32);
      all_labels_ = torch::cat(tl).to(dev_);
      const bool has_dn = in_.dn_meta && !in_.dn_outputs.empty() && in_.dn_meta->num_group > 0;
      std::vector<std::pair<const DFineMatch*, int64_t>> sets{{&go_, in_.pred_logits.size(1)}};
      for (size_t o = 0; o < m.size(); ++o) sets.emplace_back(&m[o], outs[o].first.size(1));
      for (size_t o = 0; o < m_enc.size(); ++o) sets.emplace_back(&m_enc[o], outs[n_dec + o].first.size(1));
      for (auto& e : in_.enc_aux_outputs)
        if (e.pred_logits.size(1) != in_.pred_logits.size(1)) sets.emplace_back(&go_, e.pred_logits.size(1));
      if (has_dn) {
        dn_idx_ = denoising_indices(*in_.dn_meta, t);
        sets.emplace_back(&dn_idx_, in_.dn_outputs.front().pred_logits.size(1));
      }
      prefetch(sets);

      // Main output: class on its own match, boxes and FGL on the union (no teacher: no DDF).
      head(main, false, m[0], "", false);
      for (size_t i = 0; i < in_.aux_outputs.size(); ++i) head(Head::of(in_.aux_outputs[i]), false, m[i + 1], "_aux_" + std::to_string(i), false);
      head(Head::of(in_.pre_outputs), false, m[in_.aux_outputs.size() + 1], "_pre", false);
      for (size_t i = 0; i < in_.enc_aux_outputs.size(); ++i)
        head(Head::of(in_.enc_aux_outputs[i]), in_.class_agnostic, m_enc[i], "_enc_" + std::to_string(i), false);
      if (has_dn) {
        const double dn_boxes = std::max(1.0, num_boxes_ * static_cast<double>(in_.dn_meta->num_group));
        for (size_t i = 0; i < in_.dn_outputs.size(); ++i) head(Head::of(in_.dn_outputs[i]), false, dn_idx_, "_dn_" + std::to_string(i), true, dn_boxes);
        if (in_.dn_pre_outputs.defined()) head(Head::of(in_.dn_pre_outputs), false, dn_idx_, "_dn_pre", true, dn_boxes);
      }

      DFineLoss out;
      std::array<torch::Tensor, 5> sum;
      torch::Tensor total;
      for (auto& [name, v] : terms_) {
        auto x = torch::nan_to_num(v, 0.0);
        total = total.defined() ? total + x : x;
        const int k = name.rfind("loss_bbox", 0) == 0 ? 1 : name.rfind("loss_giou", 0) == 0 ? 2
                    : name.rfind("loss_fgl", 0) == 0  ? 3 : name.rfind("loss_ddf", 0) == 0  ? 4 : 0;
        sum[k] = sum[k].defined() ? sum[k] + x : x;
        out.terms.emplace_back(name, x);
      }
      for (auto& s : sum)
        if (!s.defined()) s = torch::zeros({}, total.options());
      out.total = total;
      out.items = torch::stack({sum[0], sum[1], sum[2], sum[3], sum[4]}).detach();
      return out;
    }

   private:
    // One output's terms: the class loss on its own match `own`, boxes and local losses on the union
    // (every output but the denoising ones, whose terms all use `own`, normalised by dn_boxes).
    // h.teacher_*: the output whose distributions DDF distils into this one (undefined: no DDF).
    void head(const Head& h, bool agnostic, const DFineMatch& own, const std::string& suffix, bool dn, double dn_boxes = 1) {
      auto logits = h.logits.to(torch::kFloat32), boxes = h.boxes.to(torch::kFloat32);
      const int64_t Q = logits.size(1);
      const DFineMatch& box_idx = dn ? own : go_;
      const double nb_class = dn ? dn_boxes : num_boxes_, nb_box = dn ? dn_boxes : num_go_;
      const Resolved& rc = resolve(own, Q);
      const Resolved& rb = resolve(box_idx, Q);
      const auto labels = agnostic ? torch::zeros_like(rc.labels) : rc.labels;
      add("loss_" + std::string(o_.class_loss == DFineClassLoss::vfl ? "vfl" : "mal") + suffix,
          class_loss(logits, boxes, rc, labels, nb_class) * o_.w_class);
      auto src = boxes.flatten(0, 1).index_select(0, rb.flat);
      auto sx = dfine_detail::cxcywh_to_xyxy(src), tx = dfine_detail::cxcywh_to_xyxy(rb.boxes);
      add("loss_bbox" + suffix, (src - rb.boxes).abs().sum() / nb_box * o_.w_bbox);
      add("loss_giou" + suffix, (1 - dfine_detail::paired_giou(sx, tx)).sum() / nb_box * o_.w_giou);
      if (!h.corners.defined()) return;
      // FGL.
      const int64_t R = o_.reg_max + 1;
      auto corners = h.corners.to(torch::kFloat32);
      auto pred = corners.flatten(0, 1).index_select(0, rb.flat).reshape({-1, R});
      auto& cache = dn ? fgl_dn_ : fgl_;
      if (!cache) {
        torch::NoGradGuard ng;
        auto ref = h.ref_points.to(torch::kFloat32).flatten(0, 1).index_select(0, rb.flat).detach();
        cache = bbox2distance(ref, tx, o_.reg_max, in_.reg_scale.to(torch::kFloat32), in_.up.to(torch::kFloat32));
      }
      const auto& [tc, wr, wl] = *cache;
      auto ious = dfine_detail::paired_iou_union(sx, tx).first;
      auto wt = ious.unsqueeze(-1).repeat({1, 4}).reshape({-1}).detach();
      auto left = tc.to(torch::kLong), right = left + 1;
      auto ce = [&](const torch::Tensor& lab) {
        return torch::nn::functional::cross_entropy(pred, lab, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      };
      auto fgl = (ce(left) * wl.reshape({-1}) + ce(right) * wr.reshape({-1})) * wt;
      add("loss_fgl" + suffix, fgl.sum() / nb_box * o_.w_fgl);
      if (!h.teacher_corners.defined()) return;
      // DDF.
      if (same_view(h.corners, h.teacher_corners)) {
        add("loss_ddf" + suffix, corners.sum() * 0 * o_.w_ddf);
        return;
      }
      const double T = o_.ddf_temperature;
      auto pc = corners.reshape({-1, R});
      auto tcn = h.teacher_corners.to(torch::kFloat32).reshape({-1, R}).detach();
      auto wloc = std::get<0>(torch::sigmoid(h.teacher_logits.to(torch::kFloat32)).max(-1)).flatten().detach();  // [B*Q]
      auto maskq = torch::zeros({wloc.size(0)}, wloc.options());
      if (rb.n > 0) {
        wloc = wloc.index_put({rb.flat}, ious.detach());
        maskq = maskq.index_put({rb.flat}, torch::ones({rb.n}, wloc.options()));
      }
      wloc = wloc.unsqueeze(-1).repeat({1, 4}).reshape({-1});
      auto mask = maskq.unsqueeze(-1).repeat({1, 4}).reshape({-1});
      auto kl = torch::kl_div(torch::log_softmax(pc / T, 1), torch::softmax(tcn / T, 1), at::Reduction::None).sum(-1);
      auto lml = wloc * (T * T) * kl;
      const int64_t total_rows = pc.size(0), pos_rows = 4 * rb.n, neg_rows = total_rows - pos_rows;
      if (!dn || num_pos_ < 0) {
        // The original takes these from the non-denoising outputs and reuses them for the denoising ones.
        const double scale = 8.0 / static_cast<double>(boxes.size(0));
        num_pos_ = std::sqrt(static_cast<double>(pos_rows) * scale);
        num_neg_ = std::sqrt(static_cast<double>(neg_rows) * scale);
      }
      auto l1 = pos_rows > 0 ? (lml * mask).sum() / static_cast<double>(pos_rows) : torch::zeros({}, lml.options());
      auto l2 = neg_rows > 0 ? (lml * (1 - mask)).sum() / static_cast<double>(neg_rows) : torch::zeros({}, lml.options());
      add("loss_ddf" + suffix, (l1 * num_pos_ + l2 * num_neg_) / (num_pos_ + num_neg_) * o_.w_ddf);
    }

    torch::Tensor class_loss(const torch::Tensor& logits, const torch::Tensor& boxes, const Resolved& r, const torch::Tensor& labels,
                             double nb) const {
      const int64_t B = logits.size(0), Q = logits.size(1), C = logits.size(2);
      torch::Tensor ious;
      {
        torch::NoGradGuard ng;
        auto src = boxes.flatten(0, 1).index_select(0, r.flat);
        ious = dfine_detail::paired_iou_union(dfine_detail::cxcywh_to_xyxy(src), dfine_detail::cxcywh_to_xyxy(r.boxes)).first.detach();
      }
      auto target = torch::zeros({B * Q, C}, logits.options());
      auto score = torch::zeros({B * Q, C}, logits.options());
      if (r.n > 0) {
        target.index_put_({r.flat, labels}, torch::ones_like(ious));
        score.index_put_({r.flat, labels}, ious);
      }
      target = target.view({B, Q, C});
      score = score.view({B, Q, C});
      auto p = torch::sigmoid(logits).detach();
      torch::Tensor weight;
      if (o_.class_loss == DFineClassLoss::vfl) {
        weight = o_.alpha * p.pow(o_.gamma) * (1 - target) + score;
      } else {
        score = score.pow(o_.gamma);
        weight = (o_.mal_alpha ? *o_.mal_alpha : 1.0) * p.pow(o_.gamma) * (1 - target) + target;
      }
      auto l = torch::binary_cross_entropy_with_logits(logits, score, weight, {}, at::Reduction::None);
      return l.mean(1).sum() * (static_cast<double>(Q) / nb);
    }

    // Every index set's device indices in one host-to-device copy (pinned, asynchronous on CUDA): the
    // loss kernels then run without waiting on the host.
    void prefetch(const std::vector<std::pair<const DFineMatch*, int64_t>>& sets) {
      std::vector<int64_t> offsets{0};
      for (auto& x : targets_) offsets.push_back(offsets.back() + x.labels.size(0));
      std::vector<int64_t> host;
      std::vector<int64_t> counts;
      for (auto& [idx, Q] : sets) {
        int64_t n = 0;
        for (size_t i = 0; i < idx->size(); ++i) {
          auto src = (*idx)[i].first.contiguous();
          const int64_t* p = src.data_ptr<int64_t>();
          for (int64_t k = 0; k < src.numel(); ++k) host.push_back(p[k] + static_cast<int64_t>(i) * Q);
          n += src.numel();
        }
        for (size_t i = 0; i < idx->size(); ++i) {
          auto tgt = (*idx)[i].second.contiguous();
          const int64_t* p = tgt.data_ptr<int64_t>();
          for (int64_t k = 0; k < tgt.numel(); ++k) host.push_back(p[k] + offsets[i]);
        }
        counts.push_back(n);
      }
      auto cpu = torch::tensor(host, torch::kLong);
      if (dev_.is_cuda()) cpu = cpu.pin_memory();
      auto d = cpu.to(dev_, /*non_blocking=*/true);
      int64_t at = 0;
      for (size_t s = 0; s < sets.size(); ++s) {
        Resolved r;
        r.n = counts[s];
        r.flat = d.narrow(0, at, r.n);
        r.tidx = d.narrow(0, at + r.n, r.n);
        at += 2 * r.n;
        r.boxes = all_boxes_.index_select(0, r.tidx);
        r.labels = all_labels_.index_select(0, r.tidx);
        resolved_.emplace_back(std::make_pair(static_cast<const void*>(sets[s].first), sets[s].second), std::move(r));
      }
    }

    const Resolved& resolve(const DFineMatch& idx, int64_t Q) {
      const auto key = std::make_pair(static_cast<const void*>(&idx), Q);
      for (int pass = 0; pass < 2; ++pass) {
        for (auto& [k, v] : resolved_)
          if (k == key) return v;
        prefetch({{&idx, Q}});
      }
      throw std::logic_error("DFineCriterion: an index set was not resolved");
    }

    void add(std::string name, torch::Tensor v) { terms_.emplace_back(std::move(name), std::move(v)); }

    const DFineCriterion& c_;
    const DFineCriterionOptions& o_;
    const DFineOutput& in_;
    const std::vector<DetrTarget>& targets_;
    torch::Device dev_{torch::kCPU};
    double num_boxes_ = 1, num_go_ = 1;
    DFineMatch go_, dn_idx_;
    std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> fgl_, fgl_dn_;
    double num_pos_ = -1, num_neg_ = -1;
    std::deque<std::pair<std::pair<const void*, int64_t>, Resolved>> resolved_;  // deque: references stay valid
    torch::Tensor all_boxes_, all_labels_;  // the batch's targets concatenated, on the device
    std::vector<std::pair<std::string, torch::Tensor>> terms_;
  };

  DFineCriterionOptions o_;
};

}  // namespace libreyolo::nn::detr
