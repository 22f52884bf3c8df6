#pragma once
// Automatic mixed precision: Amp<at::kHalf> (float16 with the dynamic GradScaler) and
// Amp<at::kBFloat16> (bfloat16, float32's exponent range, so no scaler). On CUDA the forward phase
// runs under CUDA autocast; elsewhere training falls back to float32 with one log line.
// resolve_precision() is the single rule mapping amp / amp_dtype / device / family default to what
// a run uses; Amp and FamilyDefault both go through it.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/device.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/precision/fp32.hpp>
#include <libreyolo/precision/grad_scaler.hpp>
#include <libreyolo/io/checkpoint.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace libreyolo::precision {

// "float16" | "bfloat16" from a user's amp_dtype (fp16 / half / bf16 accepted, any case); anything
// else is a ConfigError naming the allowed values.
inline std::string parse_amp_dtype(const std::string& value) {
  std::string s = value;
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "float16" || s == "fp16" || s == "half") return "float16";
  if (s == "bfloat16" || s == "bf16") return "bfloat16";
  throw ConfigError("amp_dtype = '" + value + "': allowed float16 | bfloat16 (aliases fp16, bf16)");
}

inline at::ScalarType amp_scalar_type(const std::string& canonical) {
  return parse_amp_dtype(canonical) == "float16" ? at::kHalf : at::kBFloat16;
}

constexpr const char* amp_dtype_name(at::ScalarType d) { return d == at::kHalf ? "float16" : "bfloat16"; }

namespace detail {
inline std::string cuda_device_description([[maybe_unused]] const torch::Device& d) {
  std::string s = device_name(d);
#if defined(LIBREYOLO_WITH_CUDA)
  const auto* p = at::cuda::getDeviceProperties(d.index() < 0 ? 0 : d.index());
  s += " (" + std::string(p->name) + ", compute capability " + std::to_string(p->major) + "." +
       std::to_string(p->minor) + ")";
#endif
  return s;
}
}  // namespace detail

// What a run uses: AMP when cfg.amp (or, unset, the family default) asks for it AND the device is
// CUDA; float16 gets the gradient scaler. bfloat16 on a CUDA device without it is a SetupError.
inline Used resolve_precision(const TrainConfig& cfg, torch::Device device, bool family_amp_default) {
  const std::string dtype = parse_amp_dtype(cfg.amp_dtype);
  const bool want_amp = cfg.amp.value_or(family_amp_default);
  if (!want_amp) return Used{};
  if (!device.is_cuda()) {
    log::notice_once("precision.amp_on_cpu", "AMP (" + dtype + ") requested on device " + device_name(device) +
                                                 ": AMP applies only on CUDA, training in float32");
    return Used{};
  }
  if (dtype == "bfloat16" && !compat::cuda_bf16_supported(compat::device_index(device)))
    throw SetupError("amp_dtype = bfloat16 on device " + detail::cuda_device_description(device) +
                     ": this GPU has no bfloat16 support (needs compute capability >= 8.0); "
                     "use amp_dtype=float16 or amp=false");
  return Used{true, dtype, dtype == "float16"};
}

// The notice for an explicit amp=true over a family whose default is float32 (SPEC §2.2): it names the
// reason the family defaults to float32. Empty when there is nothing to say.
inline std::string fp32_family_override(const TrainConfig& cfg, std::string_view family, bool family_amp_default,
                                        std::string_view fp32_reason) {
  if (family_amp_default || !cfg.amp.value_or(false)) return {};
  return "amp=true: " + std::string(family) + " trains in float32 by default (" + std::string(fp32_reason) +
         "); AMP is on as asked";
}

// RAII: enables CUDA autocast with a dtype for its lifetime, then restores the previous autocast
// state. The weight cache can be switched off (inference graphs: set_capture_active; the training graphs
// empty it at their recordings' edges instead). A default-constructed guard does nothing.
class AutocastGuard {
 public:
  AutocastGuard() = default;
  AutocastGuard(at::ScalarType dtype, bool cache_enabled)
      : active_(true),
        prev_enabled_(compat::cuda_autocast_enabled()),
        prev_dtype_(compat::cuda_autocast_dtype()),
        prev_cache_(compat::autocast_cache_enabled()) {
    compat::set_cuda_autocast(true, dtype);
    compat::set_autocast_cache_enabled(cache_enabled);
    at::autocast::increment_nesting();
  }
  AutocastGuard(AutocastGuard&& o) noexcept
      : active_(o.active_), prev_enabled_(o.prev_enabled_), prev_dtype_(o.prev_dtype_), prev_cache_(o.prev_cache_) {
    o.active_ = false;
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;
  ~AutocastGuard() {
    if (!active_) return;
    // As torch.autocast's __exit__: the cast cache is dropped when the outermost region closes.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_cuda_autocast(prev_enabled_, prev_dtype_);
    compat::set_autocast_cache_enabled(prev_cache_);
  }
  bool active() const { return active_; }

 private:
  bool active_ = false;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kHalf;
  bool prev_cache_ = true;
};

// What Amp<D> and FamilyDefault share once the precision is resolved: the autocast guard (weight cache
// off for inference graphs) and the GradScaler (enabled for float16 on CUDA only).
class ResolvedPrecision {
 public:
  // On: autocast's cast cache off (the inference graphs of facade.hpp). Training never sets it, so the cache
  // works as in eager; its graph recordings empty the cache at their edges.
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
  // cuda_graph=step: the scaler whose device form the whole-step graph runs (nullptr when disabled).
  GradScaler* device_scaler() { return scaler_.enabled() ? &scaler_ : nullptr; }

 protected:
  void adopt(const Used& u) {
    used_ = u;
    dtype_ = u.amp ? amp_scalar_type(u.dtype) : at::kFloat;
    GradScalerOptions so;
    so.enabled = u.scaler;
    scaler_ = GradScaler(so);
  }

 private:
  Used used_{};
  at::ScalarType dtype_ = at::kFloat;
  GradScaler scaler_{GradScalerOptions{.enabled = false}};  // enabled by adopt() for float16 on CUDA
  bool capture_active_ = false;
};

template <at::ScalarType D>
struct Amp : ResolvedPrecision {
  static_assert(D == at::kHalf || D == at::kBFloat16, "Amp<D>: D must be at::kHalf or at::kBFloat16");
  static constexpr const char* dtype_name = amp_dtype_name(D);

  // The composition chooses AMP with dtype D; cfg.amp=false / another amp_dtype are reported and
  // ignored (as Fp32 does for amp=true). family_amp_default does not apply to an explicit policy.
  void setup(const TrainConfig& cfg, torch::Device device, bool /*family_amp_default*/) {
    if (cfg.amp.has_value() && !*cfg.amp)
      log::notice_once(std::string("precision.amp_ignored.") + dtype_name,
                       std::string("amp=false ignored: this trainer is composed with precision::Amp<") + dtype_name +
                           ">");
    if (parse_amp_dtype(cfg.amp_dtype) != dtype_name)
      log::notice_once(std::string("precision.dtype_ignored.") + dtype_name,
                       "amp_dtype=" + cfg.amp_dtype + " ignored: this trainer is composed with precision::Amp<" +
                           dtype_name + ">");
    TrainConfig forced = cfg;
    forced.amp = true;
    forced.amp_dtype = dtype_name;
    adopt(resolve_precision(forced, device, true));
  }
};

using AmpHalf = Amp<at::kHalf>;
using AmpBFloat16 = Amp<at::kBFloat16>;

}  // namespace libreyolo::precision
