#pragma once
// Definitions of detection.hpp (core/api.hpp): included by detection.hpp when header-only, compiled once otherwise.
#include <libreyolo/eval/detection.hpp>

namespace libreyolo::eval {

LIBREYOLO_INLINE DetectionMetrics::DetectionMetrics(int64_t max_dets) : max_dets_(max_dets) {
  if (max_dets < 1)
    throw ConfigError("DetectionMetrics: max_dets must be at least 1 (got " + std::to_string(max_dets) + ")");
}

LIBREYOLO_INLINE std::array<double, 2> DetectionMetrics::area_range(int a) {
  constexpr double lo[kAreas] = {0.0, 0.0, 32.0 * 32.0, 96.0 * 96.0};
  constexpr double hi[kAreas] = {1e5 * 1e5, 32.0 * 32.0, 96.0 * 96.0, 1e5 * 1e5};
  return {lo[a], hi[a]};
}

LIBREYOLO_INLINE double DetectionMetrics::coco_iou(const Box& d, const Box& g) {
  const double da = d.w * d.h, ga = g.w * g.h;
  const double w = std::fmin(d.w + d.x, g.w + g.x) - std::fmax(d.x, g.x);
  if (w <= 0) return 0.0;
  const double h = std::fmin(d.h + d.y, g.h + g.y) - std::fmax(d.y, g.y);
  if (h <= 0) return 0.0;
  const double i = w * h;
  return i / (da + ga - i);
}

LIBREYOLO_INLINE void DetectionMetrics::check_shape(const torch::Tensor& t, int64_t cols, const char* what) {
  if (t.defined() && t.numel() > 0 && (t.dim() != 2 || t.size(1) != cols))
    throw DataError(std::string("DetectionMetrics::add: ") + what + " must be [N, " + std::to_string(cols) +
                    "], got " + std::to_string(t.dim()) + "-d [" +
                    [&] {
                      std::string s;
                      for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
                      return s;
                    }() +
                    "]");
}

LIBREYOLO_INLINE void DetectionMetrics::add(const torch::Tensor& pred_in, const torch::Tensor& gt_in) {
  check_shape(pred_in, 6, "pred");
  check_shape(gt_in, 5, "gt");
  auto pred = pred_in.defined() && pred_in.numel() ? pred_in.detach().to(torch::kCPU, torch::kFloat64).contiguous()
                                                   : torch::zeros({0, 6}, torch::kFloat64);
  auto gt = gt_in.defined() && gt_in.numel() ? gt_in.detach().to(torch::kCPU, torch::kFloat64).contiguous()
                                             : torch::zeros({0, 5}, torch::kFloat64);
  auto pa = pred.accessor<double, 2>();
  auto ga = gt.accessor<double, 2>();
  auto class_of = [](double v, const char* what, int64_t row) {
    if (!std::isfinite(v) || v != std::floor(v)) {
      std::ostringstream msg;
      msg << "DetectionMetrics::add: " << what << " row " << row << " has class " << v
          << "; a class must be a whole number";
      throw DataError(msg.str());
    }
    return static_cast<int64_t>(v);
  };
  // Rows of each class, in row order (COCO's _gts / _dts lists per (image, category)).
  std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows;  // class -> (dets, gts)
  for (int64_t i = 0; i < pred.size(0); ++i) rows[class_of(pa[i][5], "pred", i)].first.push_back(i);
  for (int64_t i = 0; i < gt.size(0); ++i) rows[class_of(ga[i][0], "gt", i)].second.push_back(i);
  ++images_;

  for (auto& [cls, r] : rows) {
    auto& [det_rows, gt_rows] = r;
    std::stable_sort(det_rows.begin(), det_rows.end(),
                     [&](int64_t a, int64_t b) { return score_before(pa[a][4], pa[b][4]); });
    if (static_cast<int64_t>(det_rows.size()) > max_dets_) det_rows.resize(static_cast<size_t>(max_dets_));
    std::vector<Box> dt, g;
    std::vector<double> scores;
    for (auto i : det_rows) {
      dt.push_back({pa[i][0], pa[i][1], pa[i][2] - pa[i][0], pa[i][3] - pa[i][1]});
      scores.push_back(pa[i][4]);
    }
    for (auto i : gt_rows) g.push_back({ga[i][1], ga[i][2], ga[i][3] - ga[i][1], ga[i][4] - ga[i][2]});
    evaluate_image(dt, scores, g, classes_[cls]);
  }
}

LIBREYOLO_INLINE void DetectionMetrics::evaluate_image(const std::vector<Box>& dt, const std::vector<double>& scores,
                                                       const std::vector<Box>& gt, ClassRecord& rec) const {
  const size_t D = dt.size(), G = gt.size();
  std::vector<double> ious(D * G);
  for (size_t d = 0; d < D; ++d)
    for (size_t g = 0; g < G; ++g) ious[d * G + g] = coco_iou(dt[d], gt[g]);
  const size_t base = rec.dets.size();
  for (size_t d = 0; d < D; ++d) rec.dets.push_back({scores[d], static_cast<int64_t>(d), {}, {}});

  std::vector<size_t> order(G);  // gt indices, ignored ones last
  std::vector<char> gt_ignored(G), taken(G);
  for (int a = 0; a < kAreas; ++a) {
    const auto [lo, hi] = area_range(a);
    auto outside = [&](const Box& b) {
      const double area = b.w * b.h;
      return area < lo || area > hi;
    };
    for (size_t g = 0; g < G; ++g) gt_ignored[g] = outside(gt[g]);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_partition(order.begin(), order.end(), [&](size_t g) { return !gt_ignored[g]; });
    rec.npig[a] += static_cast<int64_t>(std::count(gt_ignored.begin(), gt_ignored.end(), 0));
    for (int t = 0; t < kThresholds; ++t) {
      const uint16_t bit = static_cast<uint16_t>(1u << t);
      std::fill(taken.begin(), taken.end(), 0);
      for (size_t d = 0; d < D; ++d) {
        auto& det = rec.dets[base + d];
        double best = std::min(iou_threshold(t), 1 - 1e-10);
        int64_t m = -1;  // position in `order` of the best gt so far
        for (size_t k = 0; k < G; ++k) {
          if (taken[k]) continue;
          if (m > -1 && !gt_ignored[order[static_cast<size_t>(m)]] && gt_ignored[order[k]]) break;
          const double iou = ious[d * G + order[k]];
          if (iou < best) continue;
          best = iou;
          m = static_cast<int64_t>(k);
        }
        if (m >= 0) {
          taken[static_cast<size_t>(m)] = 1;
          det.matched[a] |= bit;
          if (gt_ignored[order[static_cast<size_t>(m)]]) det.ignored[a] |= bit;
        } else if (outside(dt[d])) {
          det.ignored[a] |= bit;
        }
      }
    }
  }
}

LIBREYOLO_INLINE double DetectionMetrics::accumulate(const std::vector<const Detection*>& sorted, int area, int t, int64_t npig,
                                                     double* q) {
  const uint16_t bit = static_cast<uint16_t>(1u << t);
  const size_t nd = sorted.size();
  const double n = static_cast<double>(npig);
  double tp = 0, fp = 0;
  if (!q) {
    for (const auto* d : sorted)
      if (!(d->ignored[area] & bit) && (d->matched[area] & bit)) tp += 1;
    return nd ? tp / n : 0.0;
  }
  std::vector<double> rc(nd), pr(nd);
  for (size_t i = 0; i < nd; ++i) {
    const auto* d = sorted[i];
    if (!(d->ignored[area] & bit)) ((d->matched[area] & bit) ? tp : fp) += 1;
    rc[i] = tp / n;
    pr[i] = tp / (fp + tp + std::numeric_limits<double>::epsilon());
  }
  for (size_t i = nd; i-- > 1;)
    if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
  std::fill(q, q + kRecallPoints, 0.0);
  size_t pi = 0;
  for (int r = 0; r < kRecallPoints; ++r) {
    const double thr = recall_threshold(r);
    pi = static_cast<size_t>(std::lower_bound(rc.begin() + static_cast<std::ptrdiff_t>(pi), rc.end(), thr) - rc.begin());
    if (pi >= nd) break;
    q[r] = pr[pi];
  }
  return nd ? rc.back() : 0.0;
}

LIBREYOLO_INLINE DetectionMetrics::Result DetectionMetrics::compute() const {
  Result res;
  constexpr int grid = 1001;
  std::vector<double> f1_sum(grid, 0), p_sum(grid, 0), r_sum(grid, 0);
  // Sums of the entries > -1 and their counts, per statistic.
  std::array<double, kAreas> ap_sum{}, ar_sum{};
  std::array<int64_t, kAreas> n_cat{};
  double ap50_sum = 0, ap75_sum = 0, ar1_sum = 0, ar10_sum = 0;
  std::array<double, kRecallPoints> q{};
  const int t75 = 5;  // iou_threshold(5) == 0.75 exactly, as COCO's np.where(iouThr == iouThrs) needs
  const int64_t cut1 = std::min<int64_t>(1, max_dets_), cut10 = std::min<int64_t>(10, max_dets_);

  for (const auto& [cls, rec] : classes_) {
    if (rec.npig[kAll] == 0) continue;  // no gt of this class: -1 everywhere, out of every mean
    std::vector<const Detection*> sorted(rec.dets.size());
    for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = &rec.dets[i];
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const Detection* a, const Detection* b) { return score_before(a->score, b->score); });
    double cls_ap = 0, cls_ap50 = 0;
    for (int a = 0; a < kAreas; ++a) {
      if (rec.npig[a] == 0) continue;
      ++n_cat[a];
      for (int t = 0; t < kThresholds; ++t) {
        ar_sum[a] += accumulate(sorted, a, t, rec.npig[a], q.data());
        const double s = std::accumulate(q.begin(), q.end(), 0.0);
        ap_sum[a] += s;
        if (a == kAll) {
          cls_ap += s;
          if (t == 0) cls_ap50 = s;
          if (t == t75) ap75_sum += s;
        }
      }
    }
    ap50_sum += cls_ap50;
    res.classes.push_back(cls);
    res.ap_per_class.push_back(cls_ap / (kThresholds * kRecallPoints));
    res.ap50_per_class.push_back(cls_ap50 / kRecallPoints);
    // AR@1 and AR@10: each image's first 1 / 10 kept detections (a filter of the sorted list keeps
    // the stable order of the shorter concatenation).
    for (auto [cut, sum] : {std::pair<int64_t, double*>{cut1, &ar1_sum}, {cut10, &ar10_sum}}) {
      std::vector<const Detection*> first;
      for (const auto* d : sorted)
        if (d->rank < cut) first.push_back(d);
      for (int t = 0; t < kThresholds; ++t) *sum += accumulate(first, kAll, t, rec.npig[kAll], nullptr);
    }
    // Ultralytics-style P / R / F1 at IoU 0.5 for detections scoring >= each grid confidence.
    std::vector<const Detection*> counted;
    for (const auto* d : sorted)
      if (!(d->ignored[kAll] & 1u)) counted.push_back(d);
    size_t kept = 0;
    double tp = 0;
    const auto num_gt = static_cast<double>(rec.npig[kAll]);
    for (int g = grid - 1; g >= 0; --g) {
      const double conf = g / static_cast<double>(grid - 1);
      while (kept < counted.size() && counted[kept]->score >= conf) tp += (counted[kept++]->matched[kAll] & 1u) ? 1 : 0;
      const double p = kept ? tp / static_cast<double>(kept) : 0.0;
      const double r = tp / num_gt;
      p_sum[g] += p;
      r_sum[g] += r;
      f1_sum[g] += (p + r) > 0 ? 2 * p * r / (p + r) : 0.0;
    }
  }
  const auto mean = [](double sum, int64_t count, int per_category) {
    return count ? sum / (static_cast<double>(count) * per_category) : -1.0;
  };
  constexpr int TR = kThresholds * kRecallPoints;
  res.map50_95 = mean(ap_sum[kAll], n_cat[kAll], TR);
  res.map50 = mean(ap50_sum, n_cat[kAll], kRecallPoints);
  res.map75 = mean(ap75_sum, n_cat[kAll], kRecallPoints);
  res.ap_small = mean(ap_sum[kSmall], n_cat[kSmall], TR);
  res.ap_medium = mean(ap_sum[kMedium], n_cat[kMedium], TR);
  res.ap_large = mean(ap_sum[kLarge], n_cat[kLarge], TR);
  res.ar1 = mean(ar1_sum, n_cat[kAll], kThresholds);
  res.ar10 = mean(ar10_sum, n_cat[kAll], kThresholds);
  res.ar100 = mean(ar_sum[kAll], n_cat[kAll], kThresholds);
  res.ar_small = mean(ar_sum[kSmall], n_cat[kSmall], kThresholds);
  res.ar_medium = mean(ar_sum[kMedium], n_cat[kMedium], kThresholds);
  res.ar_large = mean(ar_sum[kLarge], n_cat[kLarge], kThresholds);
  const auto n = static_cast<double>(res.classes.size());
  if (n == 0) return res;
  const auto best = std::max_element(f1_sum.begin(), f1_sum.end()) - f1_sum.begin();
  res.precision = p_sum[best] / n;
  res.recall = r_sum[best] / n;
  return res;
}

}  // namespace libreyolo::eval
