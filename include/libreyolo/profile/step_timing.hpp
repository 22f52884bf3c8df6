#pragma once
// Timing of a training step replayed without the dataloader (SPEC §2.4's method), shared by the
// benchmarks: `steps` synchronised calls timed on the host, then the same number again under the Kineto
// collector for the GPU kernel busy time (a second pass, so the tracer does not inflate the timed one).
#include <libreyolo/core/compat.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/collector.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

namespace libreyolo::profile {

struct StepTiming {
  std::vector<double> ms;  // sorted, fastest first
  double min_ms = 0, median_ms = 0;
  double peak_vram_mb = 0;  // peak allocated since the caller's last reset, read after the timed pass
  Analysis busy;            // gpu_busy_ms_per_step, kernels_per_step, tensorcore_pct, ...
  bool traced = false;
};

// `step` runs one full step; the caller does the warm-up (and resets the peak where it wants it counted).
template <class Fn>
StepTiming time_steps(Fn&& step, int steps, torch::Device dev, int images_per_step) {
  StepTiming t;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    compat::cuda_synchronize(dev);
    t.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  t.peak_vram_mb = dev.is_cuda() ? compat::cuda_peak_allocated(dev.index() < 0 ? 0 : dev.index()) / 1048576.0 : 0.0;
  WindowRecord rec;
  Collector col(dev);
  col.start();
  for (int i = 0; i < steps; ++i) {
    compat::cuda_synchronize(dev);
    const auto s0 = host_now_ns();
    step();
    compat::cuda_synchronize(dev);
    rec.steps.push_back({s0, host_now_ns(), false, images_per_step});
  }
  col.stop(rec);
  t.traced = rec.trace_collected;
  t.busy = analyse(rec);
  std::sort(t.ms.begin(), t.ms.end());
  if (!t.ms.empty()) {
    t.min_ms = t.ms.front();
    t.median_ms = t.ms[t.ms.size() / 2];
  }
  return t;
}

}  // namespace libreyolo::profile
