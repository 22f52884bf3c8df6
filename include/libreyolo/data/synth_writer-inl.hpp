#pragma once
// Definitions of synth_writer.hpp (core/api.hpp): included by synth_writer.hpp when header-only, compiled once otherwise.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/data/synth_writer.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

namespace libreyolo::data::detail {

[[noreturn]] LIBREYOLO_INLINE void synth_option_error(const std::string& what, const std::string& key, const std::string& value,
                                                      const std::string& allowed) {
  throw ConfigError("synth " + what + " option " + key + " = " + value + " is outside the allowed range " + allowed);
}

LIBREYOLO_INLINE void validate_synth_split(const SynthOptions& o, const std::string& what) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) synth_option_error(what, "val_fraction", log::cat(o.val_fraction), "[0, 1)");
  if (o.images < (o.val_fraction > 0 ? 2 : 1))
    synth_option_error(what, "images", std::to_string(o.images), o.val_fraction > 0 ? "[2, inf) (train and val)" : "[1, inf)");
  if (o.out.empty()) throw ConfigError("synth option out is empty: give the folder to write the dataset to");
}

LIBREYOLO_INLINE void write_synth_detect_set(const SynthOptions& o, const SynthSizes& sizes, uint64_t stream,
                                             const SynthDetectMaker& make, const std::vector<std::string>& names,
                                             const std::string& what) {
  namespace fs = std::filesystem;
  prepare_synth_out(o.out);
  for (const char* d : {"images", "labels"}) fs::remove_all(o.out / d);
  const int n_val =
      o.val_fraction > 0 ? std::clamp(static_cast<int>(std::lround(o.val_fraction * o.images)), 1, o.images - 1) : 0;
  for (const char* split : {"train", "val"}) {
    if (std::string(split) == "val" && n_val == 0) continue;
    fs::create_directories(o.out / "images" / split);
    fs::create_directories(o.out / "labels" / split);
  }
  std::atomic<int> next{0}, done{0};
  progress::Bar bar("synth", o.images, o.progress_interval, progress::choose_mode(o.progress_interval), "img");
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    for (int i; (i = next.fetch_add(1)) < o.images;) {
      try {
        std::mt19937_64 rng(sample_seed(o.seed, static_cast<int64_t>(stream), static_cast<uint64_t>(i)));
        int h = sizes.long_max, w = sizes.long_max;
        if (!sizes.square) {
          const int L = static_cast<int>(randint(rng, sizes.long_min, sizes.long_max));
          const int s = static_cast<int>(std::lround(L * uniform(rng, sizes.short_min, sizes.short_max)));
          const bool landscape = bernoulli(rng, sizes.landscape);
          h = landscape ? s : L, w = landscape ? L : s;
        }
        std::vector<SynthObject> objs;
        const Image img = make(h, w, rng, objs);
        char stem[32];
        std::snprintf(stem, sizeof stem, "%05d", i);
        const char* split = i < n_val ? "val" : "train";
        write_jpeg(o.out / "images" / split / (std::string(stem) + ".jpg"), img, 90);
        std::ofstream lab(o.out / "labels" / split / (std::string(stem) + ".txt"));
        for (const auto& ob : objs) {
          char line[128];
          std::snprintf(line, sizeof line, "%d %.6f %.6f %.6f %.6f\n", ob.cls, (ob.box.x0 + ob.box.x1) / 2.0 / img.w,
                        (ob.box.y0 + ob.box.y1) / 2.0 / img.h, double(ob.box.x1 - ob.box.x0) / img.w,
                        double(ob.box.y1 - ob.box.y0) / img.h);
          lab << line;
        }
        if (!lab) throw DataError("cannot write label file for image " + std::string(stem));
        bar.update(++done);
      } catch (...) {
        std::lock_guard<std::mutex> lk(error_mu);
        if (!error) error = std::current_exception();
        next = o.images;
      }
    }
  };
  const unsigned n_threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16u));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  bar.finish();
  if (error) std::rethrow_exception(error);
  std::ofstream yaml(o.out / "data.yaml");
  yaml << "# written by libreyolo data synth " << what << " (seed " << o.seed << ")\n"
       << "# no 'path' key: the dataset root is this file's folder\n"
       << "train: images/train\n"
       << "val: " << (n_val > 0 ? "images/val" : "images/train") << "\n"
       << "nc: " << names.size() << "\n"
       << "names:\n";
  for (size_t k = 0; k < names.size(); ++k) yaml << "  " << k << ": " << names[k] << "\n";
  if (!yaml) throw DataError("cannot write '" + (o.out / "data.yaml").string() + "'");
  log::info("synth: wrote ", o.images, " images (", n_val, " val; ", what, ") of ", names.size(), " classes to ",
            o.out.string());
}

}  // namespace libreyolo::data::detail
