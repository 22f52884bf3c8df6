#pragma once
// Exponential moving average of a model's weights (ultralytics/YOLOX style): the decay ramps up as
// d = decay * (1 - exp(-updates / tau)), so early averages follow the fast-changing model closely.
// The device form for cuda_graph=step splits update() in two: begin_device_update() counts the update
// on the host and writes d and 1 - d into device tensors (the ramp depends only on the count, which
// every step advances: a skipped optimizer step still updates the EMA, as in update()); then
// device_update() averages with them, host state untouched, so it can be recorded in a CUDA graph.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/io/checkpoint.hpp>

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace libreyolo::train {

class ModelEMA {
 public:
  // `ema_copy` is a second instance of the model's architecture; it receives the model's weights,
  // goes to eval mode and stops requiring grad. foreach: -1 auto (multi-tensor on CUDA), 0 off, 1 on.
  ModelEMA(std::shared_ptr<torch::nn::Module> ema_copy, const torch::nn::Module& model, double decay = 0.9998,
           double tau = 2000, int foreach = -1);

  // e = d*e + (1-d)*m for floating parameters and buffers; integer buffers are copied.
  void update(const torch::nn::Module& model);

  // ---- the device form (cuda_graph=step) ---------------------------------------------------------
  void begin_device_update();
  // e = d*e + (1-d)*m with the d of the last begin_device_update(); integer buffers are copied. On the
  // CPU the values are read back (nothing to wait for) into update()'s own kernels: the same bits.
  void device_update(const torch::nn::Module& model);

  // The decay the last update used (0 before any update).
  double current_decay() const;
  // From now on a constant decay d without the ramp (the original's ModelEMA.set_decay(d), D-FINE's
  // "EMA restart" when the last no-aug epochs begin); 0 returns to the ramped decay.
  void set_constant_decay(double d);
  double constant_decay() const { return constant_; }
  int64_t updates() const { return updates_; }
  // Decided per update from where the EMA weights are now (the copy may be moved after construction).
  bool uses_foreach() const;
  torch::nn::Module& module() { return *ema_; }
  std::shared_ptr<torch::nn::Module> module_ptr() const { return ema_; }

  // Weights under "<prefix>.<name>", the update count under meta["<prefix>"] (trailing dot optional).
  void save(Checkpoint& ck, const std::string& prefix) const;
  void load(const Checkpoint& ck, const std::string& prefix);

 private:
  // (ema tensor, model tensor) for every parameter then every buffer, checked by name and shape; a tensor
  // under several names once, its name count in `mult` (when given) at the same index.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> matched(const torch::nn::Module& model, std::vector<int>* mult = nullptr) const;
  // cached_pairs_ (and cached_mult_) for this model object.
  void cache_pairs(const torch::nn::Module& model);

  std::shared_ptr<torch::nn::Module> ema_;
  double decay_;
  double tau_;
  double constant_ = 0;  // > 0: set_constant_decay's decay
  int64_t updates_ = 0;
  int foreach_mode_ = -1;
  const torch::nn::Module* cached_model_ = nullptr;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> cached_pairs_;
  std::vector<int> cached_mult_;
  torch::Tensor decay_t_, keep_t_;  // the device form's d and 1 - d (0-d on the EMA's device)
};

}  // namespace libreyolo::train

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/train/ema-inl.hpp>
#endif
