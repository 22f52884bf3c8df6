#pragma once
// Definitions of step_timing.hpp (core/api.hpp): included by step_timing.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/step_timing.hpp>

namespace libreyolo::profile {

LIBREYOLO_INLINE void StepPhases::mark(Phase p) {
  if (!rec_) return;
  close();
  open_ = PhaseSpan{step_, p, host_now_ns(), 0, true};
  range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);  // aligns host and trace clocks
  if (range_->isActive()) range_->before(phase_range_name(p));
}

LIBREYOLO_INLINE void StepPhases::close() {
  if (!rec_ || !open_) return;
  range_.reset();
  open_->end_ns = host_now_ns();
  rec_->phases.push_back(*open_);
  open_.reset();
}

LIBREYOLO_INLINE nlohmann::json step_breakdown_json(const Analysis& a, size_t top) {
  nlohmann::json j;
  j["cpu_ops_per_step"] = 0.0;
  for (const auto& o : a.ops) j["cpu_ops_per_step"] = j["cpu_ops_per_step"].get<double>() + o.count_per_step;
  j["launches_per_step"] = a.launches_per_step;
  j["mean_kernel_us"] = a.mean_kernel_us;
  for (const auto& p : a.phases)
    if (p.kernels_per_step > 0 || p.ops_per_step > 0)
      j["phases"][p.phase] = {{"gpu_ms", p.gpu_ms_per_step}, {"kernels", p.kernels_per_step}, {"cpu_ops", p.ops_per_step}};
  for (const auto& c : a.categories)
    if (c.ms_per_step > 0) j["categories"][c.name] = {{"ms", c.ms_per_step}, {"pct", c.pct}};
  for (size_t i = 0; i < a.kernels.size() && i < top; ++i) {
    const auto& k = a.kernels[i];
    j["top_kernels"].push_back({{"name", k.name}, {"raw_name", k.raw_name}, {"category", k.category}, {"ms", k.ms_per_step},
                                {"count", k.count_per_step}, {"pct", k.pct_of_gpu}});
  }
  for (size_t i = 0; i < a.ops.size() && i < top; ++i) {
    const auto& o = a.ops[i];
    j["top_ops"].push_back({{"name", o.name}, {"ms", o.ms_per_step}, {"count", o.count_per_step}});
  }
  return j;
}

}  // namespace libreyolo::profile
