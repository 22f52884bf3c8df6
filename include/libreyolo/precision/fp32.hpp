#pragma once
// Precision policies: the contract, and Fp32 (no autocast, no loss scaling).
// Amp<dtype>, FamilyDefault and the GradScaler live beside this file.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/io/checkpoint.hpp>

#include <torch/torch.h>

#include <concepts>
#include <string>

namespace libreyolo::precision {

class GradScaler;  // precision/grad_scaler.hpp

// What a run actually used; recorded in results.json and the profiler report.
struct Used {
  bool amp = false;
  std::string dtype = "float32";
  bool scaler = false;
  nlohmann::json to_json() const { return {{"amp", amp}, {"dtype", dtype}, {"grad_scaler", scaler}}; }
};

// The optimizer seen by a precision policy: anything with step() and params().
template <class O>
concept StepOptimizer = requires(O o) {
  o.step();
  { o.params() } -> std::convertible_to<std::vector<torch::Tensor>>;
};

// @tparam P: setup(cfg, device, family_amp_default); autocast() -> RAII guard used in the forward phase;
// scale(loss) -> loss to backprop; unscale_(opt) before clipping; step(opt) (skips on inf/NaN);
// update(); used() -> Used; save/load of scaler state in checkpoints; set_capture_active(on) while a
// capture policy records graphs; device_scaler() -> the GradScaler whose device form a whole-step
// graph runs (nullptr when the policy scales nothing).
template <class P>
concept PrecisionPolicy = requires(P p, const P cp, const TrainConfig& c, torch::Device d, torch::Tensor t,
                                   train::Checkpoint& ck, const train::Checkpoint& cck) {
  p.setup(c, d, bool{});
  p.set_capture_active(bool{});
  { p.device_scaler() } -> std::convertible_to<GradScaler*>;
  { cp.autocast() };
  { p.scale(t) } -> std::convertible_to<torch::Tensor>;
  p.update();
  { cp.used() } -> std::convertible_to<Used>;
  cp.save(ck, std::string{});
  p.load(cck, std::string{});
};

struct Fp32 {
  struct NoGuard {};
  void setup(const TrainConfig& cfg, torch::Device, bool) {
    if (cfg.amp.value_or(false))
      log::notice_once("precision.fp32.amp", "amp=true ignored: this trainer is composed with precision::Fp32");
  }
  NoGuard autocast() const { return {}; }
  void set_capture_active(bool) {}
  GradScaler* device_scaler() { return nullptr; }
  torch::Tensor scale(const torch::Tensor& loss) const { return loss; }
  template <StepOptimizer O> void unscale_(O&) {}
  template <StepOptimizer O> void step(O& opt) { opt.step(); }
  void update() {}
  Used used() const { return {}; }
  void save(train::Checkpoint&, const std::string&) const {}
  void load(const train::Checkpoint&, const std::string&) {}
};

}  // namespace libreyolo::precision
