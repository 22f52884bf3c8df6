#pragma once
// Detection metrics computed the way pycocotools' COCOeval (iouType 'bbox', default Params) computes
// them: evaluate() -> evaluateImg() per (image, category, area range), accumulate(), summarize().
//
// What is reproduced, step by step (the names are cocoeval.py's):
// - Images are numbered in the order add() is called; that order plays the role of COCO's sorted
//   imgIds. Categories are the classes that have ground truth somewhere (COCO's catIds are the
//   dataset's classes; one without any gt gives -1 everywhere and drops out of every mean, so
//   detections of a class without gt change nothing).
// - Per (image, category): detections stably sorted by score, best first (np.argsort(-score,
//   kind='mergesort'): ties keep their row order, NaN scores go last) and only the first max_dets
//   kept (computeIoU and evaluateImg both cut at maxDets[-1]). Ground truths keep their row order,
//   the ones ignored for the area range moved last (stable).
// - Boxes become COCO (x, y, w, h) with w = x2 - x1, h = y2 - y1 (no +1), in double, and IoU is
//   maskApi.c's bbIou formula. Areas are w * h for detections (loadRes) and for ground truths too:
//   our labels have no segmentation area, so the box area in the evaluated pixel space stands in
//   for the annotation's 'area' field. No gt is a crowd (iscrowd = 0, so no 'ignore' flag either).
// - Area ranges all [0, 1e5²], small [0, 32²], medium [32², 96²], large [96², 1e5²], bounds
//   included (a gt or detection of area exactly 32² belongs to both small and medium). A gt outside
//   the range is ignored; a detection left unmatched whose area is outside the range is ignored.
// - Matching at each IoU threshold (np.linspace(.5, .95, 10): t-th value t * ((0.95 - 0.5) / 9) +
//   0.5, the last exactly 0.95): detections in score order; each takes, among the gts not yet
//   matched at that threshold, the one of highest IoU >= min(t, 1 - 1e-10), a later gt winning a tie
//   (cocoeval compares with '<'); once it holds a non-ignored gt it stops at the first ignored one.
//   A detection matched to an ignored gt is ignored.
// - accumulate: per category and area range, the kept detections of every image concatenated in
//   image order, stably sorted by score; cumulative TP / FP over the non-ignored ones (ignored ones
//   keep their place but count as neither); recall = tp / npig, precision = tp / (tp + fp + 2^-52);
//   the precision envelope made non-increasing from the end and read at recThrs (np.linspace(0, 1,
//   101): r * 0.01, the last exactly 1) at searchsorted(recall, recThr, 'left'); recall thresholds
//   past the last recall stay 0. A (category, area range) with no non-ignored gt (npig == 0) is -1
//   and left out of the means; a category with gts and no detections scores 0.
//   The maxDets 1 and 10 columns reuse the same per-image matching and take each image's first 1 or
//   10 kept detections (at most max_dets).
// - summarize: each statistic is the mean of the entries > -1: AP over all 10 thresholds x 101
//   recall points x categories (area all, max_dets), AP50 / AP75 at one threshold, AP small /
//   medium / large, AR = mean over thresholds x categories of the final recall (0 without
//   detections) at max_dets 1, 10 and max_dets and per area range. A statistic with no entry is -1
//   (COCO prints -1.000), e.g. ap_small when no gt is small, or everything when nothing has gt.
// Differences left on purpose: the means are summed in plain order (numpy sums pairwise), so the
// last bit or two may differ; with max_dets other than 100, COCO's summarize would still look for a
// maxDets == 100 column (and print -1) while here every AP / AR_x statistic is read at max_dets.
//
// precision / recall are not COCO numbers: they are the Ultralytics-style summary the families
// print, class means at the confidence (grid 0, 0.001, ..., 1) with the best class-mean F1, from the
// same matching at IoU 0.50, area all, max_dets (ignored detections left out). (The original's
// COCOEvaluator reports the mean of COCO's precision array, i.e. map50_95, and AR@100 under those
// names instead.)
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace libreyolo::eval {

class DetectionMetrics {
 public:
  static constexpr int kThresholds = 10;     // IoU 0.50, 0.55, ..., 0.95
  static constexpr int kRecallPoints = 101;  // recall 0, 0.01, ..., 1
  static constexpr int kAreas = 4;           // all, small, medium, large
  enum Area : int { kAll = 0, kSmall = 1, kMedium = 2, kLarge = 3 };

  struct Result {
    // COCO summarize() statistics (stats[0..11] in this order); -1 where COCO gives -1.
    double map50_95 = -1, map50 = -1, map75 = -1;
    double ap_small = -1, ap_medium = -1, ap_large = -1;
    double ar1 = -1, ar10 = -1, ar100 = -1;  // ar100: AR at max_dets (100 by default)
    double ar_small = -1, ar_medium = -1, ar_large = -1;
    // Ultralytics-style best-F1 class means at IoU 0.5 (see the header comment); 0 without gt.
    double precision = 0, recall = 0;
    // One entry per category (class with gt), ascending class id: AP@[.5:.95] and AP@.5, area all.
    std::vector<int64_t> classes;
    std::vector<double> ap_per_class, ap50_per_class;

    std::array<double, 12> stats() const {
      return {map50_95, map50, map75, ap_small, ap_medium, ap_large, ar1, ar10, ar100, ar_small, ar_medium, ar_large};
    }
  };

  // max_dets: detections kept per image and category (COCO's maxDets[-1]); at least 1.
  explicit DetectionMetrics(int64_t max_dets = 100) : max_dets_(max_dets) {
    if (max_dets < 1)
      throw ConfigError("DetectionMetrics: max_dets must be at least 1 (got " + std::to_string(max_dets) + ")");
  }

  // One image. pred [N, 6] = x1, y1, x2, y2, score, class; gt [M, 5] = class, x1, y1, x2, y2 (same
  // pixel space). Either may be empty ([0, 6] / [0, 5] or an undefined tensor). Classes must be
  // whole numbers.
  void add(const torch::Tensor& pred, const torch::Tensor& gt);
  Result compute() const;

  int64_t max_dets() const { return max_dets_; }
  int64_t images() const { return images_; }

  // COCO's thresholds, bit for bit as numpy's linspace makes them.
  static double iou_threshold(int t) { return t == kThresholds - 1 ? 0.95 : t * ((0.95 - 0.5) / 9) + 0.5; }
  static double recall_threshold(int r) { return r == kRecallPoints - 1 ? 1.0 : r * (1.0 / 100); }
  static std::array<double, 2> area_range(int a) {
    constexpr double lo[kAreas] = {0.0, 0.0, 32.0 * 32.0, 96.0 * 96.0};
    constexpr double hi[kAreas] = {1e5 * 1e5, 32.0 * 32.0, 96.0 * 96.0, 1e5 * 1e5};
    return {lo[a], hi[a]};
  }

  // COCO box (x, y, w, h) and maskApi.c's bbIou for a non-crowd gt.
  struct Box {
    double x, y, w, h;
  };
  static double coco_iou(const Box& d, const Box& g) {
    const double da = d.w * d.h, ga = g.w * g.h;
    const double w = std::fmin(d.w + d.x, g.w + g.x) - std::fmax(d.x, g.x);
    if (w <= 0) return 0.0;
    const double h = std::fmin(d.h + d.y, g.h + g.y) - std::fmax(d.y, g.y);
    if (h <= 0) return 0.0;
    const double i = w * h;
    return i / (da + ga - i);
  }

 private:
  struct Detection {
    double score;
    int64_t rank;  // place in its image's score order (0 = best) within its category
    // Bit t: at IoU threshold t, per area range.
    std::array<uint16_t, kAreas> matched{}, ignored{};
  };
  struct ClassRecord {
    std::vector<Detection> dets;           // image by image, each image's kept ones in score order
    std::array<int64_t, kAreas> npig{};    // non-ignored gts per area range, all images
  };
  // numpy's argsort(-score) order: higher first, NaN last; std::stable_sort keeps ties in place.
  static bool score_before(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a > b); }
  static void check_shape(const torch::Tensor& t, int64_t cols, const char* what);
  void evaluate_image(const std::vector<Box>& dt, const std::vector<double>& scores, const std::vector<Box>& gt,
                      ClassRecord& rec) const;
  // accumulate() for one (category, area range, threshold): fills q[kRecallPoints] (when not null)
  // and returns the final recall.
  static double accumulate(const std::vector<const Detection*>& sorted, int area, int t, int64_t npig, double* q);

  int64_t max_dets_;
  int64_t images_ = 0;
  std::map<int64_t, ClassRecord> classes_;
};

inline void DetectionMetrics::check_shape(const torch::Tensor& t, int64_t cols, const char* what) {
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

inline void DetectionMetrics::add(const torch::Tensor& pred_in, const torch::Tensor& gt_in) {
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

inline void DetectionMetrics::evaluate_image(const std::vector<Box>& dt, const std::vector<double>& scores,
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

inline double DetectionMetrics::accumulate(const std::vector<const Detection*>& sorted, int area, int t, int64_t npig,
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

inline DetectionMetrics::Result DetectionMetrics::compute() const {
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
