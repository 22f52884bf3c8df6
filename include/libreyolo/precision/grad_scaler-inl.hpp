#pragma once
// Definitions of grad_scaler.hpp (core/api.hpp): included by grad_scaler.hpp when header-only, compiled once otherwise.
#include <libreyolo/precision/grad_scaler.hpp>

namespace libreyolo::precision::detail {

LIBREYOLO_INLINE void non_finite_check_and_unscale(const std::vector<torch::Tensor>& grads, torch::Tensor& found_inf,
                                                   const torch::Tensor& inv_scale) {
  torch::Tensor any_bad = torch::zeros({}, found_inf.options().dtype(torch::kBool));
  for (const auto& g : grads) {
    any_bad.logical_or_(torch::isfinite(g).logical_not().any());
    g.mul_(inv_scale);
  }
  found_inf.copy_(torch::maximum(found_inf, any_bad.to(found_inf.scalar_type())));
}

LIBREYOLO_INLINE void update_scale(torch::Tensor& scale, torch::Tensor& growth_tracker, const torch::Tensor& found_inf,
                                   double growth_factor, double backoff_factor, int64_t growth_interval) {
  const torch::Tensor found = found_inf.to(torch::kDouble) != 0;
  const torch::Tensor s = scale.to(torch::kDouble);
  const torch::Tensor successful = growth_tracker + 1;
  const torch::Tensor grow = successful == growth_interval;
  const torch::Tensor grown = (s * growth_factor).to(torch::kFloat);
  const torch::Tensor grown_ok = torch::where(torch::isfinite(grown), grown, scale);
  const torch::Tensor backed_off = (s * backoff_factor).to(torch::kFloat);
  const torch::Tensor new_scale = torch::where(found, backed_off, torch::where(grow, grown_ok, scale));
  const torch::Tensor new_tracker =
      torch::where(found.logical_or(grow), torch::zeros_like(growth_tracker), successful.to(growth_tracker.dtype()));
  scale.copy_(new_scale);
  growth_tracker.copy_(new_tracker);
}

}  // namespace libreyolo::precision::detail

namespace libreyolo::precision {

LIBREYOLO_INLINE torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  if (!opt_.enabled) return loss;
  if (!scale_.defined()) init_state(loss.device());
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

LIBREYOLO_INLINE void GradScaler::update() {
  if (!opt_.enabled) return;
  require_state("update");
  torch::Tensor found;
  for (auto& [key, st] : per_opt_) {
    if (!st.found_inf.defined()) continue;
    torch::Tensor f = st.found_inf.to(scale_.device(), /*non_blocking=*/true);
    found = found.defined() ? found + f : f;
  }
  if (!found.defined())
    throw Error("GradScaler::update(): no inf checks were recorded prior to update (call step() first)");
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found, opt_.growth_factor, opt_.backoff_factor,
                           opt_.growth_interval);
  } else {
    detail::update_scale(scale_, growth_tracker_, found, opt_.growth_factor, opt_.backoff_factor,
                         opt_.growth_interval);
  }
  per_opt_.clear();
}

LIBREYOLO_INLINE torch::Tensor GradScaler::device_unscale_(const std::vector<torch::Tensor>& params) {
  if (!opt_.enabled) return {};
  require_state("device_unscale_");
  torch::NoGradGuard no_grad;
  if (!found_.defined() || found_.device() != scale_.device()) found_ = torch::zeros({}, scale_.options());
  found_.zero_();
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return found_;
  for (const auto& g : grads)
    if (g.scalar_type() != grads.front().scalar_type() || g.device() != scale_.device())
      throw Error("GradScaler::device_unscale_: the grads must share one dtype and the scale's device");
  if (scale_.is_cuda()) at::_amp_foreach_non_finite_check_and_unscale_(grads, found_, inv_scale);
  else detail::non_finite_check_and_unscale(grads, found_, inv_scale);
  return found_;
}

LIBREYOLO_INLINE void GradScaler::device_update(const torch::Tensor& found_inf) {
  if (!opt_.enabled) return;
  require_state("device_update");
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf, opt_.growth_factor, opt_.backoff_factor,
                           opt_.growth_interval);
  } else {
    detail::update_scale(scale_, growth_tracker_, found_inf, opt_.growth_factor, opt_.backoff_factor,
                         opt_.growth_interval);
  }
}

LIBREYOLO_INLINE double GradScaler::scale_value() const {
  if (!opt_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<float>() : opt_.init_scale;
}

LIBREYOLO_INLINE int64_t GradScaler::growth_tracker_value() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int>() : init_growth_tracker_;
}

LIBREYOLO_INLINE void GradScaler::save(train::Checkpoint& ck, const std::string& prefix) const {
  if (!opt_.enabled) return;
  using train::detail::join_key;
  ck.tensors[join_key(prefix, "grad_scaler.scale")] = torch::full({}, scale_value(), torch::kFloat);
  ck.tensors[join_key(prefix, "grad_scaler.growth_tracker")] = torch::full({}, growth_tracker_value(), torch::kInt);
  ck.meta[join_key(prefix, "grad_scaler")] = {{"growth_factor", opt_.growth_factor},
                                     {"backoff_factor", opt_.backoff_factor},
                                     {"growth_interval", opt_.growth_interval}};
}

LIBREYOLO_INLINE void GradScaler::load(const train::Checkpoint& ck, const std::string& prefix) {
  if (!opt_.enabled) return;
  using train::detail::join_key;
  const std::string ks = join_key(prefix, "grad_scaler.scale"), kt = join_key(prefix, "grad_scaler.growth_tracker");
  auto is = ck.tensors.find(ks), it = ck.tensors.find(kt);
  if (is == ck.tensors.end() && it == ck.tensors.end()) {
    log::notice_once("precision.grad_scaler.no_state",
                     "checkpoint has no grad scaler state (saved without float16 AMP): starting from scale " +
                         std::to_string(opt_.init_scale));
    return;
  }
  const double s = checked_scalar(ks, is == ck.tensors.end() ? nullptr : &is->second, true);
  const double g = checked_scalar(kt, it == ck.tensors.end() ? nullptr : &it->second, false);
  if (auto m = ck.meta.find(join_key(prefix, "grad_scaler")); m != ck.meta.end()) {
    // PyTorch's load_state_dict takes the factors and interval from the saved state too.
    GradScalerOptions o = opt_;
    try {
      o.growth_factor = m->value("growth_factor", o.growth_factor);
      o.backoff_factor = m->value("backoff_factor", o.backoff_factor);
      o.growth_interval = m->value("growth_interval", o.growth_interval);
      validate(o);
    } catch (const std::exception& e) {
      throw CheckpointError("checkpoint meta '" + join_key(prefix, "grad_scaler") + "' = " + m->dump() + ": " +
                            e.what());
    }
    opt_ = o;
  }
  // Like PyTorch: before the first scale() the values wait to be created on the loss's device.
  opt_.init_scale = s;
  init_growth_tracker_ = static_cast<int64_t>(g);
  if (scale_.defined()) {
    scale_.fill_(s);
    growth_tracker_.fill_(init_growth_tracker_);
  }
  per_opt_.clear();
}

LIBREYOLO_INLINE void GradScaler::validate(const GradScalerOptions& o) {
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale))
    throw ConfigError("GradScaler init_scale = " + std::to_string(o.init_scale) + ": must be finite and > 0");
  if (!(o.growth_factor > 1.0))
    throw ConfigError("GradScaler growth_factor = " + std::to_string(o.growth_factor) + ": must be > 1");
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1.0))
    throw ConfigError("GradScaler backoff_factor = " + std::to_string(o.backoff_factor) +
                      ": must be in (0, 1)");
  if (o.growth_interval <= 0)
    throw ConfigError("GradScaler growth_interval = " + std::to_string(o.growth_interval) + ": must be > 0");
}

LIBREYOLO_INLINE void GradScaler::init_state(torch::Device dev) {
  scale_ = torch::full({}, opt_.init_scale, torch::TensorOptions().dtype(torch::kFloat).device(dev));
  growth_tracker_ = torch::full({}, init_growth_tracker_, torch::TensorOptions().dtype(torch::kInt).device(dev));
}

LIBREYOLO_INLINE void GradScaler::require_state(const char* fn) const {
  if (!scale_.defined())
    throw Error(std::string("GradScaler::") + fn +
                "() called but the scale was never used: call scale(loss) earlier in the iteration");
}

LIBREYOLO_INLINE double GradScaler::checked_scalar(const std::string& key, const torch::Tensor* t,
                                                   bool floating) {
  if (t == nullptr)
    throw CheckpointError("checkpoint key '" + key + "' missing (the grad scaler state is incomplete)");
  if (t->numel() != 1 || (floating != t->is_floating_point()))
    throw CheckpointError("checkpoint key '" + key + "': expected one " + (floating ? "float" : "integer") +
                          " value, got shape " + train::detail::shape_str(*t) + " of " +
                          std::string(c10::toString(t->scalar_type())));
  const double v = t->to(torch::kCPU, torch::kDouble).item<double>();
  if (floating ? !(v > 0 && std::isfinite(v)) : v < 0)
    throw CheckpointError("checkpoint key '" + key + "' = " + std::to_string(v) + ": allowed " +
                          (floating ? "a finite value > 0" : "a value >= 0"));
  return v;
}

LIBREYOLO_INLINE torch::Tensor GradScaler::unscale_grads(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  std::map<std::tuple<int, int, int>, std::vector<torch::Tensor>> groups;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.scalar_type() == torch::kHalf)
      throw Error("GradScaler: attempting to unscale float16 gradients (parameters must stay float32 under AMP)");
    groups[{static_cast<int>(g.device().type()), g.device().index(), static_cast<int>(g.scalar_type())}].push_back(g);
  }
  if (groups.empty()) return {};
  torch::Tensor found = torch::zeros({}, scale_.options());
  for (auto& [key, grads] : groups) {
    const torch::Device dev = grads.front().device();
    torch::Tensor f = torch::zeros({}, scale_.options().device(dev));
    const torch::Tensor inv = inv_scale.to(dev, /*non_blocking=*/true);
    if (dev.is_cuda()) at::_amp_foreach_non_finite_check_and_unscale_(grads, f, inv);
    else detail::non_finite_check_and_unscale(grads, f, inv);
    found = found + f.to(scale_.device(), /*non_blocking=*/true);
  }
  return found;
}

}  // namespace libreyolo::precision
