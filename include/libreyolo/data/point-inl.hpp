#pragma once
// Definitions of point.hpp (core/api.hpp): included by point.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/point.hpp>
#include <libreyolo/data/synth_writer.hpp>
#include <libreyolo/data/label_cache-inl.hpp>  // detail::require_label_files, refuse_other_task_yaml

namespace libreyolo::data {

LIBREYOLO_INLINE PointBatch PointBatch::to(const torch::Device& device, bool non_blocking) const {
  PointBatch b = *this;
  b.images = images.to(device, non_blocking);
  b.grid = grid.to(device, non_blocking);
  return b;
}

LIBREYOLO_INLINE int64_t point_cell(double c, int imgsz, int64_t G) {
  const double g = c / static_cast<double>(imgsz) * static_cast<double>(G);
  const int64_t i = static_cast<int64_t>(g);  // truncation towards zero, as Python's int()
  return std::clamp<int64_t>(i, 0, G - 1);
}

LIBREYOLO_INLINE torch::Tensor points_to_grid(const torch::Tensor& points, int imgsz, int64_t G) {
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

LIBREYOLO_INLINE void validate_point_augment(const PointAugment& a) {
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

LIBREYOLO_INLINE std::shared_ptr<PointDataset> PointDataset::open(const DatasetYaml& yaml, const std::string& split, PointAugment aug) {
  const auto& sources = yaml.split(split);
  if (sources.empty()) throw DataError("dataset YAML '" + yaml.file.string() + "' has no '" + split + "' split");
  const auto images = split_image_files(sources);
  if (images.empty())
    throw DataError("split '" + split + "' of dataset YAML '" + yaml.file.string() +
                    "' lists no images (.jpg, .jpeg, .png) in its folders or list files");
  detail::refuse_other_task_yaml(yaml, "point");
  detail::require_label_files(images, split, yaml.file, "point");
  return open_images(images, yaml.names, aug, label_cache_path(sources, images), split);
}

LIBREYOLO_INLINE std::shared_ptr<PointDataset> PointDataset::open_images(const std::vector<std::filesystem::path>& images,
                                                                         std::vector<std::string> names, PointAugment aug,
                                                                         const std::filesystem::path& cache_file,
                                                                         const std::string& split) {
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

LIBREYOLO_INLINE PointDataset::Sample PointDataset::get(size_t i, std::mt19937_64& rng, int /*epoch*/) const {
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

LIBREYOLO_INLINE PointDataset::Batch PointDataset::collate(std::vector<Sample>&& samples) {
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

LIBREYOLO_INLINE bool PointDataset::is_bad(size_t j) const {
  std::lock_guard<std::mutex> lk(bad_->mu);
  return bad_->bad[j];
}

LIBREYOLO_INLINE bool PointDataset::mark_bad(size_t j) const {
  std::lock_guard<std::mutex> lk(bad_->mu);
  const bool first = !bad_->bad[j];
  bad_->bad[j] = true;
  return first;
}

LIBREYOLO_INLINE void synth_point(const SynthOptions& o) {
  const std::string what = "--task point";
  if (o.classes < 1 || o.classes > kSynthMaxClasses) detail::synth_option_error(what, "classes", std::to_string(o.classes), "[1, 16]");
  if (o.imgsz < 64 || o.imgsz > 4096) detail::synth_option_error(what, "imgsz", std::to_string(o.imgsz), "[64, 4096]");
  detail::validate_synth_split(o, what);
  SynthDetectStyle st;
  st.objects_min = 1;
  st.objects_max = 5;
  st.side_min = 0.12;
  st.side_max = 0.30;
  st.max_covered = 0.0;
  SynthSizes sizes;
  sizes.long_max = o.imgsz;
  sizes.square = true;
  std::vector<std::string> names;
  for (int k = 0; k < o.classes; ++k) names.emplace_back(kSynthShapeNames[k]);
  const SynthDetectMaker make = [&](int h, int w, std::mt19937_64& rng, std::vector<SynthObject>& objs) {
    return synth_detect_image(h, w, o.classes, rng, objs, st);
  };
  detail::write_synth_detect_set(o, sizes, 0x9017, make, names, "--task point, points at the box centres");
}

}  // namespace libreyolo::data
