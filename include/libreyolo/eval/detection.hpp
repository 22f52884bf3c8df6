#pragma once
// COCO-style detection metrics: mAP@0.5 and mAP@0.5:0.95 with 101-point interpolated AP, greedy
// per-class matching by score in each image, plus precision and recall at IoU 0.5.
#include <libreyolo/assign/box_ops.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace libreyolo::eval {

class DetectionMetrics {
 public:
  static constexpr int kThresholds = 10;  // IoU 0.50, 0.55, ..., 0.95

  struct Result {
    double map50 = 0, map50_95 = 0;
    // Class means at the confidence (grid 0, 0.001, ..., 1) with the best class-mean F1 at IoU 0.5.
    double precision = 0, recall = 0;
    std::vector<double> ap50_per_class, ap_per_class;  // one entry per class that has ground truth
    std::vector<int64_t> classes;                      // the class id of each entry above
  };

  // pred [N, 6] = x1, y1, x2, y2, score, class; gt [M, 5] = class, x1, y1, x2, y2 (same image, same
  // pixel space). Either may be empty ([0, 6] / [0, 5] or an undefined tensor).
  void add(const torch::Tensor& pred, const torch::Tensor& gt);
  Result compute() const;

  static double iou_threshold(int t) { return 0.5 + 0.05 * t; }

 private:
  struct Detection {
    double score;
    std::array<bool, kThresholds> tp;
  };
  struct ClassRecord {
    std::vector<Detection> dets;
    int64_t num_gt = 0;
  };
  // COCO: precision envelope made non-increasing, sampled at recall 0, 0.01, ..., 1.
  static double ap101(const std::vector<double>& recall, const std::vector<double>& precision);
  static void check_shape(const torch::Tensor& t, int64_t cols, const char* what);

  std::map<int64_t, ClassRecord> classes_;
};

inline void DetectionMetrics::check_shape(const torch::Tensor& t, int64_t cols, const char* what) {
  if (t.defined() && t.numel() > 0 && (t.dim() != 2 || t.size(1) != cols))
    throw DataError(std::string("DetectionMetrics::add: ") + what + " must be [N, " + std::to_string(cols) + "]");
}

inline void DetectionMetrics::add(const torch::Tensor& pred_in, const torch::Tensor& gt_in) {
  check_shape(pred_in, 6, "pred");
  check_shape(gt_in, 5, "gt");
  auto pred = pred_in.defined() && pred_in.numel() ? pred_in.detach().to(torch::kCPU, torch::kFloat64)
                                                   : torch::zeros({0, 6}, torch::kFloat64);
  auto gt = gt_in.defined() && gt_in.numel() ? gt_in.detach().to(torch::kCPU, torch::kFloat64)
                                             : torch::zeros({0, 5}, torch::kFloat64);
  auto gt_cls = gt.select(1, 0).to(torch::kInt64);
  for (int64_t i = 0; i < gt.size(0); ++i) classes_[gt_cls[i].item<int64_t>()].num_gt++;
  if (pred.size(0) == 0) return;

  auto order = std::get<1>(pred.select(1, 4).sort(0, /*descending=*/true));
  pred = pred.index_select(0, order);
  auto ious = gt.size(0) ? assign::box_iou(pred.narrow(1, 0, 4), gt.narrow(1, 1, 4)) : torch::zeros({pred.size(0), 0},
                                                                                                    torch::kFloat64);
  auto iou_a = ious.accessor<double, 2>();
  auto pred_a = pred.accessor<double, 2>();
  auto gt_cls_a = gt_cls.accessor<int64_t, 1>();
  // matched[t][g]: gt g already taken at threshold t. Each prediction, best score first, takes the
  // free same-class gt it overlaps most, provided that overlap reaches the threshold.
  std::vector<std::vector<char>> matched(kThresholds, std::vector<char>(static_cast<size_t>(gt.size(0)), 0));
  for (int64_t p = 0; p < pred.size(0); ++p) {
    const int64_t cls = static_cast<int64_t>(pred_a[p][5]);
    Detection det{pred_a[p][4], {}};
    for (int t = 0; t < kThresholds; ++t) {
      int64_t best = -1;
      double best_iou = iou_threshold(t) - 1e-12;
      for (int64_t g = 0; g < gt.size(0); ++g) {
        if (gt_cls_a[g] != cls || matched[t][g] || iou_a[p][g] < best_iou) continue;
        best = g;
        best_iou = iou_a[p][g];
      }
      det.tp[t] = best >= 0;
      if (best >= 0) matched[t][best] = 1;
    }
    classes_[cls].dets.push_back(det);
  }
}

inline double DetectionMetrics::ap101(const std::vector<double>& recall, const std::vector<double>& precision) {
  std::vector<double> envelope(precision);
  for (size_t i = envelope.size(); i-- > 1;) envelope[i - 1] = std::max(envelope[i - 1], envelope[i]);
  double sum = 0;
  for (int r = 0; r <= 100; ++r) {
    const double level = r / 100.0;
    auto it = std::lower_bound(recall.begin(), recall.end(), level - 1e-12);
    if (it != recall.end()) sum += envelope[static_cast<size_t>(it - recall.begin())];
  }
  return sum / 101.0;
}

inline DetectionMetrics::Result DetectionMetrics::compute() const {
  Result res;
  constexpr int grid = 1001;
  std::vector<double> f1_sum(grid, 0), p_sum(grid, 0), r_sum(grid, 0);
  for (const auto& [cls, rec] : classes_) {
    if (rec.num_gt == 0) continue;  // classes with no ground truth do not enter the means
    auto dets = rec.dets;
    std::stable_sort(dets.begin(), dets.end(), [](const Detection& a, const Detection& b) { return a.score > b.score; });
    double ap_sum = 0;
    for (int t = 0; t < kThresholds; ++t) {
      std::vector<double> recall, precision;
      double tp = 0;
      for (size_t i = 0; i < dets.size(); ++i) {
        tp += dets[i].tp[t];
        recall.push_back(tp / static_cast<double>(rec.num_gt));
        precision.push_back(tp / static_cast<double>(i + 1));
      }
      const double ap = ap101(recall, precision);
      if (t == 0) res.ap50_per_class.push_back(ap);
      ap_sum += ap;
    }
    res.ap_per_class.push_back(ap_sum / kThresholds);
    res.classes.push_back(cls);
    // Precision / recall / F1 at IoU 0.5 for detections scoring >= each grid confidence.
    size_t kept = 0;
    double tp = 0;
    for (int g = grid - 1; g >= 0; --g) {
      const double conf = g / static_cast<double>(grid - 1);
      while (kept < dets.size() && dets[kept].score >= conf) tp += dets[kept++].tp[0];
      const double p = kept ? tp / static_cast<double>(kept) : 0.0;
      const double r = tp / static_cast<double>(rec.num_gt);
      p_sum[g] += p;
      r_sum[g] += r;
      f1_sum[g] += (p + r) > 0 ? 2 * p * r / (p + r) : 0.0;
    }
  }
  const auto n = static_cast<double>(res.classes.size());
  if (n == 0) return res;
  res.map50 = std::accumulate(res.ap50_per_class.begin(), res.ap50_per_class.end(), 0.0) / n;
  res.map50_95 = std::accumulate(res.ap_per_class.begin(), res.ap_per_class.end(), 0.0) / n;
  const auto best = std::max_element(f1_sum.begin(), f1_sum.end()) - f1_sum.begin();
  res.precision = p_sum[best] / n;
  res.recall = r_sum[best] / n;
  return res;
}

}  // namespace libreyolo::eval
