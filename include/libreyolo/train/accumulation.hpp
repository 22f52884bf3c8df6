#pragma once
// Gradient accumulation as the original's trainers do it (training/trainer.py `_train_epoch_accum`,
// models/deim/trainer.py likewise, c41461e): with `accumulate = round(nbs / batch)` > 1, an epoch's
// micro-batches form windows of `accumulate`, counted from the epoch's first batch; the last window of an
// epoch is shorter when the epoch's batch count is not a multiple, and it ends with the epoch (no window
// crosses an epoch's end). Each micro-batch's loss is divided by its window's length before backward, so
// the window's summed gradient is the mean over its micro-batches; the optimizer, clipping, scaler and EMA
// step once, after the window's last micro-batch.
#include <algorithm>
#include <cstdint>

namespace libreyolo::train {

struct AccumWindow {
  int64_t length = 1;     // micro-batches in this window (the divisor of each one's loss)
  bool first = true;      // this micro-batch opens the window
  bool last = true;       // the optimizer steps after this micro-batch
};

// The window of micro-batch `index` (0-based within its epoch) of an epoch of `batches` micro-batches.
inline AccumWindow accumulation_window(int64_t index, int64_t batches, int64_t accumulate) {
  AccumWindow w;
  if (accumulate <= 1) return w;
  const int64_t start = index - index % accumulate;
  w.length = std::max<int64_t>(1, std::min(accumulate, batches - start));
  w.first = index == start;
  w.last = index + 1 == start + w.length || index + 1 >= batches;
  return w;
}

}  // namespace libreyolo::train
