#pragma once
// Point decoding and metrics of the point task, as the original's FOMO (libreyolo/models/fomo/utils.py
// decode_points_from_logits, libreyolo/validation/fomo_validator.py and point_validator.py):
//
// decode: softmax over the channels (0 = background), per cell the best foreground class and its
//   probability; cells above `conf`, in falling score order, each kept unless an earlier kept cell's
//   (2 radius + 1)^2 square covers it (which it then suppresses too): clusters of cells become one point.
//   Rows: x, y (grid cells: column, row), score, class (0-based). Equal scores keep row-major cell order.
// match: per image, predictions against the ground-truth cells (the foreground cells of the target
//   grid), class-aware, Euclidean distance in cells within `tolerance`; an optimal assignment (Hungarian)
//   that maximises first the number of matches, then the matched predictions' confidence ranks, then
//   their proximity (the original's reward). TP = matched pairs, FP = unmatched predictions, FN =
//   unmatched ground truth.
// metrics: TP / FP / FN summed over the split for each (conf threshold, suppression radius) pair; P, R,
//   F1 = 2PR / (P + R) (0 when undefined); the reported pair is the one with the best F1 (the first
//   of equals in threshold-major order), and its F1 is the fitness (the original's metrics/grid_F1).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace libreyolo::eval {

struct PointDecodeOptions {
  double conf = 0.5;       // minimum foreground probability
  int radius = 1;          // suppression square: (2 radius + 1) cells a side
  int64_t max_points = 0;  // 0 = no limit
};

// logits [B, 1 + classes, H, W] (any device) -> per image float [n, 4] x, y (cells), score, class, on the CPU.
LIBREYOLO_INLINE std::vector<torch::Tensor> decode_points(const torch::Tensor& logits, const PointDecodeOptions& o);

// Rectangular assignment minimising the total cost (Hungarian algorithm, O(n^2 m) with n <= m); returns
// for each row its column (every row is assigned when rows <= cols).
LIBREYOLO_INLINE std::vector<int64_t> assign_min_cost(const std::vector<std::vector<double>>& cost);

struct PointXY {
  double x = 0, y = 0;
  int64_t cls = 0;
};

struct PointMatchResult {
  std::vector<std::array<int64_t, 2>> pairs;  // (prediction, ground truth)
  double total_distance = 0;                  // over the pairs
  int64_t tp() const { return static_cast<int64_t>(pairs.size()); }
  int64_t fp = 0, fn = 0;
};

// The original's _hungarian_match with class-aware distances (see the top of this file).
LIBREYOLO_INLINE PointMatchResult match_points(const std::vector<PointXY>& pred, const std::vector<double>& scores,
                                               const std::vector<PointXY>& gt, double tolerance);

struct PointCounts {
  int64_t tp = 0, fp = 0, fn = 0;
  double total_distance = 0;
  double precision() const { return tp + fp > 0 ? double(tp) / double(tp + fp) : 0.0; }
  double recall() const { return tp + fn > 0 ? double(tp) / double(tp + fn) : 0.0; }
  double f1() const {
    const double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
  }
  double mean_distance() const { return total_distance / double(std::max<int64_t>(tp, 1)); }
};

// The ground-truth cells of a target grid int64 [H, W] (0 = background): x, y, class (0-based), row-major.
LIBREYOLO_INLINE std::vector<PointXY> grid_points(const torch::Tensor& grid);

// Grid precision / recall / F1 over a split, for every (threshold, radius) pair.
class PointMetrics {
 public:
  struct Setting {
    double conf;
    int radius;
    PointCounts counts;
  };
  explicit PointMetrics(std::vector<double> thresholds = {0.25, 0.35, 0.50, 0.65, 0.80, 0.90},
                        std::vector<int> radii = {1, 2}, double tolerance = 1.5);

  // One batch: logits [B, 1 + classes, H, W], target grid int64 [B, H, W].
  void add(const torch::Tensor& logits, const torch::Tensor& grid);
  // One image's decoded rows [n, 4] (x, y, score, class) against its ground-truth cells.
  void add_image(const torch::Tensor& rows, const std::vector<PointXY>& gt, PointCounts& c) const;

  const std::vector<Setting>& settings() const { return settings_; }
  // The setting with the best F1 (the first of equals).
  const Setting& best() const;

 private:
  double tolerance_;
  std::vector<Setting> settings_;
};

}  // namespace libreyolo::eval

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/eval/point-inl.hpp>
#endif
