#pragma once
// Definitions of verdict.hpp (core/api.hpp): included by verdict.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/verdict.hpp>

namespace libreyolo::profile {

namespace detail {
LIBREYOLO_INLINE std::string fmt(const char* f, double a, double b, double c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}
}  // namespace detail

LIBREYOLO_INLINE Verdict decide_verdict(const VerdictInputs& in) {
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
