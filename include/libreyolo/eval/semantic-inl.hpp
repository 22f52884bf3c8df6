#pragma once
// Definitions of semantic.hpp (core/api.hpp): included by semantic.hpp when header-only, compiled once otherwise.
#include <libreyolo/eval/semantic.hpp>
#include <libreyolo/core/log.hpp>

namespace libreyolo::eval {

LIBREYOLO_INLINE SemanticMetrics::SemanticMetrics(int64_t num_classes, int64_t ignore_index) : nc_(num_classes), ignore_(ignore_index) {
  if (nc_ < 1) throw ConfigError("SemanticMetrics: num_classes must be >= 1, got " + std::to_string(nc_));
}

LIBREYOLO_INLINE void SemanticMetrics::add(const torch::Tensor& pred, const torch::Tensor& truth) {
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

LIBREYOLO_INLINE torch::Tensor SemanticMetrics::confusion() const {
  return cm_.defined() ? cm_.to(torch::kCPU) : torch::zeros({nc_, nc_}, torch::kInt64);
}

LIBREYOLO_INLINE SemanticResult SemanticMetrics::compute() const {
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
  if (r.labelled_pixels == 0)
    log::warn("semantic validation: no labelled pixel in the whole validation split (every mask pixel is ignore = ",
              ignore_, ", or outside 0..", nc_ - 1, "): mIoU and pixel accuracy are 0 and mean nothing; label the "
              "validation masks (or remap their ids with the dataset YAML's label_mapping)");
  return r;
}

LIBREYOLO_INLINE std::string SemanticMetrics::shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace libreyolo::eval
