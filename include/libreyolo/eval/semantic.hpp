#pragma once
// Semantic segmentation metrics: a confusion matrix over the whole validation set (rows: truth,
// columns: prediction), accumulated on the device (one bincount per batch, no host sync), then
//   IoU_c = TP_c / (TP_c + FP_c + FN_c)   for every class c present in the truth or the prediction;
//   mIoU  = the mean of IoU_c over those classes (a class absent from both is excluded, not 0 or 1);
//   pixel accuracy = sum TP / labelled pixels.
// Pixels whose truth is the ignore index (255) count nowhere.
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
  SemanticMetrics(int64_t num_classes, int64_t ignore_index = 255) : nc_(num_classes), ignore_(ignore_index) {
    if (nc_ < 1) throw ConfigError("SemanticMetrics: num_classes must be >= 1, got " + std::to_string(nc_));
  }

  // pred, truth: integer [..] of the same shape (class ids; truth may hold the ignore index).
  void add(const torch::Tensor& pred, const torch::Tensor& truth) {
    if (pred.sizes() != truth.sizes())
      throw ConfigError("SemanticMetrics::add: prediction " + shape(pred) + " and truth " + shape(truth) + " differ in shape");
    auto t = truth.reshape({-1}).to(torch::kInt64);
    auto p = pred.reshape({-1}).to(torch::kInt64).to(t.device());
    auto keep = t.ne(ignore_) & t.ge(0) & t.lt(nc_);
    auto idx = (t * nc_ + p.clamp(0, nc_ - 1)).masked_select(keep);
    auto counts = torch::bincount(idx, {}, nc_ * nc_).reshape({nc_, nc_});
    if (!cm_.defined()) cm_ = torch::zeros({nc_, nc_}, torch::TensorOptions().dtype(torch::kInt64).device(t.device()));
    cm_ += counts;
  }

  // The confusion matrix so far (int64 [nc, nc], truth x prediction), on the CPU.
  torch::Tensor confusion() const {
    return cm_.defined() ? cm_.to(torch::kCPU) : torch::zeros({nc_, nc_}, torch::kInt64);
  }

  SemanticResult compute() const {
    const auto cm = confusion().to(torch::kFloat64);
    const auto tp = cm.diagonal();
    const auto gt = cm.sum(1), pr = cm.sum(0);
    const auto uni = gt + pr - tp;
    SemanticResult r;
    r.labelled_pixels = static_cast<int64_t>(gt.sum().item<double>());
    r.iou.resize(static_cast<size_t>(nc_));
    double sum = 0;
    for (int64_t c = 0; c < nc_; ++c) {
      const double u = uni[c].item<double>();
      if (u > 0) {
        r.iou[c] = tp[c].item<double>() / u;
        sum += r.iou[c];
        ++r.classes_seen;
      } else {
        r.iou[c] = std::nan("");
      }
    }
    r.miou = r.classes_seen ? sum / double(r.classes_seen) : 0.0;
    r.pixel_accuracy = r.labelled_pixels ? tp.sum().item<double>() / double(r.labelled_pixels) : 0.0;
    return r;
  }

 private:
  static std::string shape(const torch::Tensor& t) {
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "]";
  }
  int64_t nc_, ignore_;
  torch::Tensor cm_;
};

}  // namespace libreyolo::eval
