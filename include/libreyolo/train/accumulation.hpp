#pragma once
// Gradient accumulation as the original's trainers do it (training/trainer.py `_train_epoch_accum`,
// models/deim/trainer.py likewise, c41461e): with `accumulate = round(nbs / batch)` > 1, an epoch's
// micro-batches form windows of `accumulate`, counted from the epoch's first batch; the last window of an
// epoch is shorter when the epoch's batch count is not a multiple, and it ends with the epoch (no window
// crosses an epoch's end). Each micro-batch's loss is divided by its window's length before backward (as a
// product with 1 / length, which is what a division by a host number computes on CUDA), so the window's summed
// gradient is the mean over its micro-batches; the optimizer, clipping, scaler and EMA
// step once, after the window's last micro-batch.
#include <algorithm>
#include <cstdint>

namespace libreyolo::train {

// The factor of a micro-batch's loss in a window of `length` (the eager loop and the step path multiply by it).
inline double loss_factor(int64_t length) { return 1.0 / static_cast<double>(std::max<int64_t>(1, length)); }

struct AccumWindow {
  int64_t length = 1;     // micro-batches in this window (the divisor of each one's loss)
  bool first = true;      // this micro-batch opens the window
  bool last = true;       // the optimizer steps after this micro-batch
};

// The window of micro-batch `index` (0-based within its epoch) of an epoch of `batches` micro-batches.
inline AccumWindow accumulation_window(int64_t index, int64_t batches, int64_t accumulate) {
  AccumWindow w;
  if (accumulate <= 1) return w;
  const int64_t start = index - index % accumulate;
  w.length = std::max<int64_t>(1, std::min(accumulate, batches - start));
  w.first = index == start;
  w.last = index + 1 == start + w.length || index + 1 >= batches;
  return w;
}

}  // namespace libreyolo::train

#include <torch/torch.h>

#include <vector>

namespace libreyolo::train {

// Gradient accumulation on device state, for cuda_graph=step (train/device_step.hpp): a window's micro-batches
// each run as one step (a graph replay once recorded), so the sum of their gradients lives in buffers of its
// own, outside any graph's memory pool, between the steps:
//   an accumulating micro-batch:  backward, then buffers += grads (stash);
//   the window's last one:        backward, then grads += buffers, buffers zeroed (restore), then the optimizer.
// The sums are eager's to the bit: eager's .grad holds ((g1 + g2) + g3) after three micro-batches, and
// restore adds g4 + that sum (IEEE addition commutes exactly). The loss factor (1 / the window's length) is a
// device scalar written before each step, so one recorded graph serves every window length.
class GradAccumulator {
 public:
  // The buffers, zero, for `params` (the optimizer's), on their devices; the loss factor on `device`.
  void enable(const std::vector<torch::Tensor>& params, torch::Device device) {
    params_ = params;
    buffers_.clear();
    had_.assign(params.size(), false);
    for (const auto& p : params) buffers_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    factor_ = torch::ones({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    on_ = true;
  }
  bool enabled() const { return on_; }
  // Before a step (outside any recording): this micro-batch's window length.
  void set_window(int64_t length) { factor_.fill_(loss_factor(length)); }
  // 1 / the window's length, the factor of each micro-batch's loss (float32, as the loss).
  const torch::Tensor& factor() const { return factor_; }
  // After an accumulating micro-batch's backward: buffers += grads (a parameter without a grad adds nothing).
  void stash() {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& g = params_[i].grad();
      if (!g.defined()) continue;
      buffers_[i].add_(g);
      had_[i] = true;
    }
  }
  // After the window's last backward: grads += buffers, buffers zeroed. A parameter without a grad in this
  // micro-batch that had one earlier in the window gets the buffer's sum (as eager's .grad keeps it).
  void restore() {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (p.grad().defined()) {
        p.mutable_grad().add_(buffers_[i]);
      } else if (had_[i]) {
        p.mutable_grad() = buffers_[i].clone();
      }
      buffers_[i].zero_();
      had_[i] = false;
    }
  }
  const std::vector<torch::Tensor>& buffers() const { return buffers_; }

 private:
  bool on_ = false;
  std::vector<torch::Tensor> params_, buffers_;
  std::vector<bool> had_;
  torch::Tensor factor_;
};

}  // namespace libreyolo::train
