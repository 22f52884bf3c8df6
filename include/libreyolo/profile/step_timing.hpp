#pragma once
// Timing of a training step replayed without the dataloader (SPEC §2.4's method), shared by the
// benchmarks: `steps` synchronised calls timed on the host, then the same number again under the Kineto
// collector for the GPU kernel busy time (a second pass, so the tracer does not inflate the timed one).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/collector.hpp>

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace libreyolo::profile {

struct StepTiming {
  std::vector<double> ms;  // sorted, fastest first
  double min_ms = 0, median_ms = 0;
  double peak_vram_mb = 0;  // peak allocated since the caller's last reset, read after the timed pass
  Analysis busy;            // gpu_busy_ms_per_step, kernels_per_step, tensorcore_pct, ...
  bool traced = false;
};

// Marks phase boundaries inside a step for the traced pass (kernel -> phase attribution by launch time);
// a no-op in the timed pass. A step function that takes a StepPhases& gets one.
class StepPhases {
 public:
  void mark(Phase p);
  void close();

 private:
  template <class Fn>
  friend StepTiming time_steps(Fn&&, int, torch::Device, int);
  WindowRecord* rec_ = nullptr;
  int step_ = 0;
  std::optional<PhaseSpan> open_;
  std::unique_ptr<at::RecordFunction> range_;
};

// `step` runs one full step (optionally taking a StepPhases&); the caller does the warm-up (and resets
// the peak where it wants it counted).
template <class Fn>
StepTiming time_steps(Fn&& step, int steps, torch::Device dev, int images_per_step) {
  StepPhases phases;
  auto run = [&] {
    if constexpr (std::is_invocable_v<Fn&, StepPhases&>) {
      step(phases);
      phases.close();
    } else {
      step();
    }
  };
  StepTiming t;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    compat::cuda_synchronize(dev);
    t.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  t.peak_vram_mb = dev.is_cuda() ? compat::cuda_peak_allocated(compat::device_index(dev)) / 1048576.0 : 0.0;
  WindowRecord rec;
  Collector col(dev, /*teardown_cupti=*/false);  // as measured so far; graph arms replay after it
  phases.rec_ = &rec;
  col.begin_window();
  col.start_trace();
  for (int i = 0; i < steps; ++i) {
    compat::cuda_synchronize(dev);
    const auto s0 = host_now_ns();
    phases.step_ = i;
    run();
    compat::cuda_synchronize(dev);
    rec.steps.push_back({s0, host_now_ns(), false, images_per_step});
  }
  col.stop(rec);
  col.convert(rec);  // the read-out: without it the record holds no kernels
  phases.rec_ = nullptr;
  t.traced = rec.trace_collected;
  t.busy = analyse(rec);
  std::sort(t.ms.begin(), t.ms.end());
  if (!t.ms.empty()) {
    t.min_ms = t.ms.front();
    t.median_ms = t.ms[t.ms.size() / 2];
  }
  return t;
}

// Where a benchmarked step's time goes: GPU time and kernel/op counts per phase, the kernel categories,
// and the `top` largest kernels and CPU operators per step.
LIBREYOLO_INLINE nlohmann::json step_breakdown_json(const Analysis& a, size_t top = 12);
}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/step_timing-inl.hpp>
#endif
