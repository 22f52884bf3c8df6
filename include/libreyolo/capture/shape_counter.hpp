#pragma once
// ShapeCounter: how often each input key (shape, dtype, device) has been seen, so that a CUDA graph is
// captured only for a shape that repeats (SPEC §2.3: capture on the threshold-th sighting).
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace libreyolo::capture {

struct ShapeKey {
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::DeviceType device_type = c10::DeviceType::CPU;
  int device_index = -1;

  static ShapeKey of(const torch::Tensor& x) {
    return {x.sizes().vec(), x.scalar_type(), x.device().type(), static_cast<int>(x.device().index())};
  }
  // "[8, 3, 640, 640]": the form of the capture log line.
  std::string shape_string() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
  friend bool operator<(const ShapeKey& a, const ShapeKey& b) {
    return std::tie(a.shape, a.dtype, a.device_type, a.device_index) <
           std::tie(b.shape, b.dtype, b.device_type, b.device_index);
  }
  friend bool operator==(const ShapeKey& a, const ShapeKey& b) { return !(a < b) && !(b < a); }
};

class ShapeCounter {
 public:
  explicit ShapeCounter(int threshold = 3) { set_threshold(threshold); }

  void set_threshold(int threshold) {
    if (threshold < 1)
      throw ConfigError("cuda_graph_warmup=" + std::to_string(threshold) +
                        ": a shape must be seen at least once before capture; allowed: an integer >= 1");
    threshold_ = threshold;
  }
  int threshold() const { return threshold_; }

  // Counts one more sighting of x's key; true exactly when this sighting is the threshold-th.
  bool count(const torch::Tensor& x) { return count(ShapeKey::of(x)); }
  bool count(const ShapeKey& k) { return ++seen_[k] == threshold_; }

  int64_t seen(const ShapeKey& k) const {
    auto it = seen_.find(k);
    return it == seen_.end() ? 0 : it->second;
  }
  size_t distinct() const { return seen_.size(); }
  void reset() { seen_.clear(); }

 private:
  int threshold_ = 3;
  std::map<ShapeKey, int64_t> seen_;
};

}  // namespace libreyolo::capture
