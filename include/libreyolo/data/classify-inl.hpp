#pragma once
// Definitions of classify.hpp (core/api.hpp): included by classify.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/classify.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE ClassifyBatch ClassifyBatch::to(const torch::Device& device, bool non_blocking) const {
  return {images.to(device, non_blocking), labels.to(device, non_blocking)};
}

LIBREYOLO_INLINE Image random_resized_crop(const Image& img, int size, double scale_min, std::mt19937_64& rng) {
  const double area = static_cast<double>(img.h) * img.w;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(rng, scale_min, 1.0);
    const double aspect = std::exp(uniform(rng, log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= img.w && h <= img.h) {
      const int y = static_cast<int>(randint(rng, 0, img.h - h));
      const int x = static_cast<int>(randint(rng, 0, img.w - w));
      return resize_bilinear(crop(img, y, x, h, w), size, size);
    }
  }
  const double ratio = static_cast<double>(img.w) / img.h;
  int w = img.w, h = img.h;
  if (ratio < 3.0 / 4.0) h = std::min(img.h, static_cast<int>(std::lround(w / (3.0 / 4.0))));
  else if (ratio > 4.0 / 3.0) w = std::min(img.w, static_cast<int>(std::lround(h * (4.0 / 3.0))));
  return resize_bilinear(crop(img, (img.h - h) / 2, (img.w - w) / 2, h, w), size, size);
}

LIBREYOLO_INLINE Image resize_center_crop(const Image& img, int size) {
  const double s = static_cast<double>(size) / std::min(img.h, img.w);
  const int h = std::max(size, static_cast<int>(std::lround(img.h * s)));
  const int w = std::max(size, static_cast<int>(std::lround(img.w * s)));
  Image r = resize_bilinear(img, h, w);
  return crop(r, (h - size) / 2, (w - size) / 2, size, size);
}

namespace detail {

LIBREYOLO_INLINE bool has_image_extension(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

LIBREYOLO_INLINE std::vector<std::string> sorted_subdirs(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !name.empty() && name[0] != '.') names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

LIBREYOLO_INLINE std::vector<std::filesystem::path> sorted_image_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && has_image_extension(e.path())) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

LIBREYOLO_INLINE void require_dir(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  auto ext = dir.extension().string();
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (std::filesystem::is_regular_file(dir, ec) && (ext == ".yaml" || ext == ".yml"))
    throw DataError(what + " '" + dir.string() + "' is a YAML file (a detection, point or semantic dataset); a " +
                    "classification model takes a folder root/train/<class>/*.jpg, root/val/<class>/*.jpg");
  if (!std::filesystem::is_directory(dir, ec))
    throw DataError(what + " '" + dir.string() + "' does not exist or is not a directory " +
                    "(expected root/train/<class>/*.jpg and root/val/<class>/*.jpg)");
}

LIBREYOLO_INLINE void check_same_classes(const std::filesystem::path& dir, const std::vector<std::string>& got,
                                         const std::vector<std::string>& expected) {
  for (const auto& c : expected)
    if (!std::binary_search(got.begin(), got.end(), c))
      throw DataError("split '" + dir.string() + "' lacks the class folder '" + c +
                      "' that train/ has (every split needs the same class folders as train/)");
  for (const auto& c : got)
    if (!std::binary_search(expected.begin(), expected.end(), c))
      throw DataError("split '" + dir.string() + "' has the class folder '" + c +
                      "' that train/ does not have (every split needs the same class folders as train/)");
}

LIBREYOLO_INLINE bool LoadFailures::is_bad(size_t i) {
  std::lock_guard<std::mutex> lk(mu);
  return bad[i];
}

LIBREYOLO_INLINE bool LoadFailures::mark(size_t i) {  // true the first time
  std::lock_guard<std::mutex> lk(mu);
  const bool first = !bad[i];
  bad[i] = true;
  return first;
}

}  // namespace detail

LIBREYOLO_INLINE ClassifyFolder ClassifyFolder::open(const std::filesystem::path& split_dir, ClassifyAugment aug,
                                                     const std::vector<std::string>* expected_classes) {
  validate(aug);
  detail::require_dir(split_dir, "classification split folder");
  ClassifyFolder f;
  f.dir_ = split_dir;
  f.aug_ = aug;
  f.classes_ = detail::sorted_subdirs(split_dir);
  if (f.classes_.empty())
    throw DataError("classification split folder '" + split_dir.string() +
                    "' has no class folders (expected one sub-folder of images per class)");
  for (const auto& c : f.classes_)  // class names go into checkpoints and results.json (JSON: UTF-8 only)
    if (auto why = utf8::problem(c); !why.empty())
      throw DataError("classification split folder '" + utf8::escaped(split_dir.string()) + "': the class folder name " +
                      why + "; rename the folder (class names must be UTF-8 text)");
  if (expected_classes) detail::check_same_classes(split_dir, f.classes_, *expected_classes);
  for (size_t k = 0; k < f.classes_.size(); ++k) f.scan_class(k);
  const std::string split = split_dir.filename().string();
  log::info(split, ": ", f.items_.size(), " images, ", f.classes_.size(), " classes",
            f.skipped_ ? ", " + std::to_string(f.skipped_) + " skipped (see warnings)" : std::string());
  f.failures_ = std::make_shared<detail::LoadFailures>();
  f.failures_->bad.assign(f.items_.size(), false);
  const CacheMode mode = parse_cache_mode(aug.cache);
  if (mode != CacheMode::off)
    log::info(split, ": cache=", aug.cache, ": decoded images kept ", mode == CacheMode::ram ? "in memory" : "on disk (.libreyolo_cache/)",
              " after their first read");
  f.cache_ = std::make_shared<ImageCache>(mode, f.items_.size(), aug.imgsz);
  return f;
}

LIBREYOLO_INLINE ClassifyFolder::Sample ClassifyFolder::get(size_t i, std::mt19937_64& rng, int /*epoch*/) const {
  const size_t n = items_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t j = (i + k) % n;
    if (failures_->is_bad(j)) continue;
    try {
      auto img = cache_->get(j, items_[j].file, [&] { return read_image(items_[j].file, aug_.imgsz); });
      return {to_chw_tensor(transform(*img, rng)), items_[j].label};
    } catch (const DataError& e) {
      if (failures_->mark(j)) log::warn(e.what(), " (using the next image of the split instead)");
    }
  }
  throw DataError("no image of split '" + dir_.string() + "' can be decoded any more (see warnings)");
}

LIBREYOLO_INLINE ClassifyFolder::Batch ClassifyFolder::collate(std::vector<Sample>&& samples) {
  std::vector<torch::Tensor> images;
  std::vector<int64_t> labels;
  images.reserve(samples.size());
  labels.reserve(samples.size());
  for (auto& s : samples) {
    images.push_back(std::move(s.image));
    labels.push_back(s.label);
  }
  return {torch::stack(images), torch::tensor(labels, torch::kInt64)};
}

LIBREYOLO_INLINE Image ClassifyFolder::transform(const Image& img, std::mt19937_64& rng) const {
  if (!aug_.train) return resize_center_crop(img, aug_.imgsz);
  Image out = random_resized_crop(img, aug_.imgsz, aug_.scale_min, rng);
  if (bernoulli(rng, aug_.fliplr)) flip_lr(out);
  hsv_jitter(out, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
  return out;
}

LIBREYOLO_INLINE void ClassifyFolder::validate(const ClassifyAugment& a) {
  auto bad = [](const std::string& key, double v, const char* allowed) {
    throw ConfigError("classification augment " + key + " = " + log::cat(v) + " is outside " + allowed);
  };
  if (a.imgsz < 8) bad("imgsz", a.imgsz, "[8, inf)");
  if (!(a.fliplr >= 0 && a.fliplr <= 1)) bad("fliplr", a.fliplr, "[0, 1]");
  if (!(a.scale_min > 0 && a.scale_min <= 1)) bad("scale_min", a.scale_min, "(0, 1]");
  if (!(a.hsv_h >= 0 && a.hsv_h <= 1)) bad("hsv_h", a.hsv_h, "[0, 1]");
  if (!(a.hsv_s >= 0 && a.hsv_s <= 1)) bad("hsv_s", a.hsv_s, "[0, 1]");
  if (!(a.hsv_v >= 0 && a.hsv_v <= 1)) bad("hsv_v", a.hsv_v, "[0, 1]");
}

LIBREYOLO_INLINE void ClassifyFolder::scan_class(size_t k) {
  const auto folder = dir_ / classes_[k];
  const auto files = detail::sorted_image_files(folder);
  size_t kept = 0;
  for (const auto& file : files) {
    std::string why;
    if (!probe_image(file, &why)) {
      log::warn("skipping image '", file.string(), "': ", why);
      ++skipped_;
      continue;
    }
    items_.push_back({file, static_cast<int64_t>(k)});
    ++kept;
  }
  if (files.empty())
    throw DataError("class folder '" + folder.string() + "' has no images (.jpg, .jpeg or .png)");
  if (kept == 0)
    throw DataError("class folder '" + folder.string() + "' has no readable images (all " +
                    std::to_string(files.size()) + " skipped, see warnings)");
}

LIBREYOLO_INLINE ClassifyData open_classify(const std::filesystem::path& root, int imgsz, const ClassifyAugment& train_aug) {
  detail::require_dir(root, "classification dataset root");
  ClassifyAugment t = train_aug;
  t.imgsz = imgsz;
  t.train = true;
  ClassifyAugment v = t;
  v.train = false;
  ClassifyData d;
  d.train = std::make_shared<ClassifyFolder>(ClassifyFolder::open(root / "train", t));
  if (d.train->classes().size() == 1)
    log::warn("classification dataset '", utf8::escaped(root.string()), "': train/ has one class folder ('",
              d.train->classes().front(), "'): every prediction will be that class and accuracy is always 1; a "
              "classifier needs at least 2 class folders to learn anything");
  d.val = std::make_shared<ClassifyFolder>(ClassifyFolder::open(root / "val", v, &d.train->classes()));
  d.names = d.train->classes();
  return d;
}

}  // namespace libreyolo::data
