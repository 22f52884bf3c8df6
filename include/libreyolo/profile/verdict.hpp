#pragma once
// The verdict of a profile: exactly one of memory-pressure, dataloader, compute, host/launch (checked
// in that order, SPEC §2.1) — or, when no GPU kernel trace exists, only what the unsynchronised host
// timings can support: memory-pressure from allocator counts, dataloader, else
// `unknown (no GPU trace)`. A bound is never inferred from zero traced kernels.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace libreyolo::profile {

inline constexpr double mallocs_per_step_limit = 5.0;  // >= this: memory pressure
inline constexpr double raw_util_limit = 1.05;         // > this: kernels outlast the step (allocator stalls)
inline constexpr double dataload_frac_limit = 0.2;     // >= this: dataloader-bound
inline constexpr double compute_util_limit = 0.8;      // >= this: compute-bound

namespace bound {
inline constexpr const char* memory_pressure = "memory-pressure";
inline constexpr const char* dataloader = "dataloader";
inline constexpr const char* compute = "compute";
inline constexpr const char* host_launch = "host/launch";
inline constexpr const char* unknown_no_trace = "unknown (no GPU trace)";
inline constexpr const char* mixed = "mixed";  // repeat trials disagree
}  // namespace bound

struct VerdictInputs {
  bool trace_collected = false;
  double mallocs_per_step = 0;
  double gpu_util_raw = 0;
  double dataload_frac = 0;
  double step_ms = 0;
  double gpu_busy_ms_per_step = 0;
  double host_overhead_ms_per_step = 0;
  double launches_per_step = 0;
  std::optional<bool> amp;          // from the run's meta; nullopt when unknown
  std::optional<bool> cuda_device;  // from the run's meta "device"; nullopt when unknown
};

struct Verdict {
  std::string bound;
  std::string why;
  std::vector<std::string> levers;
  std::vector<std::string> notes;  // extra lines: fp32 note, no-trace note
};

namespace detail {
inline std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}
}  // namespace detail

inline Verdict decide_verdict(const VerdictInputs& in) {
  using detail::fmt;
  Verdict v;
  const double util = in.gpu_util_raw < 1.0 ? in.gpu_util_raw : 1.0;
  const bool malloc_pressure = in.mallocs_per_step >= mallocs_per_step_limit;
  const bool overfull = in.trace_collected && in.gpu_util_raw > raw_util_limit;
  if (malloc_pressure || overfull) {
    v.bound = bound::memory_pressure;
    v.why = malloc_pressure
                ? fmt("%.1f device mallocs per step (>= 5): the caching allocator keeps going back to "
                      "cudaMalloc, i.e. the run lives at the edge of device memory",
                      in.mallocs_per_step)
                : fmt("raw GPU utilization %.2f > 1.05: kernel time exceeds the step, a sign of allocator "
                      "stalls and memory pressure",
                      in.gpu_util_raw);
    v.levers = {"lower the batch", "reduce activation memory (smaller imgsz, lighter model)",
                "step back from the out-of-memory edge"};
  } else if (in.dataload_frac >= dataload_frac_limit) {
    v.bound = bound::dataloader;
    v.why = fmt("the loader's next() takes %.0f%% of the step (>= 20%%): the GPU waits for data",
                100.0 * in.dataload_frac);
    v.levers = {"more workers", "cache=ram or cache=disk", "lighter augmentation", "a larger batch"};
  } else if (!in.trace_collected) {
    v.bound = bound::unknown_no_trace;
    v.why = fmt("no GPU kernel trace was collected, so GPU utilization is unknown; the loader takes %.0f%% "
                "of the step (< 20%%), so the run is not dataloader-bound",
                100.0 * in.dataload_frac);
    v.levers = {"profile on a CUDA device (LibTorch with CUDA and Kineto) to tell a compute-bound run from a launch-bound one"};
  } else if (util >= compute_util_limit) {
    v.bound = bound::compute;
    v.why = fmt("the GPU is busy %.0f%% of the step (>= 80%%): %.2f ms of kernels per %.2f ms step",
                100.0 * util, in.gpu_busy_ms_per_step, in.step_ms);
    v.levers = {"AMP (amp=true, or amp_dtype=bfloat16)",
                "a larger model gets more accuracy for the same time"};
  } else {
    v.bound = bound::host_launch;
    v.why = fmt("the GPU is busy only %.0f%% of the step; %.2f ms per step are host overhead", 100.0 * util,
                in.host_overhead_ms_per_step) +
            fmt(" across %.0f launches per step", in.launches_per_step);
    v.levers = {"a larger batch", "fewer host syncs (.item(), printing tensors)", "CUDA graphs (cuda_graph=true)",
                "fused kernels"};
  }
  if (!in.trace_collected)
    v.notes.push_back("no GPU kernel trace could be collected (no CUDA device, or the tracer did not attach): "
                      "kernel, utilization and phase GPU figures are not available");
  // Tensor Cores exist only on the GPU: on a CPU device (where AMP falls back to fp32) the note would mislead.
  if (in.amp.has_value() && !*in.amp && in.cuda_device.value_or(true))
    v.notes.push_back("AMP is off: fp32 gemm/conv do not run on Tensor Cores; amp=true would move them there");
  return v;
}

}  // namespace libreyolo::profile
