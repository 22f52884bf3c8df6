#pragma once
// The run directory (project/name) and what is written into it each epoch: results.csv, results.json.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace libreyolo::train {

namespace fs = std::filesystem;

// Picks the run directory. An existing project/name is never reused unless exist_ok or resume:
// the name gets the next free numeric suffix instead (exp, exp2, exp3, ...), as Ultralytics does.
LIBREYOLO_INLINE fs::path prepare_run_dir(const TrainConfig& cfg);

// The checkpoint a resume of `dir` starts from: weights/last.ckpt, or weights/best.ckpt when last.ckpt
// is missing (a kill during its first write) or older than best.ckpt (a kill during a later write).
LIBREYOLO_INLINE fs::path resume_checkpoint(const fs::path& dir);

// Writes a text file atomically (temporary file in the same folder, then rename).
LIBREYOLO_INLINE void write_text_atomic(const fs::path& path, const std::string& text);

// results.csv (one row per epoch, header from the first row's keys) and results.json (run summary:
// config, precision, capture, device, every epoch row, best).
class ResultsWriter {
 public:
  explicit ResultsWriter(fs::path dir) : dir_(std::move(dir)) {}
  // Restores the rows of an earlier run (resume) so the files keep the whole history.
  void restore(const nlohmann::json& rows);
  const nlohmann::json& rows() const { return rows_; }

  void add_epoch(nlohmann::json row, const nlohmann::json& summary);

 private:
  void write_csv() const;
  fs::path dir_;
  nlohmann::json rows_ = nlohmann::json::array();
};

LIBREYOLO_INLINE std::string format_duration(double seconds);

}  // namespace libreyolo::train

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/train/run_dir-inl.hpp>
#endif
