#pragma once
// What the validation pictures show, computed without drawing (testable without cairo):
// a detection confusion matrix (Ultralytics' rules: detections above conf 0.25 matched to ground truth at
// IoU >= 0.45, one to one by IoU; unmatched ground truth counts as "background" predicted, unmatched
// detections as background true) and per-class precision-recall curves at IoU 0.5.
#include <libreyolo/core/api.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace libreyolo::plot {

struct DetBox {
  double x1, y1, x2, y2;
  int64_t cls;
  double score = 1;  // ground truth: 1
};

LIBREYOLO_INLINE double box_iou(const DetBox& a, const DetBox& b);

// Rows: predicted class (last = background), columns: true class (last = background).
class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int64_t nc, double conf = 0.25, double iou = 0.45)
      : nc_(nc), conf_(conf), iou_(iou), m_(static_cast<size_t>((nc + 1) * (nc + 1)), 0) {}

  void add_detections(const std::vector<DetBox>& dets_in, const std::vector<DetBox>& gt);
  // Classification: one image's predicted and true class.
  void add_class(int64_t pred, int64_t truth) { at(pred, truth) += 1; }

  double& at(int64_t pred, int64_t truth);
  double get(int64_t pred, int64_t truth) const { return m_[static_cast<size_t>(pred * (nc_ + 1) + truth)]; }
  int64_t nc() const { return nc_; }
  double total() const;

 private:
  int64_t nc_;
  double conf_, iou_;
  std::vector<double> m_;
};

struct PrCurve {
  int64_t cls = 0;
  std::vector<double> recall, precision;  // on a grid of 101 recall points, precision interpolated (monotone)
  double ap50 = 0;
  int64_t n_gt = 0;
};

// Per-class precision-recall at IoU 0.5, from every image's detections (greedy by score, one to one) and
// ground truth. Accumulate with add(), then curves().
class PrCollector {
 public:
  void add(const std::vector<DetBox>& dets, const std::vector<DetBox>& gt);
  std::vector<PrCurve> curves() const;

 private:
  std::map<int64_t, int64_t> n_gt_;
  std::map<int64_t, std::vector<std::pair<double, bool>>> scored_;
};

}  // namespace libreyolo::plot

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/plot/curves-inl.hpp>
#endif
