#pragma once
// batch=-1 (SPEC §3): the largest power of two whose training step fits in ~60% of the device's memory.
// The trainer measures one step per candidate (Trainer::probe_memory); this header holds the search, so
// its rules are tested without a GPU.
#include <libreyolo/core/error.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace libreyolo::train {

inline constexpr double autobatch_fraction = 0.6;  // of the device's total memory
inline constexpr int autobatch_fallback = 16;      // where nothing can be measured (no CUDA device)

struct AutoBatchTrial {
  int batch = 0;
  std::optional<int64_t> peak_bytes;  // empty: the step ran out of memory
};

struct AutoBatchResult {
  int batch = 1;
  bool none_fit = false;  // not even batch 1 fitted the budget (batch stays 1)
  int64_t budget_bytes = 0;
  std::vector<AutoBatchTrial> trials;
};

// The largest power of two <= cap (1 when cap < 2).
inline int largest_power_of_two_at_most(int64_t cap) {
  int b = 1;
  while (static_cast<int64_t>(b) * 2 <= cap && b < (1 << 30)) b *= 2;
  return b;
}

// Tries 1, 2, 4, ... up to `cap` in order and stops at the first batch that runs out of memory or peaks
// above `fraction` of `total_bytes`; the answer is the last one that fitted. `measure(b)` runs one step
// at batch b and returns its peak allocated bytes, or nothing when it ran out of memory.
inline AutoBatchResult pick_batch(const std::function<std::optional<int64_t>(int)>& measure, int64_t total_bytes,
                                  int64_t cap, double fraction = autobatch_fraction) {
  AutoBatchResult r;
  r.budget_bytes = static_cast<int64_t>(static_cast<double>(total_bytes) * fraction);
  const int top = largest_power_of_two_at_most(cap);
  int fitted = 0;
  for (int b = 1; b <= top; b *= 2) {
    const auto peak = measure(b);
    r.trials.push_back({b, peak});
    if (!peak || *peak > r.budget_bytes) break;
    fitted = b;
    if (b == top) break;
  }
  r.none_fit = fitted == 0;
  r.batch = r.none_fit ? 1 : fitted;
  return r;
}

// batch=-1 measures one GPU: a run over `world` > 1 processes needs its global batch given.
inline void require_batch_for_world(int batch, int world) {
  if (batch == -1 && world > 1)
    throw ConfigError("batch=-1 sizes the batch from one GPU's memory and is for single-process runs; with " +
                      std::to_string(world) + " processes give the global batch, e.g. batch=" + std::to_string(16 * world));
}

}  // namespace libreyolo::train
