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
#include <libreyolo/core/api.hpp>
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
  explicit DetectionMetrics(int64_t max_dets = 100);

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
  static std::array<double, 2> area_range(int a);

  // COCO box (x, y, w, h) and maskApi.c's bbIou for a non-crowd gt.
  struct Box {
    double x, y, w, h;
  };
  static double coco_iou(const Box& d, const Box& g);

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

}  // namespace libreyolo::eval

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/eval/detection-inl.hpp>
#endif
