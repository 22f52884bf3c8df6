#pragma once
// Definitions of run_dir.hpp (core/api.hpp): included by run_dir.hpp when header-only, compiled once otherwise.
#include <libreyolo/train/run_dir.hpp>

namespace libreyolo::train {

LIBREYOLO_INLINE fs::path prepare_run_dir(const TrainConfig& cfg) {
  fs::path dir = cfg.run_dir();
  // weights/ must be the run's own folder: a symlink there would send checkpoints out of the run.
  if (const auto kind = atomic_file::non_regular_kind(dir / "weights"); !kind.empty() && kind != "a directory")
    throw OutputPathError("run directory " + dir.string() + ": weights is " + kind +
                          ", not a folder of this run; checkpoints are not written through it (remove it, or "
                          "choose another project=/name=)");
  if (cfg.resume) {
    if (!fs::exists(dir / "weights" / "last.ckpt") && !fs::exists(dir / "weights" / "best.ckpt"))
      throw SetupError("resume=true: no checkpoint at " + (dir / "weights" / "last.ckpt").string() +
                       " (nor best.ckpt; set project= and name= to the run to resume)");
    return dir;
  }
  if (fs::exists(dir) && !cfg.exist_ok) {
    for (int i = 2;; ++i) {
      fs::path cand = fs::path(cfg.project) / (cfg.name + std::to_string(i));
      if (!fs::exists(cand)) {
        dir = cand;
        break;
      }
    }
  }
  fs::create_directories(dir / "weights");
  return dir;
}

LIBREYOLO_INLINE fs::path resume_checkpoint(const fs::path& dir) {
  const fs::path last = dir / "weights" / "last.ckpt", best = dir / "weights" / "best.ckpt";
  std::error_code el, eb;
  const bool has_last = fs::exists(last, el), has_best = fs::exists(best, eb);
  if (!has_best) return last;
  if (!has_last) return best;
  // best.ckpt is written just before last.ckpt with the same state: newer only when the last.ckpt
  // write that followed it did not complete. Then the caller compares the two positions.
  const auto tl = fs::last_write_time(last, el), tb = fs::last_write_time(best, eb);
  return !el && !eb && tb > tl ? best : last;
}

LIBREYOLO_INLINE void write_text_atomic(const fs::path& path, const std::string& text) {
  atomic_file::write_or_throw<Error>(path, path.filename().string(), text);
}

LIBREYOLO_INLINE void ResultsWriter::restore(const nlohmann::json& rows) {
  rows_ = rows.is_array() ? rows : nlohmann::json::array();
}

LIBREYOLO_INLINE void ResultsWriter::add_epoch(nlohmann::json row, const nlohmann::json& summary) {
  rows_.push_back(std::move(row));
  write_csv();
  nlohmann::json j = summary;
  j["epochs"] = rows_;
  write_text_atomic(dir_ / "results.json", j.dump(2) + "\n");
}

LIBREYOLO_INLINE void ResultsWriter::write_csv() const {
  // Every row's keys, first seen first: with eval_interval > 1 the first rows have no val/ columns.
  std::vector<std::string> cols;
  for (auto& r : rows_)
    for (auto& [k, v] : r.items())
      if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
  std::string s;
  for (size_t i = 0; i < cols.size(); ++i) s += (i ? "," : "") + cols[i];
  s += "\n";
  for (auto& r : rows_) {
    for (size_t i = 0; i < cols.size(); ++i) {
      auto it = r.find(cols[i]);
      s += (i ? "," : "");
      if (it == r.end() || it->is_null()) continue;
      if (it->is_number_float()) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.6g", it->get<double>());
        s += buf;
      } else {
        s += it->is_string() ? it->get<std::string>() : it->dump();
      }
    }
    s += "\n";
  }
  write_text_atomic(dir_ / "results.csv", s);
}

LIBREYOLO_INLINE std::string format_duration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

}  // namespace libreyolo::train
