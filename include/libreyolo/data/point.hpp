#pragma once
// Point (object centroid) data for the point task (tasks/point.hpp), as the original's FOMO dataset
// (libreyolo/models/fomo/dataset.py) reads it: a YOLO dataset YAML (path, train, val, names) whose label
// rows are boxes `class cx cy w h` or polygons `class x1 y1 x2 y2 ...` (normalised); each object is its
// box centre (a polygon's bounding-box centre). The image is stretched to imgsz x imgsz (no letterbox),
// the centres scale with it.
//
// Target: the heat-map at the network's output stride, int64 [G, G] with G = imgsz / stride: 0 is the
// background, 1 + class at cell (floor(cx / imgsz * G), floor(cy / imgsz * G)) clamped to the grid; of
// two objects in one cell the later label row wins (the original's encoding).
//
// Training augmentation (the original's FOMOTrainTransform without mosaic): horizontal / vertical flips
// and the HSV jitter (multiply gains), each off at 0 (the FOMO recipe has them all off).
//
// Errors: DataError naming the YAML / split / file; ConfigError for an imgsz that is not a multiple of
// the stride. An image that fails to decode at load time is warned about once and replaced by the next
// usable one (with its labels), as in the detection data.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/detect_synth.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/image_cache.hpp>
#include <libreyolo/data/image_ops.hpp>
#include <libreyolo/data/label_cache.hpp>
#include <libreyolo/data/rng.hpp>
#include <libreyolo/data/synth.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace libreyolo::data {

struct PointAugment {
  int imgsz = 96;
  int stride = 8;  // the network's output stride: the target grid is imgsz / stride cells a side
  bool train = true;
  double fliplr = 0, flipud = 0;
  double hsv_h = 0, hsv_s = 0, hsv_v = 0;  // multiply gains (fractions)
  double hsv_prob = 1.0;
  std::string cache = "off";  // off | ram | disk: the stretched image is cached
};

struct PointSample {
  torch::Tensor image;   // uint8 [3, S, S]
  torch::Tensor points;  // float [n, 3]: class, x, y in pixels of `image`
  torch::Tensor grid;    // int64 [G, G]
  std::string path;
  int orig_h = 0, orig_w = 0;
};

struct PointBatch {
  torch::Tensor images;               // uint8 [B, 3, S, S]
  torch::Tensor grid;                 // int64 [B, G, G]: 0 background, 1 + class
  std::vector<torch::Tensor> points;  // per image [n, 3] class, x, y (input pixels; stays on the CPU)
  std::vector<std::string> paths;
  std::vector<std::array<int, 2>> orig_hw;

  template <class F>
  void for_each_tensor(F&& f) {
    f(images);
    f(grid);
  }
  PointBatch to(const torch::Device& device, bool non_blocking = true) const {
    PointBatch b = *this;
    b.images = images.to(device, non_blocking);
    b.grid = grid.to(device, non_blocking);
    return b;
  }
};

// The grid cell of a centre (pixels of an imgsz x imgsz image) on a G x G grid, as the original
// computes it: int(c / imgsz * G), clamped to [0, G - 1].
inline int64_t point_cell(double c, int imgsz, int64_t G) {
  const double g = c / static_cast<double>(imgsz) * static_cast<double>(G);
  const int64_t i = static_cast<int64_t>(g);  // truncation towards zero, as Python's int()
  return std::clamp<int64_t>(i, 0, G - 1);
}

// points: float [n, 3] (class, x, y in pixels of an imgsz x imgsz image) -> int64 [G, G] target.
inline torch::Tensor points_to_grid(const torch::Tensor& points, int imgsz, int64_t G) {
  auto grid = torch::zeros({G, G}, torch::kInt64);
  auto g = grid.accessor<int64_t, 2>();
  const auto p = points.to(torch::kFloat32).contiguous();
  auto a = p.accessor<float, 2>();
  for (int64_t i = 0; i < p.size(0); ++i) {
    const int64_t gx = point_cell(a[i][1], imgsz, G), gy = point_cell(a[i][2], imgsz, G);
    g[gy][gx] = static_cast<int64_t>(a[i][0]) + 1;
  }
  return grid;
}

namespace detail {
inline void validate_point_augment(const PointAugment& a) {
  auto bad = [](const std::string& key, double v, const std::string& allowed) {
    throw ConfigError("point augment " + key + " = " + log::cat(v) + " is outside " + allowed);
  };
  if (a.stride < 1) bad("stride", a.stride, "[1, inf)");
  if (a.imgsz < a.stride || a.imgsz % a.stride != 0)
    throw ConfigError("imgsz=" + std::to_string(a.imgsz) + ": the point task needs a positive multiple of the network's "
                      "output stride " + std::to_string(a.stride) + " (the target grid is imgsz / " +
                      std::to_string(a.stride) + " cells a side)");
  const std::pair<const char*, double> probs[] = {{"fliplr", a.fliplr}, {"flipud", a.flipud}, {"hsv_prob", a.hsv_prob},
                                                  {"hsv_h", a.hsv_h},   {"hsv_s", a.hsv_s},   {"hsv_v", a.hsv_v}};
  for (const auto& [k, v] : probs)
    if (!(v >= 0 && v <= 1)) bad(k, v, "[0, 1]");
}
}  // namespace detail

// One split of a dataset YAML; satisfies the Loader's Dataset contract.
class PointDataset {
 public:
  using Sample = PointSample;
  using Batch = PointBatch;

  static std::shared_ptr<PointDataset> open(const DatasetYaml& yaml, const std::string& split, PointAugment aug) {
    const auto& sources = yaml.split(split);
    if (sources.empty()) throw DataError("dataset YAML '" + yaml.file.string() + "' has no '" + split + "' split");
    const auto images = split_image_files(sources);
    if (images.empty())
      throw DataError("split '" + split + "' of dataset YAML '" + yaml.file.string() +
                      "' lists no images (.jpg, .jpeg, .png) in its folders or list files");
    return open_images(images, yaml.names, aug, label_cache_path(sources, images), split);
  }

  static std::shared_ptr<PointDataset> open_images(const std::vector<std::filesystem::path>& images,
                                                   std::vector<std::string> names, PointAugment aug,
                                                   const std::filesystem::path& cache_file,
                                                   const std::string& split = "split") {
    detail::validate_point_augment(aug);
    if (names.empty()) throw ConfigError("point dataset: no class names");
    auto ds = std::shared_ptr<PointDataset>(new PointDataset());
    ds->aug_ = aug;
    ds->names_ = std::move(names);
    ds->index_ = build_label_index(images, static_cast<int>(ds->names_.size()), cache_file);
    log_label_summary(split, ds->index_);
    require_class_ids_in_range(ds->index_, split);
    if (ds->index_.entries.empty())
      throw DataError("split '" + split + "' has no usable image: all " + std::to_string(images.size()) +
                      " were skipped (see the warnings above)");
    ds->bad_ = std::make_shared<Failures>();
    ds->bad_->bad.assign(ds->index_.entries.size(), false);
    const CacheMode mode = parse_cache_mode(aug.cache);
    if (mode != CacheMode::off)
      log::info(split, ": cache=", aug.cache, ": stretched images kept ", mode == CacheMode::ram ? "in memory" : "on disk (.libreyolo_cache/)",
                " after their first read");
    ds->cache_ = std::make_shared<ImageCache>(mode, ds->index_.entries.size(), aug.imgsz);
    return ds;
  }

  size_t size() const { return index_.entries.size(); }
  const std::vector<std::string>& names() const { return names_; }
  const PointAugment& augment() const { return aug_; }
  const LabelIndex& index() const { return index_; }
  int64_t grid_size() const { return aug_.imgsz / aug_.stride; }

  Sample get(size_t i, std::mt19937_64& rng, int /*epoch*/) const {
    const size_t n = size();
    const int S = aug_.imgsz;
    for (size_t k = 0; k < n; ++k) {
      const size_t j = (i + k) % n;
      if (is_bad(j)) continue;
      const auto& e = index_.entries[j];
      std::shared_ptr<const Image> img;
      try {
        img = cache_->get(j, e.image, [&] { return resize_bilinear(read_image(e.image, S), S, S); });
      } catch (const DataError& err) {
        if (mark_bad(j)) log::warn(err.what(), " (using the next image of the split instead)");
        continue;
      }
      Sample s;
      s.path = e.image, s.orig_h = e.h, s.orig_w = e.w;
      std::vector<float> pts;
      pts.reserve(e.boxes.size() * 3);
      for (const auto& b : e.boxes) pts.insert(pts.end(), {b[0], b[1] * S, b[2] * S});
      bool flip_x = false, flip_y = false;
      if (aug_.train) {
        flip_x = bernoulli(rng, aug_.fliplr);
        flip_y = bernoulli(rng, aug_.flipud);
      }
      const bool hsv = aug_.train && (aug_.hsv_h > 0 || aug_.hsv_s > 0 || aug_.hsv_v > 0) && bernoulli(rng, aug_.hsv_prob);
      if (flip_x || flip_y || hsv) {
        Image out = *img;
        if (hsv) hsv_jitter(out, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
        if (flip_x) flip_lr(out);
        if (flip_y) flip_ud(out);
        for (size_t p = 0; p < pts.size(); p += 3) {
          if (flip_x) pts[p + 1] = S - pts[p + 1];
          if (flip_y) pts[p + 2] = S - pts[p + 2];
        }
        s.image = to_chw_tensor(out);
      } else {
        s.image = to_chw_tensor(*img);
      }
      s.points = pts.empty() ? torch::zeros({0, 3}, torch::kFloat32)
                             : torch::from_blob(pts.data(), {static_cast<int64_t>(e.boxes.size()), 3}, torch::kFloat32).clone();
      s.grid = points_to_grid(s.points, S, grid_size());
      return s;
    }
    throw DataError("no image of the split can be decoded any more (see warnings)");
  }

  static Batch collate(std::vector<Sample>&& samples) {
    Batch b;
    std::vector<torch::Tensor> images, grids;
    for (auto& s : samples) {
      images.push_back(std::move(s.image));
      grids.push_back(std::move(s.grid));
      b.points.push_back(std::move(s.points));
      b.paths.push_back(std::move(s.path));
      b.orig_hw.push_back({s.orig_h, s.orig_w});
    }
    b.images = torch::stack(images);
    b.grid = torch::stack(grids);
    return b;
  }

 private:
  struct Failures {
    std::mutex mu;
    std::vector<bool> bad;
  };
  bool is_bad(size_t j) const {
    std::lock_guard<std::mutex> lk(bad_->mu);
    return bad_->bad[j];
  }
  bool mark_bad(size_t j) const {
    std::lock_guard<std::mutex> lk(bad_->mu);
    const bool first = !bad_->bad[j];
    bad_->bad[j] = true;
    return first;
  }

  PointAugment aug_;
  std::vector<std::string> names_;
  LabelIndex index_;
  std::shared_ptr<Failures> bad_;
  std::shared_ptr<ImageCache> cache_;
};

// The point task's synthetic set: square imgsz x imgsz JPEGs with 1-5 small non-overlapping shapes
// (side 12-30% of the image, at least 12 px), YOLO box labels (their centres are the points), data.yaml.
// The first round(val_fraction * images) go to val.
inline void synth_point(const SynthOptions& o) {
  namespace fs = std::filesystem;
  auto bad = [](const std::string& key, const std::string& v, const char* allowed) {
    throw ConfigError("synth --task point option " + key + " = " + v + " is outside the allowed range " + allowed);
  };
  if (o.classes < 1 || o.classes > kSynthMaxClasses) bad("classes", std::to_string(o.classes), "[1, 16]");
  if (o.imgsz < 64 || o.imgsz > 4096) bad("imgsz", std::to_string(o.imgsz), "[64, 4096]");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) bad("val_fraction", log::cat(o.val_fraction), "[0, 1)");
  if (o.images < (o.val_fraction > 0 ? 2 : 1))
    bad("images", std::to_string(o.images), o.val_fraction > 0 ? "[2, inf) (train and val)" : "[1, inf)");
  if (o.out.empty()) throw ConfigError("synth option out is empty: give the folder to write the dataset to");
  detail::prepare_synth_out(o.out);
  for (const char* d : {"images", "labels"}) fs::remove_all(o.out / d);
  const int n_val = o.val_fraction > 0 ? std::clamp(static_cast<int>(std::lround(o.val_fraction * o.images)), 1, o.images - 1) : 0;
  for (const char* split : {"train", "val"}) {
    if (std::string(split) == "val" && n_val == 0) continue;
    fs::create_directories(o.out / "images" / split);
    fs::create_directories(o.out / "labels" / split);
  }
  SynthDetectStyle st;
  st.objects_min = 1;
  st.objects_max = 5;
  st.side_min = 0.12;
  st.side_max = 0.30;
  st.max_covered = 0.0;
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    for (int i; (i = next.fetch_add(1)) < o.images;) {
      try {
        std::mt19937_64 rng(sample_seed(o.seed, 0x9017, static_cast<uint64_t>(i)));
        std::vector<SynthObject> objs;
        const Image img = synth_detect_image(o.imgsz, o.imgsz, o.classes, rng, objs, st);
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
  if (error) std::rethrow_exception(error);
  std::ofstream yaml(o.out / "data.yaml");
  yaml << "# written by libreyolo data synth --task point (seed " << o.seed << "): the points are the box centres\n"
       << "train: images/train\n"
       << "val: " << (n_val > 0 ? "images/val" : "images/train") << "\n"
       << "nc: " << o.classes << "\n"
       << "names:\n";
  for (int k = 0; k < o.classes; ++k) yaml << "  " << k << ": " << kSynthShapeNames[k] << "\n";
  if (!yaml) throw DataError("cannot write '" + (o.out / "data.yaml").string() + "'");
  log::info("synth: wrote ", o.images, " point images (", n_val, " val) of ", o.classes, " classes to ", o.out.string());
}

}  // namespace libreyolo::data
