#pragma once
// The plain record of one profiled window: host spans (steps, phases), GPU activities, CUDA runtime
// calls and CPU ops, all in one clock (nanoseconds). The collector fills it, the analysis reads it,
// and its JSON form is what test fixtures (synthetic or recorded on a GPU machine) are stored as.
#include <libreyolo/core/error.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::profile {

// The five phases of a training step, in SPEC order.
enum class Phase { dataload, to_device, forward, backward, optimizer };
inline constexpr std::array<Phase, 5> all_phases = {Phase::dataload, Phase::to_device, Phase::forward,
                                                    Phase::backward, Phase::optimizer};
inline constexpr int phase_count = 5;

inline constexpr std::string_view phase_name(Phase p) {
  constexpr std::array<std::string_view, 5> names = {"dataload", "to_device", "forward", "backward",
                                                     "optimizer"};
  return names[static_cast<int>(p)];
}
inline std::optional<Phase> phase_from_name(std::string_view s) {
  for (Phase p : all_phases)
    if (phase_name(p) == s) return p;
  return std::nullopt;
}

// One training step of the window. `synced`: the step ran in the second (device-synchronised) half.
struct StepSpan {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool synced = false;
  int images = 0;
};

struct PhaseSpan {
  int step = 0;  // index into WindowRecord::steps
  Phase phase = Phase::dataload;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool synced = false;
};

enum class GpuKind { kernel, memcpy, memset };
inline constexpr std::string_view gpu_kind_name(GpuKind k) {
  return k == GpuKind::kernel ? "kernel" : k == GpuKind::memcpy ? "memcpy" : "memset";
}

struct GpuActivity {
  GpuKind kind = GpuKind::kernel;
  std::string name;
  int64_t stream = 0;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  uint64_t correlation = 0;  // equals the correlation id of the runtime call that launched it
};

// A CUDA runtime API call on the host (cudaLaunchKernel, cudaMemcpyAsync, cudaMalloc, ...).
struct RuntimeCall {
  std::string name;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  uint64_t correlation = 0;
  uint64_t thread = 0;
};

struct CpuOp {
  std::string name;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
};

struct WindowRecord {
  int warmup = 0;  // steps discarded before the window (for the report only)
  std::vector<StepSpan> steps;
  std::vector<PhaseSpan> phases;
  std::vector<GpuActivity> gpu;
  std::vector<RuntimeCall> runtime;
  std::vector<CpuOp> cpu_ops;
  int64_t peak_vram_bytes = 0;
  int64_t device_mallocs = 0;  // cudaMalloc calls made by the caching allocator during the window
  bool trace_collected = false;
  // Index of the first traced step: the tracer runs from there to the window's end (the last steps of
  // the synchronised half), so the unsynchronised steps are timed untraced. Device figures are per
  // traced step.
  int traced_from = 0;
  // What the tracer itself cost, outside the measured steps: on the training thread its one-off set-up
  // (CUPTI), attaching it and detaching it at the window's end; then, on the report thread while
  // training goes on, Kineto's stop and read-out and converting its events into this record.
  double tracer_setup_ms = 0, tracer_start_ms = 0, tracer_detach_ms = 0, tracer_readout_ms = 0, tracer_convert_ms = 0;
  nlohmann::json meta = nlohmann::json::object();
};

// ---- JSON (de)serialisation ---------------------------------------------------------------------
inline constexpr std::string_view record_schema = "libreyolo.profile.record/v1";
// Schemas of the analysis files (writers.hpp, report.hpp), kept here so readers need not include writers.
inline constexpr std::string_view analysis_schema = "libreyolo.profile.analysis/v1";
inline constexpr std::string_view repeat_schema = "libreyolo.profile.repeat/v1";

inline nlohmann::json to_json(const WindowRecord& r) {
  using nlohmann::json;
  json steps = json::array(), phases = json::array(), gpu = json::array(), rt = json::array(),
       ops = json::array();
  for (const auto& s : r.steps)
    steps.push_back({{"start_ns", s.start_ns}, {"end_ns", s.end_ns}, {"synced", s.synced}, {"images", s.images}});
  for (const auto& p : r.phases)
    phases.push_back({{"step", p.step}, {"phase", phase_name(p.phase)}, {"start_ns", p.start_ns},
                      {"end_ns", p.end_ns}, {"synced", p.synced}});
  for (const auto& g : r.gpu)
    gpu.push_back({{"kind", gpu_kind_name(g.kind)}, {"name", g.name}, {"stream", g.stream},
                   {"start_ns", g.start_ns}, {"dur_ns", g.dur_ns}, {"correlation", g.correlation}});
  for (const auto& c : r.runtime)
    rt.push_back({{"name", c.name}, {"start_ns", c.start_ns}, {"dur_ns", c.dur_ns},
                  {"correlation", c.correlation}, {"thread", c.thread}});
  for (const auto& o : r.cpu_ops) ops.push_back({{"name", o.name}, {"start_ns", o.start_ns}, {"dur_ns", o.dur_ns}});
  return {{"schema", record_schema}, {"warmup", r.warmup}, {"steps", steps}, {"phases", phases},
          {"gpu", gpu}, {"runtime", rt}, {"cpu_ops", ops}, {"peak_vram_bytes", r.peak_vram_bytes},
          {"device_mallocs", r.device_mallocs}, {"trace_collected", r.trace_collected}, {"traced_from", r.traced_from},
          {"tracer_ms", {{"setup", r.tracer_setup_ms}, {"start", r.tracer_start_ms}, {"detach", r.tracer_detach_ms},
                         {"readout", r.tracer_readout_ms}, {"convert", r.tracer_convert_ms}}},
          {"meta", r.meta}};
}

namespace detail {
// Reads `key` of `j` as T; a missing key or wrong type becomes a DataError naming where.
template <class T>
T record_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw DataError("profile record: " + where + " lacks key '" + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw DataError("profile record: " + where + "." + key + " has the wrong type (" + j.at(key).dump() + ")");
  }
}
inline GpuKind gpu_kind_from(const std::string& s, const std::string& where) {
  if (s == "kernel") return GpuKind::kernel;
  if (s == "memcpy") return GpuKind::memcpy;
  if (s == "memset") return GpuKind::memset;
  throw DataError("profile record: " + where + ".kind is '" + s + "'; allowed: kernel, memcpy, memset");
}
}  // namespace detail

inline WindowRecord record_from_json(const nlohmann::json& j) {
  using detail::record_field;
  if (!j.is_object() || j.value("schema", std::string{}) != record_schema)
    throw DataError("profile record: schema is not '" + std::string(record_schema) + "'");
  WindowRecord r;
  r.warmup = record_field<int>(j, "warmup", "record");
  r.peak_vram_bytes = record_field<int64_t>(j, "peak_vram_bytes", "record");
  r.device_mallocs = record_field<int64_t>(j, "device_mallocs", "record");
  r.trace_collected = record_field<bool>(j, "trace_collected", "record");
  r.meta = j.value("meta", nlohmann::json::object());
  // Optional (records written before the synchronised-half tracing trace every step).
  if (j.contains("traced_from")) r.traced_from = record_field<int>(j, "traced_from", "record");
  if (j.contains("tracer_ms")) {
    const auto& t = j.at("tracer_ms");
    r.tracer_setup_ms = record_field<double>(t, "setup", "record.tracer_ms");
    r.tracer_start_ms = record_field<double>(t, "start", "record.tracer_ms");
    r.tracer_readout_ms = record_field<double>(t, "readout", "record.tracer_ms");
    if (t.contains("convert")) r.tracer_convert_ms = record_field<double>(t, "convert", "record.tracer_ms");
    if (t.contains("detach")) r.tracer_detach_ms = record_field<double>(t, "detach", "record.tracer_ms");
  }
  auto list = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key) || !j.at(key).is_array())
      throw DataError(std::string("profile record: '") + key + "' is missing or not an array");
    return j.at(key);
  };
  for (const auto& e : list("steps")) {
    const std::string w = "steps[" + std::to_string(r.steps.size()) + "]";
    r.steps.push_back({record_field<int64_t>(e, "start_ns", w), record_field<int64_t>(e, "end_ns", w),
                       record_field<bool>(e, "synced", w), record_field<int>(e, "images", w)});
  }
  for (const auto& e : list("phases")) {
    const std::string w = "phases[" + std::to_string(r.phases.size()) + "]";
    auto name = record_field<std::string>(e, "phase", w);
    auto ph = phase_from_name(name);
    if (!ph)
      throw DataError("profile record: " + w + ".phase is '" + name +
                      "'; allowed: dataload, to_device, forward, backward, optimizer");
    r.phases.push_back({record_field<int>(e, "step", w), *ph, record_field<int64_t>(e, "start_ns", w),
                        record_field<int64_t>(e, "end_ns", w), record_field<bool>(e, "synced", w)});
  }
  for (const auto& e : list("gpu")) {
    const std::string w = "gpu[" + std::to_string(r.gpu.size()) + "]";
    r.gpu.push_back({detail::gpu_kind_from(record_field<std::string>(e, "kind", w), w),
                     record_field<std::string>(e, "name", w), record_field<int64_t>(e, "stream", w),
                     record_field<int64_t>(e, "start_ns", w), record_field<int64_t>(e, "dur_ns", w),
                     record_field<uint64_t>(e, "correlation", w)});
  }
  for (const auto& e : list("runtime")) {
    const std::string w = "runtime[" + std::to_string(r.runtime.size()) + "]";
    r.runtime.push_back({record_field<std::string>(e, "name", w), record_field<int64_t>(e, "start_ns", w),
                         record_field<int64_t>(e, "dur_ns", w), record_field<uint64_t>(e, "correlation", w),
                         record_field<uint64_t>(e, "thread", w)});
  }
  for (const auto& e : list("cpu_ops")) {
    const std::string w = "cpu_ops[" + std::to_string(r.cpu_ops.size()) + "]";
    r.cpu_ops.push_back({record_field<std::string>(e, "name", w), record_field<int64_t>(e, "start_ns", w),
                         record_field<int64_t>(e, "dur_ns", w)});
  }
  for (const auto& p : r.phases)
    if (p.step < 0 || p.step >= static_cast<int>(r.steps.size()))
      throw DataError("profile record: a phase names step " + std::to_string(p.step) + " but the record has " +
                      std::to_string(r.steps.size()) + " steps");
  if (r.traced_from < 0 || (r.traced_from > 0 && r.traced_from >= static_cast<int>(r.steps.size())))
    throw DataError("profile record: traced_from=" + std::to_string(r.traced_from) + " is outside the record's " +
                    std::to_string(r.steps.size()) + " steps");
  return r;
}

}  // namespace libreyolo::profile
