#pragma once
// Semantic segmentation metrics: a confusion matrix over the whole validation set (rows: truth,
// columns: prediction), accumulated on the device (one bincount per batch, no host sync), then
//   IoU_c = TP_c / (TP_c + FP_c + FN_c)   for every class c present in the truth or the prediction;
//   mIoU  = the mean of IoU_c over those classes (a class absent from both is excluded, not 0 or 1);
//   pixel accuracy = sum TP / labelled pixels.
// Pixels whose truth is the ignore index (255) count nowhere.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::eval {

struct SemanticResult {
  double miou = 0.0;            // NaN-free: 0 when no class was seen at all
  double pixel_accuracy = 0.0;
  std::vector<double> iou;      // per class; NaN for a class absent from truth and prediction
  int64_t classes_seen = 0;     // the classes mIoU averages over
  int64_t labelled_pixels = 0;
};

class SemanticMetrics {
 public:
  SemanticMetrics(int64_t num_classes, int64_t ignore_index = 255);

  // pred, truth: integer [..] of the same shape (class ids; truth may hold the ignore index).
  void add(const torch::Tensor& pred, const torch::Tensor& truth);

  // The confusion matrix so far (int64 [nc, nc], truth x prediction), on the CPU.
  torch::Tensor confusion() const;

  SemanticResult compute() const;

 private:
  static std::string shape(const torch::Tensor& t);
  int64_t nc_, ignore_;
  torch::Tensor cm_;
};

}  // namespace libreyolo::eval

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/eval/semantic-inl.hpp>
#endif
