#pragma once
// Pure analysis of a WindowRecord (SPEC §2.1). Conventions:
//  - real step / dataload / img/s come from the unsynchronised steps only;
//  - the tracer runs over the steps from rec.traced_from on (the synchronised half, so the
//    unsynchronised steps are timed untraced); kernel and CPU-op figures are totals over those
//    traced steps divided by their number (every step runs the same work);
//  - busy time is the union of kernel intervals across streams, the raw sum is kept beside it;
//  - a kernel (or memcpy/memset) belongs to the phase whose host span contains the start of the
//    runtime call with the same correlation id; with no such call, or a call outside every phase
//    (zero_grad, EMA, LR), it lands in the extra row `outside`;
//  - per-phase wall ms come from the synced steps (from all steps when there are none).
#include <libreyolo/core/api.hpp>
#include <libreyolo/profile/events.hpp>
#include <libreyolo/profile/kernel_names.hpp>
#include <libreyolo/profile/verdict.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

namespace libreyolo::profile {

inline constexpr int outside_slot = phase_count;  // index of the `outside` row
inline constexpr std::string_view outside_name = "outside";
LIBREYOLO_INLINE std::string_view slot_name(int slot);

struct KernelStat {
  std::string raw_name, name, category;
  bool tensorcore = false;
  double ms_per_step = 0, pct_of_gpu = 0, count_per_step = 0;
};
struct CategoryStat {
  std::string name;
  double ms_per_step = 0, pct = 0;
};
struct OpStat {
  std::string name;
  double ms_per_step = 0, pct_of_cpu_ops = 0, count_per_step = 0;
};
struct PhaseStat {
  std::string phase;
  double gpu_ms_per_step = 0, wall_ms_per_step = 0, kernels_per_step = 0, ops_per_step = 0;
  int unique_kernels = 0;
  std::vector<KernelStat> kernels;  // pct_of_gpu here is the share of this phase's kernel time
  std::vector<OpStat> ops;
};

struct Analysis {
  nlohmann::json meta = nlohmann::json::object();
  int warmup = 0, real_steps = 0, synced_steps = 0, traced_steps = 0;
  double tracer_setup_ms = 0, tracer_start_ms = 0, tracer_detach_ms = 0, tracer_readout_ms = 0, tracer_convert_ms = 0;  // the tracer's own cost
  double wall_ms = 0;
  double step_ms = 0, dataload_ms = 0, compute_ms = 0, img_per_s = 0, dataload_frac = 0;
  bool trace_collected = false;
  double gpu_busy_ms_per_step = 0, gpu_kernel_sum_ms_per_step = 0, gpu_util = 0, gpu_util_raw = 0;
  double mean_kernel_us = 0, kernels_per_step = 0, memcpy_ms_per_step = 0, memset_ms_per_step = 0;
  double tensorcore_pct = 0, cuda_mallocs_per_step = 0, cuda_frees_per_step = 0;
  double host_overhead_ms_per_step = 0, launches_per_step = 0, peak_vram_mb = 0;
  int unique_kernels = 0;
  bool memory_pressure = false;
  std::vector<CategoryStat> categories;  // in kernel_categories order
  std::vector<KernelStat> kernels;       // by time, largest first
  std::vector<OpStat> ops;               // by time, largest first
  std::vector<PhaseStat> phases;         // the five phases in order, then `outside`
  Verdict verdict;
};

// Total length covered by a set of [start, start+dur) intervals, overlaps counted once.
LIBREYOLO_INLINE int64_t interval_union_ns(std::vector<std::pair<int64_t, int64_t>> iv);

// Finds the phase span containing a host timestamp; phases of one thread never overlap.
class PhaseLocator {
 public:
  explicit PhaseLocator(const std::vector<PhaseSpan>& spans);
  // Slot 0..4 for a phase, outside_slot when no phase contains t.
  int slot_at(int64_t t) const;

 private:
  std::vector<PhaseSpan> spans_;
};

// Slot of each entry of rec.gpu, found through its launch call (see the header comment).
LIBREYOLO_INLINE std::vector<int> attribute_gpu_to_phases(const WindowRecord& rec);

// Steps the device figures are divided by: those the tracer ran over (at least one).
LIBREYOLO_INLINE double traced_step_count(const WindowRecord& rec);

namespace detail {
LIBREYOLO_INLINE double ns_to_ms(double ns);
LIBREYOLO_INLINE bool icontains(const std::string& s, std::string_view needle);

// Host timings: real step, dataload, img/s from the unsynchronised steps; phase wall ms from synced.
LIBREYOLO_INLINE void analyse_host(const WindowRecord& rec, Analysis& a);

struct NameTotals {
  double ns = 0, count = 0;
};
using NameTable = std::map<std::string, NameTotals>;

LIBREYOLO_INLINE std::vector<KernelStat> kernel_stats(const NameTable& table, double steps);
LIBREYOLO_INLINE std::vector<OpStat> op_stats(const NameTable& table, double steps);

// Kernel, memcpy/memset and runtime-call figures, per window and per phase.
LIBREYOLO_INLINE void analyse_gpu(const WindowRecord& rec, Analysis& a);

// CPU operator totals, per window and per phase (by the op's start time: ops run on the host thread).
LIBREYOLO_INLINE void analyse_ops(const WindowRecord& rec, Analysis& a);
}  // namespace detail

LIBREYOLO_INLINE Analysis analyse(const WindowRecord& rec);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/analysis-inl.hpp>
#endif
