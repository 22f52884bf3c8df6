#pragma once
// Definitions of collector.hpp (core/api.hpp): included by collector.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/collector.hpp>

namespace libreyolo::profile {

LIBREYOLO_INLINE void align_host_to_trace(WindowRecord& rec, const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>& traced) {
  if (traced.empty() || traced.size() > rec.phases.size()) return;  // cannot pair: keep the shared clock
  const size_t first = rec.phases.size() - traced.size();
  for (size_t i = 0; i < traced.size(); ++i)
    if (traced[i].first != phase_range_name(rec.phases[first + i].phase)) return;  // order differs: do not guess
  std::vector<int64_t> offsets;
  for (size_t i = 0; i < traced.size(); ++i) {
    auto& p = rec.phases[first + i];
    offsets.push_back(traced[i].second.first - p.start_ns);
    p.start_ns = traced[i].second.first;
    p.end_ns = traced[i].second.second;
  }
  std::nth_element(offsets.begin(), offsets.begin() + offsets.size() / 2, offsets.end());
  const int64_t shift = offsets[offsets.size() / 2];
  for (size_t i = 0; i < first; ++i) rec.phases[i].start_ns += shift, rec.phases[i].end_ns += shift;
  for (auto& s : rec.steps) s.start_ns += shift, s.end_ns += shift;
}

LIBREYOLO_INLINE void drop_after_window(WindowRecord& rec) {
  if (rec.steps.empty()) return;
  const int64_t end = rec.steps.back().end_ns;
  const auto late = [end](const auto& e) { return e.start_ns > end; };
  std::erase_if(rec.gpu, late);
  std::erase_if(rec.runtime, late);
  std::erase_if(rec.cpu_ops, late);
}

LIBREYOLO_INLINE Collector::~Collector() {
  abandon();
  finish_teardown();
}

LIBREYOLO_INLINE void Collector::begin_window() {
  if (!device_.is_cuda()) return;
  mallocs_at_start_ = compat::cuda_device_allocs(index());
}

LIBREYOLO_INLINE void Collector::start_trace() {
  if (!can_trace() || tracing_) return;
  int64_t t0 = host_now_ns();
  const bool prepared = prepare_kineto();
  setup_ms_ = ms_since(t0);
  if (!prepared) return;
  t0 = host_now_ns();
  tracing_ = start_kineto();
  traced_once_ = traced_once_ || tracing_;
  start_ms_ = ms_since(t0);
}

LIBREYOLO_INLINE void Collector::stop(WindowRecord& rec) {
  if (device_.is_cuda()) {
    compat::cuda_synchronize(device_);
    rec.peak_vram_bytes = compat::cuda_peak_allocated(index());
    rec.device_mallocs = compat::cuda_device_allocs(index()) - mallocs_at_start_;
  }
  rec.trace_collected = false;
  if (tracing_) {
    tracing_ = false;
    const int64_t t0 = host_now_ns();
    if (background_) {
      detached_ = detach_kineto();
      rec.tracer_detach_ms = ms_since(t0);
    } else {
      rec.trace_collected = stop_kineto();
      finish_teardown();
      rec.tracer_readout_ms = ms_since(t0);
    }
  }
  rec.tracer_setup_ms = setup_ms_, rec.tracer_start_ms = start_ms_;
}

LIBREYOLO_INLINE void Collector::convert(WindowRecord& rec) {
  if (detached_) {
    detached_ = false;
    const int64_t t0 = host_now_ns();
    rec.trace_collected = read_out_kineto();
    finish_teardown();
    rec.tracer_readout_ms = ms_since(t0);
  }
  const int64_t t0 = host_now_ns();
  convert_kineto(rec);
  rec.tracer_convert_ms = ms_since(t0);
}

LIBREYOLO_INLINE void Collector::abandon() {
  if (!tracing_ && !detached_) return;
  if (tracing_) stop_kineto();
  if (detached_) read_out_kineto();
  tracing_ = detached_ = false;
  drop_result();
  finish_teardown();
}

}  // namespace libreyolo::profile
