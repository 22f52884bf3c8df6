#pragma once
// FamilyDefault: the precision decided at run time from `amp` (an explicit true/false wins) or else
// the family's AMP default, and `amp_dtype`; then it behaves as Fp32, Amp<kHalf> or Amp<kBFloat16>
// (autocast on CUDA only, GradScaler for float16 only).
#include <libreyolo/precision/amp.hpp>
#include <libreyolo/precision/family_amp_defaults.hpp>
#include <libreyolo/precision/fp32.hpp>
#include <libreyolo/precision/grad_scaler.hpp>

#include <torch/torch.h>

#include <string>

namespace libreyolo::precision {

struct FamilyDefault {
  void setup(const TrainConfig& cfg, torch::Device device, bool family_amp_default) {
    used_ = resolve_precision(cfg, device, family_amp_default);
    dtype_ = used_.amp ? amp_scalar_type(used_.dtype) : at::kFloat;
    GradScalerOptions so;
    so.enabled = used_.scaler;
    scaler_ = GradScaler(so);
  }
  // The trainer calls this when a capture policy starts/stops recording CUDA graphs.
  void set_capture_active(bool on) { capture_active_ = on; }
  bool capture_active() const { return capture_active_; }

  AutocastGuard autocast() const { return used_.amp ? AutocastGuard(dtype_, !capture_active_) : AutocastGuard(); }
  torch::Tensor scale(const torch::Tensor& loss) { return scaler_.scale(loss); }
  template <StepOptimizer O> void unscale_(O& opt) { scaler_.unscale_(opt); }
  template <StepOptimizer O> bool step(O& opt) { return scaler_.step(opt); }
  void update() { scaler_.update(); }
  Used used() const { return used_; }
  void save(train::Checkpoint& ck, const std::string& prefix) const { scaler_.save(ck, prefix); }
  void load(const train::Checkpoint& ck, const std::string& prefix) { scaler_.load(ck, prefix); }
  const GradScaler& scaler() const { return scaler_; }

 private:
  Used used_{};
  at::ScalarType dtype_ = at::kFloat;
  GradScaler scaler_{GradScalerOptions{.enabled = false}};  // enabled by setup() for float16 on CUDA
  bool capture_active_ = false;
};

static_assert(PrecisionPolicy<FamilyDefault>);
static_assert(PrecisionPolicy<Amp<at::kHalf>>);
static_assert(PrecisionPolicy<Amp<at::kBFloat16>>);

}  // namespace libreyolo::precision
