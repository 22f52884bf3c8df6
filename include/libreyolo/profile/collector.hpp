#pragma once
// Fills a WindowRecord's device side. CUDA builds (LibTorch 2.x with Kineto) trace CPU ops, CUDA
// runtime/driver calls, kernels and memcpy/memset; other builds (Debian's CPU-only 1.13 has no
// Kineto) keep host timings only and leave trace_collected false. Peak VRAM and cudaMalloc counts
// come from the caching allocator in either case (zero on CPU).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/profile/events.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#if defined(LIBREYOLO_WITH_CUDA)
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>  // ProfilerStateBase: the trace handed to another thread
#endif

namespace libreyolo::profile {

// The host clock of phase/step spans: the system clock, which is also the time base (Unix ns) of
// Kineto's events, so both line up before the annotation-based correction below refines it.
inline int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Milliseconds since `t0` (a host_now_ns() reading).
inline double ms_since(int64_t t0) { return static_cast<double>(host_now_ns() - t0) / 1e6; }

// Name of the user range each phase emits; the collector reads these back to align clocks.
inline std::string phase_range_name(Phase p) { return "phase/" + std::string(phase_name(p)); }

// Host spans measured with host_now_ns(), plus the phases the tracer saw: those are the last
// `traced.size()` phases of the record (the tracer starts part-way into the window). Replaces their times
// by the traced ones (same order) and shifts every other span by the median offset between the two.
LIBREYOLO_INLINE void align_host_to_trace(WindowRecord& rec, const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>& traced);

// The tracer is read out after training has moved on, so it also holds the first events of the steps
// after the window: only what started before the window's last step ended is kept (that step is
// synchronised, so its kernels finished inside it).
LIBREYOLO_INLINE void drop_after_window(WindowRecord& rec);

class Collector {
 public:
  // teardown_cupti: ask Kineto to detach CUPTI after the trace (see request_cupti_teardown).
  // background_readout: stop() only detaches the tracer and convert() reads it out (on the report
  // thread); false stops and reads it out in stop(), on the training thread.
  explicit Collector(torch::Device device, bool teardown_cupti = true, bool background_readout = true)
      : device_(device), teardown_(teardown_cupti), background_(background_readout) {}
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;
  ~Collector();

  // Whether stop() leaves Kineto's read-out to convert() (see the constructor).
  bool background_readout() const { return background_; }
  // Whether this build and device can produce a kernel trace.
  bool can_trace() const { return compat::with_cuda && device_.is_cuda(); }

  // The window begins: the device-malloc count is measured from here. Peak VRAM is not reset: the
  // report gives the run's peak up to the window's end (SPEC §2.1/§2.3), which includes what was
  // allocated before the window, e.g. the CUDA-graph pools captured during the warm-up steps.
  void begin_window();

  // Sets the tracer up (CUPTI: tracer_setup_ms) and attaches it (tracer_start_ms); its events go into
  // the record at stop(). Call it between steps: both costs then fall outside every measured step.
  // The set-up is not done earlier on purpose: Kineto's set-up already turns CUPTI's activity collection
  // on, and from then every kernel launch pays for it. Measured on the H200 with the set-up two steps
  // ahead of the window: the untraced steps in between ran ~60% slower (ResNet-18) and ~40% slower
  // (YOLOv9-t), and those were the unsynchronised steps the verdict is made from.
  void start_trace();

  // Ends the window on the training thread: device figures go into `rec`, and the tracer is detached
  // from this thread (its operator callback removed, its state taken) — microseconds. Kineto's stop
  // and read-out, the expensive part, run later in convert(), on whichever thread calls it.
  void stop(WindowRecord& rec);

  // Stops the detached trace, reads it out and copies its events into `rec` (phases aligned to the
  // trace clock; events after the window's last step, which the tracer saw while training went on,
  // are left out). Call it once, after stop(); it may run on another thread than the training loop.
  void convert(WindowRecord& rec);

  // Stops a running trace without keeping anything (training ended before the window filled).
  void abandon();

 private:
  int index() const { return compat::device_index(device_); }
  // Kineto finalizes CUPTI from the callback of the next CUDA runtime call after the trace stops, and
  // its teardown thread waits for that. A process whose last CUDA call came before (a test, a run that
  // ends right after the window) then hangs at exit — seen on the H200 — so one cheap runtime call is
  // made here, after stopping and again when the collector goes away.
  void finish_teardown() const {
    if (traced_once_) compat::cuda_synchronize(device_);  // also when the user set TEARDOWN_CUPTI=1 themselves
  }

#if defined(LIBREYOLO_WITH_CUDA)
  static torch::profiler::impl::ProfilerConfig trace_config() {
    return torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO, false, false);
  }
  static std::set<torch::profiler::impl::ActivityType> trace_activities() {
    return {torch::profiler::impl::ActivityType::CPU, torch::profiler::impl::ActivityType::CUDA};
  }
  // Kineto leaves CUPTI subscribed after a trace unless TEARDOWN_CUPTI=1, and every later launch pays
  // for it: measured on the H200, the steps after the window ran ~39% slower. PyTorch's Python package
  // sets the variable when imported; a C++ program has to do it itself. A value the user set is kept.
  // Only from CUDA 12.6: before it, teardown crashes under CUDA graphs (Kineto's note). On the H200
  // (CUDA 13) ResNet-18 and YOLOv9-t runs with cuda_graph=true train on after the window with it.
  void request_cupti_teardown() const {
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12060
    if (teardown_) ::setenv("TEARDOWN_CUPTI", "1", /*overwrite=*/0);
#endif
  }
  bool prepare_kineto() const {
    request_cupti_teardown();
    try {
      torch::autograd::profiler::prepareProfiler(trace_config(), trace_activities());
      return true;
    } catch (const std::exception& e) {
      log::warn("profile: the Kineto tracer could not be set up (", e.what(), "); host timings only");
      return false;
    }
  }
  bool start_kineto() const {
    try {
      torch::autograd::profiler::enableProfiler(trace_config(), trace_activities());
      return true;
    } catch (const std::exception& e) {
      log::warn("profile: the Kineto tracer did not attach (", e.what(), "); host timings only");
      return false;
    }
  }
  bool stop_kineto() {
    try {
      result_ = torch::autograd::profiler::disableProfiler();
    } catch (const std::exception& e) {
      log::warn("profile: reading the Kineto trace failed (", e.what(), "); host timings only");
      return false;
    }
    return result_ != nullptr;
  }
  // The training thread lets go of the trace: the profiler's state leaves this thread's debug info and
  // its thread-local operator callback is removed, so later steps record no operator. CUPTI keeps
  // collecting until read_out_kineto() stops it, which Kineto does only after converting every CPU op:
  // the steps during the read-out still pay for CUPTI (on the H200, ~3 ms per ResNet-18 step for ~5 steps;
  // what it saw after the window is dropped by convert()). Turning CUPTI off here with LibTorch's
  // toggleCollectionDynamic was tried (2.11, H200): the trace then came back with no device event at all.
  bool detach_kineto() {
    try {
      detached_state_ = torch::profiler::impl::ProfilerStateBase::pop(/*global=*/false);
      if (!detached_state_) return false;
      detached_state_->removeCallback();
      return true;
    } catch (const std::exception& e) {
      log::warn("profile: detaching the Kineto tracer failed (", e.what(), "); stopping it here");
      return stop_kineto();  // the state stayed on this thread: the usual stop (and read-out) here
    }
  }
  // Kineto's stop and read-out on the calling thread: the detached state is installed in this thread's
  // debug info, where disableProfiler() looks for it (its callback is already gone: nothing to remove).
  bool read_out_kineto() {
    if (!detached_state_) return result_ != nullptr;  // detach fell back to a stop on the training thread
    try {
      torch::profiler::impl::ProfilerStateBase::push(std::move(detached_state_));
    } catch (const std::exception& e) {
      log::warn("profile: taking over the Kineto trace failed (", e.what(), "); host timings only");
      return false;
    }
    return stop_kineto();
  }
  void drop_result() { result_.reset(); }
  // Reads the kept result; it is freed with the collector (on the thread that owns the window).
  void convert_kineto(WindowRecord& rec) {
    if (!result_) return;
    const auto& result = result_;
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> phase_ranges;
    for (const auto& e : result->events()) {
      const auto start = static_cast<int64_t>(e.startNs());
      const auto dur = static_cast<int64_t>(e.durationNs());
      // Activity types (libkineto): 0 CPU op, 1 user annotation, 3 memcpy, 4 memset, 5 kernel,
      // 7 CUDA runtime, 8 CUDA driver (cuLaunchKernel from Triton/cuBLASLt also carries a correlation id).
      switch (e.activityType()) {
        case 0: rec.cpu_ops.push_back({e.name(), start, dur}); break;
        case 1:
          if (e.name().rfind("phase/", 0) == 0) phase_ranges.push_back({e.name(), {start, start + dur}});
          break;
        case 3: rec.gpu.push_back({GpuKind::memcpy, e.name(), e.deviceResourceId(), start, dur, e.correlationId()}); break;
        case 4: rec.gpu.push_back({GpuKind::memset, e.name(), e.deviceResourceId(), start, dur, e.correlationId()}); break;
        case 5: rec.gpu.push_back({GpuKind::kernel, e.name(), e.deviceResourceId(), start, dur, e.correlationId()}); break;
        case 7:
        case 8: rec.runtime.push_back({e.name(), start, dur, e.correlationId(), e.startThreadId()}); break;
        default: break;
      }
    }
    std::sort(phase_ranges.begin(), phase_ranges.end(), [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
    align_host_to_trace(rec, phase_ranges);
    drop_after_window(rec);
  }
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result_;
  std::shared_ptr<torch::profiler::impl::ProfilerStateBase> detached_state_;
#else
  bool start_kineto() const { return false; }
  bool prepare_kineto() const { return false; }
  bool stop_kineto() { return false; }
  bool detach_kineto() { return false; }
  bool read_out_kineto() { return false; }
  void drop_result() {}
  void convert_kineto(WindowRecord&) {}
#endif

  torch::Device device_;
  bool teardown_ = true, background_ = true;
  bool tracing_ = false, traced_once_ = false;
  bool detached_ = false;  // stopped on the training thread, not yet read out
  int64_t mallocs_at_start_ = 0;
  double setup_ms_ = 0, start_ms_ = 0;
};

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/collector-inl.hpp>
#endif
