#pragma once
// Definitions of writers.hpp (core/api.hpp): included by writers.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/writers.hpp>

namespace libreyolo::profile {

namespace detail {
LIBREYOLO_INLINE nlohmann::json vram_value(const Analysis& a) {
  const auto dev = a.meta.is_object() ? a.meta.value("device", std::string{}) : std::string{};
  return dev.rfind("cuda", 0) == 0 ? nlohmann::json(a.peak_vram_mb) : nlohmann::json(nullptr);
}
LIBREYOLO_INLINE json gpu_value(const Analysis& a, double v) { return a.trace_collected ? json(v) : json(nullptr); }
LIBREYOLO_INLINE json kernel_json(const KernelStat& k) {
  return {{"kernel", k.name},           {"raw_name", k.raw_name},     {"category", k.category},
          {"tensorcore", k.tensorcore}, {"ms_per_step", k.ms_per_step}, {"pct_of_gpu", k.pct_of_gpu},
          {"count_per_step", k.count_per_step}};
}
LIBREYOLO_INLINE json op_json(const OpStat& o) {
  return {{"op", o.name}, {"ms_per_step", o.ms_per_step}, {"pct_of_cpu_ops", o.pct_of_cpu_ops},
          {"count_per_step", o.count_per_step}};
}
LIBREYOLO_INLINE json top_kernels_json(const Analysis& a) {
  json out = json::array();
  for (size_t i = 0; i < a.kernels.size() && i < static_cast<size_t>(top_kernel_count); ++i) {
    const auto& k = a.kernels[i];
    out.push_back({{"name", k.name}, {"raw_name", k.raw_name}, {"pct", k.pct_of_gpu}, {"ms", k.ms_per_step},
                   {"count", k.count_per_step}});
  }
  return out;
}
LIBREYOLO_INLINE json categories_json(const Analysis& a) {
  json out = json::array();
  for (const auto& c : a.categories) out.push_back({{"name", c.name}, {"pct", c.pct}, {"ms", c.ms_per_step}});
  return out;
}
LIBREYOLO_INLINE json headline_json(const Analysis& a) {
  return {{"bound", a.verdict.bound},
          {"bound_why", a.verdict.why},
          {"step_ms", a.step_ms},
          {"img_per_s", a.img_per_s},
          {"dataload_ms", a.dataload_ms},
          {"dataload_frac", a.dataload_frac},
          {"compute_ms", a.compute_ms},
          {"gpu_util", gpu_value(a, a.gpu_util)},
          {"gpu_util_raw", gpu_value(a, a.gpu_util_raw)},
          {"memory_pressure", a.memory_pressure},
          {"cuda_mallocs_per_step", a.cuda_mallocs_per_step},
          {"cuda_frees_per_step", gpu_value(a, a.cuda_frees_per_step)},
          {"host_overhead_ms_per_step", gpu_value(a, a.host_overhead_ms_per_step)},
          {"launches_per_step", gpu_value(a, a.launches_per_step)},
          {"gpu_busy_ms_per_step", gpu_value(a, a.gpu_busy_ms_per_step)},
          {"gpu_kernel_sum_ms_per_step", gpu_value(a, a.gpu_kernel_sum_ms_per_step)},
          {"mean_kernel_us", gpu_value(a, a.mean_kernel_us)},
          {"kernels_per_step", gpu_value(a, a.kernels_per_step)},
          {"unique_kernels", a.trace_collected ? json(a.unique_kernels) : json(nullptr)},
          {"memcpy_ms_per_step", gpu_value(a, a.memcpy_ms_per_step)},
          {"memset_ms_per_step", gpu_value(a, a.memset_ms_per_step)},
          {"tensorcore_pct", gpu_value(a, a.tensorcore_pct)},
          {"peak_vram_mb", vram_value(a)}};
}
}  // namespace detail

LIBREYOLO_INLINE nlohmann::json profile_json(const Analysis& a) {
  using nlohmann::json;
  json doc = detail::headline_json(a);
  json metrics = doc;
  doc["schema"] = analysis_schema;
  doc["model"] = a.meta.value("model", std::string{});
  doc["config"] = a.meta;
  doc["trace_collected"] = a.trace_collected;
  doc["levers"] = a.verdict.levers;
  doc["notes"] = a.verdict.notes;
  doc["window"] = {{"wall_ms", a.wall_ms}, {"real_steps", a.real_steps}, {"synced_steps", a.synced_steps},
                   {"traced_steps", a.traced_steps}, {"warmup", a.warmup},
                   {"tracer_ms", {{"setup", a.tracer_setup_ms}, {"start", a.tracer_start_ms}, {"detach", a.tracer_detach_ms},
                                  {"readout", a.tracer_readout_ms}, {"convert", a.tracer_convert_ms}}}};
  json phases = json::array(), kernels_by_phase = json::object(), ops_by_phase = json::object();
  for (const auto& p : a.phases) {
    phases.push_back({{"phase", p.phase},
                      {"gpu_ms_per_step", detail::gpu_value(a, p.gpu_ms_per_step)},
                      {"wall_ms_per_step", p.wall_ms_per_step},
                      {"kernels_per_step", detail::gpu_value(a, p.kernels_per_step)},
                      {"ops_per_step", p.ops_per_step},
                      {"unique_kernels", p.unique_kernels}});
    metrics[p.phase + "_gpu_ms"] = detail::gpu_value(a, p.gpu_ms_per_step);
    metrics[p.phase + "_wall_ms"] = p.wall_ms_per_step;
    metrics[p.phase + "_kernels"] = detail::gpu_value(a, p.kernels_per_step);
    metrics[p.phase + "_ops"] = p.ops_per_step;
    json ks = json::array(), os = json::array();
    for (const auto& k : p.kernels) ks.push_back(detail::kernel_json(k));
    for (const auto& o : p.ops) os.push_back(detail::op_json(o));
    kernels_by_phase[p.phase] = ks;
    ops_by_phase[p.phase] = os;
  }
  json kernels = json::array(), ops = json::array();
  for (const auto& k : a.kernels) kernels.push_back(detail::kernel_json(k));
  for (const auto& o : a.ops) ops.push_back(detail::op_json(o));
  doc["metrics"] = metrics;
  doc["categories"] = detail::categories_json(a);
  doc["phases"] = phases;
  doc["kernels_by_phase"] = kernels_by_phase;
  doc["ops_by_phase"] = ops_by_phase;
  doc["top_kernels"] = detail::top_kernels_json(a);
  doc["kernels"] = kernels;
  doc["ops"] = ops;
  return doc;
}

LIBREYOLO_INLINE nlohmann::json summary_json(const Analysis& a) {
  using nlohmann::json;
  const auto& m = a.meta;
  auto meta_value = [&](const char* k) { return m.is_object() && m.contains(k) ? m.at(k) : json(nullptr); };
  json meta = json::object();
  for (const char* k : {"model", "device", "batch", "imgsz", "amp", "amp_dtype", "workers"}) meta[k] = meta_value(k);
  json composition = json::object();
  double total = 0;
  for (const auto& p : a.phases)
    if (p.phase != "dataload" && p.phase != outside_name) composition[p.phase] = p.wall_ms_per_step, total += p.wall_ms_per_step;
  const json analysis = {{"gpu_util", detail::gpu_value(a, a.gpu_util)},
                         {"gpu_util_raw", detail::gpu_value(a, a.gpu_util_raw)},
                         {"gpu_busy_ms_per_step", detail::gpu_value(a, a.gpu_busy_ms_per_step)},
                         {"mean_kernel_us", detail::gpu_value(a, a.mean_kernel_us)},
                         {"kernels_per_step", detail::gpu_value(a, a.kernels_per_step)},
                         {"memcpy_ms_per_step", detail::gpu_value(a, a.memcpy_ms_per_step)},
                         {"tensorcore_pct", detail::gpu_value(a, a.tensorcore_pct)},
                         {"cuda_mallocs_per_step", a.cuda_mallocs_per_step},
                         {"memory_pressure", a.memory_pressure},
                         {"top_kernels", detail::top_kernels_json(a)},
                         {"categories", detail::categories_json(a)},
                         {"peak_vram_mb", detail::vram_value(a)}};
  return {{"meta", meta},
          {"window", {{"warmup", a.warmup}, {"real_steps", a.real_steps}, {"synced_steps", a.synced_steps}}},
          {"real",
           {{"step_ms", a.step_ms}, {"dataload_ms", a.dataload_ms}, {"compute_ms", a.compute_ms},
            {"img_per_s", a.img_per_s}, {"dataload_frac", a.dataload_frac}}},
          {"composition_ms", composition},
          {"composition_total_ms", total},
          {"bound", a.verdict.bound},
          {"bound_why", a.verdict.why},
          {"trace", {{"collected", a.trace_collected}, {"file", "profile_trace.json"}}},
          {"analysis", analysis}};
}

LIBREYOLO_INLINE nlohmann::json chrome_trace_json(const WindowRecord& rec) {
  using nlohmann::json;
  const int64_t t0 = rec.steps.empty() ? 0 : rec.steps.front().start_ns;
  auto us = [t0](int64_t ns) { return static_cast<double>(ns - t0) / 1e3; };
  json ev = json::array();
  auto meta = [&](const char* what, int pid, int64_t tid, const std::string& name) {
    ev.push_back({{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  meta("process_name", 1, 0, "host");
  meta("process_name", 2, 0, "GPU");
  meta("thread_name", 1, 1, "steps");
  meta("thread_name", 1, 2, "phases");
  meta("thread_name", 1, 3, "cpu ops");
  meta("thread_name", 1, 4, "cuda runtime");
  auto complete = [&](const std::string& name, const char* cat, int pid, int64_t tid, int64_t s, int64_t dur, json args) {
    ev.push_back({{"ph", "X"}, {"name", name}, {"cat", cat}, {"pid", pid}, {"tid", tid}, {"ts", us(s)},
                  {"dur", static_cast<double>(dur) / 1e3}, {"args", std::move(args)}});
  };
  for (size_t i = 0; i < rec.steps.size(); ++i) {
    const auto& s = rec.steps[i];
    complete("step " + std::to_string(i), "step", 1, 1, s.start_ns, s.end_ns - s.start_ns,
             {{"synced", s.synced}, {"images", s.images}});
  }
  for (const auto& p : rec.phases)
    complete(std::string(phase_name(p.phase)), "phase", 1, 2, p.start_ns, p.end_ns - p.start_ns,
             {{"step", p.step}, {"synced", p.synced}});
  for (const auto& o : rec.cpu_ops) complete(o.name, "cpu_op", 1, 3, o.start_ns, o.dur_ns, json::object());
  std::set<int64_t> streams;
  for (const auto& g : rec.gpu) streams.insert(g.stream);
  for (auto s : streams) meta("thread_name", 2, s, "stream " + std::to_string(s));
  std::unordered_map<uint64_t, const GpuActivity*> by_corr;
  for (const auto& g : rec.gpu) by_corr.emplace(g.correlation, &g);
  for (const auto& c : rec.runtime) {
    complete(c.name, "cuda_runtime", 1, 4, c.start_ns, c.dur_ns, {{"correlation", c.correlation}});
    auto it = by_corr.find(c.correlation);
    if (it == by_corr.end()) continue;
    ev.push_back({{"ph", "s"}, {"name", "launch"}, {"cat", "launch"}, {"id", c.correlation}, {"pid", 1},
                  {"tid", 4}, {"ts", us(c.start_ns)}});
    ev.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "launch"}, {"cat", "launch"}, {"id", c.correlation},
                  {"pid", 2}, {"tid", it->second->stream}, {"ts", us(it->second->start_ns)}});
  }
  for (const auto& g : rec.gpu)
    complete(g.name, g.kind == GpuKind::kernel ? "kernel" : "memory", 2, g.stream, g.start_ns,
             g.dur_ns, {{"correlation", g.correlation}, {"kind", gpu_kind_name(g.kind)}});
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
}

LIBREYOLO_INLINE void write_text_file(const std::filesystem::path& path, const std::string& text) {
  if (auto why = atomic_file::write(path, "profile file", text); !why.empty())
    throw SetupError("profile: cannot write '" + path.string() + "': " + why +
                     " (check that the run directory exists and is writable, and that the disk is not full)");
}

LIBREYOLO_INLINE void write_artifacts(const std::filesystem::path& run_dir, const WindowRecord& rec, const Analysis& a) {
  std::filesystem::create_directories(run_dir);
  write_text_file(run_dir / "profile.json", profile_json(a).dump(1));
  write_text_file(run_dir / "profile_summary.json", summary_json(a).dump(1));
  write_text_file(run_dir / "profile_trace.json", chrome_trace_json(rec).dump());
  write_text_file(run_dir / "timeline.html", timeline_html(rec, profile_json(a)));
}

}  // namespace libreyolo::profile
