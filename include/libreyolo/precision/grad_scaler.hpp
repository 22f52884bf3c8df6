#pragma once
// Dynamic loss scaling for float16 training, behaving like PyTorch's torch.amp.GradScaler:
// the loss is multiplied by `scale` before backward; before the optimizer step the grads are
// multiplied by 1/scale and checked for inf/NaN; a step with a non-finite grad is skipped and the
// scale backed off, and after `growth_interval` clean steps in a row the scale grows.
// Scale, growth tracker and found_inf stay device tensors; step() reads found_inf once (the only
// host sync, as in PyTorch) to decide whether to call the optimizer. The device form for
// cuda_graph=step (device_unscale_ / device_update) never reads back: the optimizer skips its own
// update on the device (train::Optimizer::device_step(found_inf)).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/io/checkpoint.hpp>

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace libreyolo::precision {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

namespace detail {

// Generic `_amp_foreach_non_finite_check_and_unscale_`: multiplies each grad by inv_scale and sets
// found_inf to 1 when any input value is inf/NaN. Used where the fused op has no kernel (CPU on 1.13).
LIBREYOLO_INLINE void non_finite_check_and_unscale(const std::vector<torch::Tensor>& grads, torch::Tensor& found_inf,
                                                   const torch::Tensor& inv_scale);

// Generic `_amp_update_scale_`, same arithmetic as the CUDA kernel: the factor products are taken in
// double and rounded once to float, and growth is dropped if the grown scale is not finite.
LIBREYOLO_INLINE void update_scale(torch::Tensor& scale, torch::Tensor& growth_tracker, const torch::Tensor& found_inf,
                                   double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace detail

class GradScaler {
 public:
  GradScaler() : GradScaler(GradScalerOptions{}) {}
  explicit GradScaler(GradScalerOptions o) : opt_(o) { validate(o); }

  bool enabled() const { return opt_.enabled; }
  const GradScalerOptions& options() const { return opt_; }

  // loss * scale; the scale tensor is created lazily on the loss's device (as PyTorch does).
  torch::Tensor scale(const torch::Tensor& loss);

  // Divides the optimizer's grads by the scale and records whether any was inf/NaN. Call at most
  // once per optimizer between update()s, before clipping.
  template <class O> void unscale_(O& opt) {
    if (!opt_.enabled) return;
    require_state("unscale_");
    OptimizerState& st = per_opt_[&opt];
    if (st.stage == Stage::unscaled)
      throw Error("GradScaler::unscale_() has already been called on this optimizer since the last update()");
    if (st.stage == Stage::stepped) throw Error("GradScaler::unscale_() is being called after step()");
    st.found_inf = unscale_grads(opt.params());
    st.stage = Stage::unscaled;
  }

  // Unscales (if not done yet) and steps the optimizer unless a grad was inf/NaN. Returns whether it
  // stepped. This is the one host sync of the scaler.
  template <class O> bool step(O& opt) {
    if (!opt_.enabled) {
      opt.step();
      return true;
    }
    require_state("step");
    auto it = per_opt_.find(&opt);
    if (it != per_opt_.end() && it->second.stage == Stage::stepped)
      throw Error("GradScaler::step() has already been called since the last update()");
    if (it == per_opt_.end() || it->second.stage == Stage::ready) unscale_(opt);
    OptimizerState& st = per_opt_[&opt];
    if (!st.found_inf.defined())
      throw Error("GradScaler::step(): no inf checks were recorded for this optimizer (no parameter has a grad)");
    const bool clean = st.found_inf.item<float>() == 0.0f;
    if (clean) opt.step();
    st.stage = Stage::stepped;
    return clean;
  }

  // Backs the scale off if any optimizer saw inf/NaN since the last update, else counts a clean
  // step and grows the scale every growth_interval clean steps. Resets the per-optimizer state.
  void update();

  // ---- the device form (cuda_graph=step): nothing read back, recordable in a CUDA graph -------------
  // Zeroes the persistent found_inf, unscales the grads of `params` and records inf/NaN in it; returns
  // it (0-d float on the scale's device; pass it to Optimizer::device_step, then device_update). Call
  // after scale() has created the state. The scaler's host-side stage bookkeeping is not used.
  torch::Tensor device_unscale_(const std::vector<torch::Tensor>& params);
  // Backs the scale off when found_inf is 1, else counts a clean step (growth every growth_interval),
  // on the device.
  void device_update(const torch::Tensor& found_inf);
  // The last device_unscale_'s found_inf (undefined before one).
  const torch::Tensor& found_inf_tensor() const { return found_; }

  // Current scale as a number (a host sync): the initial scale before the first scale(); 1 if disabled.
  double scale_value() const;
  int64_t growth_tracker_value() const;
  // The scale tensor (undefined before the first scale()); used by tests and the profiler.
  const torch::Tensor& scale_tensor() const { return scale_; }

  // Stores scale and growth tracker under "<prefix>grad_scaler.{scale,growth_tracker}" plus the
  // factors in meta. A disabled scaler stores nothing.
  void save(train::Checkpoint& ck, const std::string& prefix) const;

  // Restores what save() wrote; a checkpoint without scaler state (saved by an fp32/bf16 run) keeps
  // the initial scale, with one log line.
  void load(const train::Checkpoint& ck, const std::string& prefix);

 private:
  static void validate(const GradScalerOptions& o);

  enum class Stage { ready, unscaled, stepped };
  struct OptimizerState {
    Stage stage = Stage::ready;
    torch::Tensor found_inf;  // float 0-d on the scale's device; undefined when no param had a grad
  };

  void init_state(torch::Device dev);
  void require_state(const char* fn) const;

  static double checked_scalar(const std::string& key, const torch::Tensor* t,
                               bool floating);

  // Groups grads by (device, dtype) like PyTorch, unscales each group, and returns found_inf on the
  // scale's device (undefined when no param had a grad).
  torch::Tensor unscale_grads(const std::vector<torch::Tensor>& params);

  GradScalerOptions opt_;
  torch::Tensor scale_;           // float32 0-d
  torch::Tensor growth_tracker_;  // int32 0-d
  int64_t init_growth_tracker_ = 0;
  std::map<const void*, OptimizerState> per_opt_;
  torch::Tensor found_;  // the device form's found_inf (float32 0-d, the scale's device)
};

}  // namespace libreyolo::precision

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/precision/grad_scaler-inl.hpp>
#endif
