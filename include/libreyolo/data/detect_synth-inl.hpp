#pragma once
// Definitions of detect_synth.hpp (core/api.hpp): included by detect_synth.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/detect_synth.hpp>

namespace libreyolo::data {

namespace detail {

LIBREYOLO_INLINE double box_cover_fraction(const BoxF& a, const BoxF& b) {  // overlap / the smaller area
  const double iw = std::min(a.x1, b.x1) - std::max(a.x0, b.x0), ih = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
  if (iw <= 0 || ih <= 0) return 0;
  const double aa = (a.x1 - a.x0) * (a.y1 - a.y0), ab = (b.x1 - b.x0) * (b.y1 - b.y0);
  return iw * ih / std::min(aa, ab);
}

}  // namespace detail

LIBREYOLO_INLINE Image synth_detect_image(int h, int w, int classes, std::mt19937_64& rng, std::vector<SynthObject>& objects,
                                          const SynthDetectStyle& st) {
  Image img(h, w, 3);
  detail::synth_background(img, rng, st.background);
  objects.clear();
  const int n = static_cast<int>(randint(rng, st.objects_min, st.objects_max));
  const double short_side = std::min(h, w);
  std::vector<BoxF> placed;
  for (int k = 0; k < n; ++k) {
    for (int attempt = 0; attempt < 30; ++attempt) {  // a place that hides no other object much
      const double side = short_side * std::exp(uniform(rng, std::log(st.side_min), std::log(st.side_max)));
      const double aspect = std::exp(uniform(rng, -std::log(1.4), std::log(1.4)));
      const double bw = std::max(12.0, side * std::sqrt(aspect)), bh = std::max(12.0, side / std::sqrt(aspect));
      if (bw >= w || bh >= h) continue;
      const double x0 = uniform(rng, 0, w - bw), y0 = uniform(rng, 0, h - bh);
      const BoxF box{x0, y0, x0 + bw, y0 + bh};
      bool ok = true;
      for (const auto& p : placed) ok = ok && detail::box_cover_fraction(box, p) <= st.max_covered;
      if (!ok) continue;
      const int cls = static_cast<int>(randint(rng, 0, classes - 1));
      const double rotation = uniform(rng, -std::numbers::pi / 6, std::numbers::pi / 6);
      const Rgb base = detail::random_colour(rng);
      // Texture periods scale with the object, as in the classification sets (object ~ 0.75 S).
      const Texture tex = synth_class_texture(cls, base, detail::contrasting(base), {x0 + bw / 2, y0 + bh / 2},
                                              rotation, static_cast<int>(std::max(8.0, std::max(bw, bh) / 0.75)));
      const PixelBox painted = draw_class_shape(img, cls, box, rotation, tex);
      if (painted.x1 - painted.x0 >= 4 && painted.y1 - painted.y0 >= 4) {
        objects.push_back({cls, painted});
        placed.push_back(box);
      }
      break;
    }
  }
  add_noise(img, st.background.noise, rng);
  return img;
}

namespace detail {

LIBREYOLO_INLINE void validate_synth_detect(const SynthOptions& o, int long_min) {
  auto bad = [](const std::string& key, const std::string& v, const char* allowed) {
    throw ConfigError("synth --task detect option " + key + " = " + v + " is outside the allowed range " + allowed);
  };
  if (o.classes < 1 || o.classes > kSynthMaxClasses) bad("classes", std::to_string(o.classes), "[1, 16]");
  if (o.imgsz < 64 || o.imgsz > 8192) bad("imgsz", std::to_string(o.imgsz), "[64, 8192] (the long side)");
  if (long_min != 0 && (long_min < 64 || long_min > o.imgsz))
    bad("long_side_min", std::to_string(long_min), "[64, imgsz]");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) bad("val_fraction", log::cat(o.val_fraction), "[0, 1)");
  if (o.images < (o.val_fraction > 0 ? 2 : 1))
    bad("images", std::to_string(o.images), o.val_fraction > 0 ? "[2, inf) (train and val)" : "[1, inf)");
  if (o.out.empty()) throw ConfigError("synth option out is empty: give the folder to write the dataset to");
}

}  // namespace detail

LIBREYOLO_INLINE void synth_detect(const SynthOptions& o, int long_side_min) {  // default in synth.hpp
  namespace fs = std::filesystem;
  detail::validate_synth_detect(o, long_side_min);
  detail::prepare_synth_out(o.out);
  for (const char* d : {"images", "labels"}) fs::remove_all(o.out / d);
  int n_val = o.val_fraction > 0 ? std::clamp(static_cast<int>(std::lround(o.val_fraction * o.images)), 1, o.images - 1) : 0;
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
        std::mt19937_64 rng(sample_seed(o.seed, 0xDE7EC7, static_cast<uint64_t>(i)));
        const int lo = long_side_min > 0 ? long_side_min : o.imgsz;
        const int L = static_cast<int>(randint(rng, lo, o.imgsz));
        const int s = static_cast<int>(std::lround(L * uniform(rng, 0.56, 1.0)));
        const bool landscape = bernoulli(rng, 0.75);
        std::vector<SynthObject> objs;
        const Image img = synth_detect_image(landscape ? s : L, landscape ? L : s, o.classes, rng, objs);
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
  yaml << "# written by libreyolo data synth --task detect (seed " << o.seed << ")\n"
       << "# no 'path' key: the dataset root is this file's folder\n"
       << "train: images/train\n"
       << "val: " << (n_val > 0 ? "images/val" : "images/train") << "\n"
       << "nc: " << o.classes << "\n"
       << "names:\n";
  for (int k = 0; k < o.classes; ++k) yaml << "  " << k << ": " << kSynthShapeNames[k] << "\n";
  if (!yaml) throw DataError("cannot write '" + (o.out / "data.yaml").string() + "'");
  log::info("synth: wrote ", o.images, " detection images (", n_val, " val) of ", o.classes, " classes to ",
            o.out.string());
}

}  // namespace libreyolo::data
