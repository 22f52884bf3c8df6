#pragma once
// Definitions of analysis.hpp (core/api.hpp): included by analysis.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/analysis.hpp>

namespace libreyolo::profile {

LIBREYOLO_INLINE std::string_view slot_name(int slot) {
  return slot == outside_slot ? outside_name : phase_name(static_cast<Phase>(slot));
}

LIBREYOLO_INLINE int64_t interval_union_ns(std::vector<std::pair<int64_t, int64_t>> iv) {
  std::sort(iv.begin(), iv.end());
  int64_t total = 0, cur_s = 0, cur_e = 0;
  bool open = false;
  for (auto [s, e] : iv) {
    if (e <= s) continue;
    if (open && s <= cur_e) {
      cur_e = std::max(cur_e, e);
      continue;
    }
    if (open) total += cur_e - cur_s;
    cur_s = s, cur_e = e, open = true;
  }
  if (open) total += cur_e - cur_s;
  return total;
}

LIBREYOLO_INLINE PhaseLocator::PhaseLocator(const std::vector<PhaseSpan>& spans) : spans_(spans) {
  std::sort(spans_.begin(), spans_.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
}

LIBREYOLO_INLINE int PhaseLocator::slot_at(int64_t t) const {
  auto it = std::upper_bound(spans_.begin(), spans_.end(), t,
                             [](int64_t v, const PhaseSpan& p) { return v < p.start_ns; });
  if (it == spans_.begin()) return outside_slot;
  --it;
  return t <= it->end_ns ? static_cast<int>(it->phase) : outside_slot;
}

LIBREYOLO_INLINE std::vector<int> attribute_gpu_to_phases(const WindowRecord& rec) {
  std::unordered_map<uint64_t, int64_t> launch_start;
  for (const auto& c : rec.runtime) launch_start.emplace(c.correlation, c.start_ns);
  PhaseLocator where(rec.phases);
  std::vector<int> slots;
  slots.reserve(rec.gpu.size());
  for (const auto& g : rec.gpu) {
    auto it = launch_start.find(g.correlation);
    slots.push_back(it == launch_start.end() ? outside_slot : where.slot_at(it->second));
  }
  return slots;
}

LIBREYOLO_INLINE double traced_step_count(const WindowRecord& rec) {
  const auto n = static_cast<int>(rec.steps.size()) - std::max(0, rec.traced_from);
  return static_cast<double>(std::max(n, 1));
}

namespace detail {
LIBREYOLO_INLINE double ns_to_ms(double ns) { return ns / 1e6; }

LIBREYOLO_INLINE bool icontains(const std::string& s, std::string_view needle) {
  return lowercase(s).find(needle) != std::string::npos;
}

LIBREYOLO_INLINE void analyse_host(const WindowRecord& rec, Analysis& a) {
  const int n = static_cast<int>(rec.steps.size());
  std::vector<double> dataload_of_step(n, 0.0);
  for (const auto& p : rec.phases)
    if (p.phase == Phase::dataload) dataload_of_step[p.step] += static_cast<double>(p.end_ns - p.start_ns);
  double step_sum = 0, dl_sum = 0, img_sum = 0;
  for (int i = 0; i < n; ++i) {
    const auto& s = rec.steps[i];
    if (s.synced) {
      ++a.synced_steps;
      continue;
    }
    ++a.real_steps;
    step_sum += static_cast<double>(s.end_ns - s.start_ns);
    dl_sum += dataload_of_step[i];
    img_sum += s.images;
  }
  if (a.real_steps > 0) {
    a.step_ms = ns_to_ms(step_sum / a.real_steps);
    a.dataload_ms = ns_to_ms(dl_sum / a.real_steps);
    a.compute_ms = a.step_ms - a.dataload_ms;
    a.img_per_s = a.step_ms > 0 ? (img_sum / a.real_steps) / (a.step_ms / 1e3) : 0;
    a.dataload_frac = a.step_ms > 0 ? a.dataload_ms / a.step_ms : 0;
  }
  if (n > 0) a.wall_ms = ns_to_ms(static_cast<double>(rec.steps.back().end_ns - rec.steps.front().start_ns));
  // Wall time per phase (and `outside` = step minus its phases) over the synced steps.
  const bool use_synced = a.synced_steps > 0;
  const int counted = use_synced ? a.synced_steps : a.real_steps;
  std::vector<double> wall(phase_count + 1, 0.0);
  for (const auto& p : rec.phases)
    if (rec.steps[p.step].synced == use_synced) wall[static_cast<int>(p.phase)] += static_cast<double>(p.end_ns - p.start_ns);
  double steps_total = 0;
  for (const auto& s : rec.steps)
    if (s.synced == use_synced) steps_total += static_cast<double>(s.end_ns - s.start_ns);
  double in_phases = 0;
  for (int i = 0; i < phase_count; ++i) in_phases += wall[i];
  wall[outside_slot] = std::max(0.0, steps_total - in_phases);
  for (int i = 0; i <= phase_count; ++i)
    a.phases[i].wall_ms_per_step = counted > 0 ? ns_to_ms(wall[i] / counted) : 0;
}

LIBREYOLO_INLINE std::vector<KernelStat> kernel_stats(const NameTable& table, double steps) {
  double total = 0;
  for (const auto& [name, t] : table) total += t.ns;
  std::vector<KernelStat> out;
  for (const auto& [name, t] : table)
    out.push_back({name, short_kernel_name(name), std::string(kernel_category(name)), is_tensorcore_kernel(name),
                   ns_to_ms(t.ns / steps), total > 0 ? 100.0 * t.ns / total : 0, t.count / steps});
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.ms_per_step > y.ms_per_step; });
  return out;
}

LIBREYOLO_INLINE std::vector<OpStat> op_stats(const NameTable& table, double steps) {
  double total = 0;
  for (const auto& [name, t] : table) total += t.ns;
  std::vector<OpStat> out;
  for (const auto& [name, t] : table)
    out.push_back({name, ns_to_ms(t.ns / steps), total > 0 ? 100.0 * t.ns / total : 0, t.count / steps});
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.ms_per_step > y.ms_per_step; });
  return out;
}

LIBREYOLO_INLINE void analyse_gpu(const WindowRecord& rec, Analysis& a) {
  const double steps = traced_step_count(rec);
  const auto slots = attribute_gpu_to_phases(rec);
  NameTable kernels;
  std::vector<NameTable> kernels_in(phase_count + 1);
  std::vector<double> slot_gpu_ns(phase_count + 1, 0.0);
  std::vector<std::pair<int64_t, int64_t>> intervals;
  double kernel_ns = 0, memcpy_ns = 0, memset_ns = 0, tensorcore_ns = 0;
  for (size_t i = 0; i < rec.gpu.size(); ++i) {
    const auto& g = rec.gpu[i];
    const auto dur = static_cast<double>(g.dur_ns);
    slot_gpu_ns[slots[i]] += dur;
    if (g.kind == GpuKind::memcpy) memcpy_ns += dur;
    if (g.kind == GpuKind::memset) memset_ns += dur;
    if (g.kind != GpuKind::kernel) continue;
    intervals.emplace_back(g.start_ns, g.start_ns + g.dur_ns);
    kernel_ns += dur;
    if (is_tensorcore_kernel(g.name)) tensorcore_ns += dur;
    kernels[g.name].ns += dur, kernels[g.name].count += 1;
    kernels_in[slots[i]][g.name].ns += dur, kernels_in[slots[i]][g.name].count += 1;
  }
  const double n_kernels = static_cast<double>(intervals.size());
  a.gpu_busy_ms_per_step = ns_to_ms(static_cast<double>(interval_union_ns(intervals)) / steps);
  a.gpu_kernel_sum_ms_per_step = ns_to_ms(kernel_ns / steps);
  a.gpu_util_raw = a.step_ms > 0 ? a.gpu_busy_ms_per_step / a.step_ms : 0;
  a.gpu_util = std::min(a.gpu_util_raw, 1.0);
  a.kernels_per_step = n_kernels / steps;
  a.mean_kernel_us = n_kernels > 0 ? kernel_ns / n_kernels / 1e3 : 0;
  a.unique_kernels = static_cast<int>(kernels.size());
  a.memcpy_ms_per_step = ns_to_ms(memcpy_ns / steps);
  a.memset_ms_per_step = ns_to_ms(memset_ns / steps);
  a.tensorcore_pct = kernel_ns > 0 ? 100.0 * tensorcore_ns / kernel_ns : 0;
  a.host_overhead_ms_per_step = std::max(0.0, a.step_ms - a.gpu_busy_ms_per_step - a.dataload_ms);
  double launches = 0, frees = 0;
  for (const auto& c : rec.runtime) {
    if (icontains(c.name, "launch")) launches += 1;
    if (c.name.rfind("cudaFree", 0) == 0) frees += 1;
  }
  a.launches_per_step = launches / steps;
  a.cuda_frees_per_step = frees / steps;
  a.kernels = kernel_stats(kernels, steps);
  for (auto cat : kernel_categories) {
    CategoryStat c{std::string(cat), 0, 0};
    for (const auto& k : a.kernels)
      if (k.category == cat) c.ms_per_step += k.ms_per_step, c.pct += k.pct_of_gpu;
    a.categories.push_back(c);
  }
  for (int s = 0; s <= phase_count; ++s) {
    auto& row = a.phases[s];
    row.gpu_ms_per_step = ns_to_ms(slot_gpu_ns[s] / steps);
    row.kernels = kernel_stats(kernels_in[s], steps);
    row.unique_kernels = static_cast<int>(kernels_in[s].size());
    for (const auto& k : row.kernels) row.kernels_per_step += k.count_per_step;
  }
}

LIBREYOLO_INLINE void analyse_ops(const WindowRecord& rec, Analysis& a) {
  const double steps = traced_step_count(rec);
  PhaseLocator where(rec.phases);
  NameTable ops;
  std::vector<NameTable> ops_in(phase_count + 1);
  for (const auto& o : rec.cpu_ops) {
    ops[o.name].ns += static_cast<double>(o.dur_ns), ops[o.name].count += 1;
    auto& t = ops_in[where.slot_at(o.start_ns)][o.name];
    t.ns += static_cast<double>(o.dur_ns), t.count += 1;
  }
  a.ops = op_stats(ops, steps);
  for (int s = 0; s <= phase_count; ++s) {
    a.phases[s].ops = op_stats(ops_in[s], steps);
    for (const auto& o : a.phases[s].ops) a.phases[s].ops_per_step += o.count_per_step;
  }
}
}  // namespace detail

LIBREYOLO_INLINE Analysis analyse(const WindowRecord& rec) {
  Analysis a;
  a.meta = rec.meta;
  a.warmup = rec.warmup;
  a.trace_collected = rec.trace_collected;
  a.traced_steps = rec.trace_collected ? static_cast<int>(traced_step_count(rec)) : 0;
  a.tracer_setup_ms = rec.tracer_setup_ms, a.tracer_start_ms = rec.tracer_start_ms, a.tracer_readout_ms = rec.tracer_readout_ms;
  a.tracer_convert_ms = rec.tracer_convert_ms, a.tracer_detach_ms = rec.tracer_detach_ms;
  for (int s = 0; s <= phase_count; ++s) a.phases.push_back(PhaseStat{std::string(slot_name(s))});
  detail::analyse_host(rec, a);
  detail::analyse_gpu(rec, a);
  detail::analyse_ops(rec, a);
  const double steps = static_cast<double>(std::max<size_t>(rec.steps.size(), 1));
  a.cuda_mallocs_per_step = static_cast<double>(rec.device_mallocs) / steps;
  a.peak_vram_mb = static_cast<double>(rec.peak_vram_bytes) / (1024.0 * 1024.0);
  a.memory_pressure = a.cuda_mallocs_per_step >= mallocs_per_step_limit ||
                      (a.trace_collected && a.gpu_util_raw > raw_util_limit);
  VerdictInputs in;
  in.trace_collected = a.trace_collected;
  in.mallocs_per_step = a.cuda_mallocs_per_step;
  in.gpu_util_raw = a.gpu_util_raw;
  in.dataload_frac = a.dataload_frac;
  in.step_ms = a.step_ms;
  in.gpu_busy_ms_per_step = a.gpu_busy_ms_per_step;
  in.host_overhead_ms_per_step = a.host_overhead_ms_per_step;
  in.launches_per_step = a.launches_per_step;
  if (a.meta.is_object() && a.meta.contains("amp") && a.meta["amp"].is_boolean()) in.amp = a.meta["amp"].get<bool>();
  if (a.meta.is_object() && a.meta.contains("device") && a.meta["device"].is_string())
    in.cuda_device = a.meta["device"].get<std::string>().rfind("cuda", 0) == 0;
  a.verdict = decide_verdict(in);
  return a;
}

}  // namespace libreyolo::profile
