#pragma once
// Definitions of curves.hpp (core/api.hpp): included by curves.hpp when header-only, compiled once otherwise.
#include <libreyolo/plot/curves.hpp>

namespace libreyolo::plot {

LIBREYOLO_INLINE double box_iou(const DetBox& a, const DetBox& b) {
  const double iw = std::max(0.0, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  const double ih = std::max(0.0, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  const double i = iw * ih;
  const double u = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - i;
  return u > 0 ? i / u : 0;
}

LIBREYOLO_INLINE void ConfusionMatrix::add_detections(const std::vector<DetBox>& dets_in, const std::vector<DetBox>& gt) {
  std::vector<DetBox> dets;
  for (const auto& d : dets_in)
    if (d.score >= conf_) dets.push_back(d);
  struct Pair {
    double iou;
    size_t g, d;
  };
  std::vector<Pair> pairs;
  for (size_t g = 0; g < gt.size(); ++g)
    for (size_t d = 0; d < dets.size(); ++d)
      if (double v = box_iou(gt[g], dets[d]); v > iou_) pairs.push_back({v, g, d});
  std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.iou > b.iou; });
  std::vector<char> gt_used(gt.size()), det_used(dets.size());
  for (const auto& p : pairs) {
    if (gt_used[p.g] || det_used[p.d]) continue;
    gt_used[p.g] = det_used[p.d] = 1;
    at(dets[p.d].cls, gt[p.g].cls) += 1;
  }
  for (size_t g = 0; g < gt.size(); ++g)
    if (!gt_used[g]) at(nc_, gt[g].cls) += 1;
  for (size_t d = 0; d < dets.size(); ++d)
    if (!det_used[d]) at(dets[d].cls, nc_) += 1;
}

LIBREYOLO_INLINE double& ConfusionMatrix::at(int64_t pred, int64_t truth) {
  pred = pred < 0 || pred > nc_ ? nc_ : pred;
  truth = truth < 0 || truth > nc_ ? nc_ : truth;
  return m_[static_cast<size_t>(pred * (nc_ + 1) + truth)];
}

LIBREYOLO_INLINE double ConfusionMatrix::total() const {
  double s = 0;
  for (double v : m_) s += v;
  return s;
}

LIBREYOLO_INLINE void PrCollector::add(const std::vector<DetBox>& dets, const std::vector<DetBox>& gt) {
  std::map<int64_t, std::vector<size_t>> by_cls_gt;
  for (size_t g = 0; g < gt.size(); ++g) by_cls_gt[gt[g].cls].push_back(g), ++n_gt_[gt[g].cls];
  std::vector<size_t> order(dets.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return dets[a].score > dets[b].score; });
  std::vector<char> used(gt.size());
  for (size_t i : order) {
    const auto& d = dets[i];
    double best = 0.5;
    size_t hit = gt.size();
    for (size_t g : by_cls_gt[d.cls])
      if (!used[g])
        if (double v = box_iou(d, gt[g]); v >= best) best = v, hit = g;
    if (hit < gt.size()) used[hit] = 1;
    scored_[d.cls].push_back({d.score, hit < gt.size()});
  }
}

LIBREYOLO_INLINE std::vector<PrCurve> PrCollector::curves() const {
  std::vector<PrCurve> out;
  std::map<int64_t, int> seen;
  for (const auto& [c, n] : n_gt_) seen[c] = 1;
  for (const auto& [c, s] : scored_) seen[c] = 1;
  for (const auto& [c, unused] : seen) {
    (void)unused;
    PrCurve pc;
    pc.cls = c;
    pc.n_gt = n_gt_.count(c) ? n_gt_.at(c) : 0;
    auto s = scored_.count(c) ? scored_.at(c) : std::vector<std::pair<double, bool>>{};
    std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<double> rec, prec;
    double tp = 0, fp = 0;
    for (const auto& [score, ok] : s) {
      (ok ? tp : fp) += 1;
      rec.push_back(pc.n_gt ? tp / double(pc.n_gt) : 0);
      prec.push_back(tp / (tp + fp));
    }
    for (size_t i = prec.size(); i-- > 1;) prec[i - 1] = std::max(prec[i - 1], prec[i]);  // envelope
    for (int r = 0; r <= 100; ++r) {
      const double x = r / 100.0;
      const auto it = std::lower_bound(rec.begin(), rec.end(), x - 1e-12);
      pc.recall.push_back(x);
      pc.precision.push_back(it == rec.end() ? 0.0 : prec[static_cast<size_t>(it - rec.begin())]);
    }
    double ap = 0;
    for (double p : pc.precision) ap += p;
    pc.ap50 = pc.n_gt ? ap / 101.0 : 0;
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace libreyolo::plot
