#pragma once
// Classification data as class-named folders: root/train/<class>/*.{jpg,jpeg,png} and
// root/val/<class>/... . Class names are the sorted folder names of train/.
//
// Errors (DataError, naming the path):
//   - root, root/train or root/val missing, or a split with no class folders;
//   - a class folder with no images (or none that passes probe_image);
//   - val/ whose class folders differ from train/'s (the differing class is named).
// Skips (never fatal):
//   - at scan time, a file that probe_image rejects (unreadable, not an image, truncated) is
//     skipped, logged once with log::warn naming the file and the reason, and counted (skipped());
//     each split logs one summary line: "train: 1200 images, 10 classes, 2 skipped (see warnings)";
//   - at load time, a file that still fails to decode is logged once with log::warn and its sample
//     is replaced by the next valid index (deterministic, whatever the worker count);
//   - files whose extension is not .jpg/.jpeg/.png (any case) are not images and are ignored.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/utf8.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/image_cache.hpp>
#include <libreyolo/data/rng.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace libreyolo::data {

struct ClassifyAugment {
  int imgsz = 224;
  bool train = true;
  double fliplr = 0.5;
  double scale_min = 0.35;  // random-resized-crop area fraction lower bound
  double hsv_h = 0.015, hsv_s = 0.4, hsv_v = 0.4;
  std::string cache = "off";  // off | ram | disk: the decoded image (before the random crop) is cached
};

struct ClassifySample {
  torch::Tensor image;  // uint8 [3,S,S]
  int64_t label = 0;
};

struct ClassifyBatch {
  torch::Tensor images;  // uint8 [B,3,S,S]
  torch::Tensor labels;  // int64 [B]
  template <class F>
  void for_each_tensor(F&& f) {
    f(images);
    f(labels);
  }
  // Copies to `device`; non_blocking overlaps the copy with compute when the batch is pinned.
  ClassifyBatch to(const torch::Device& device, bool non_blocking = true) const;
};

// torchvision-style RandomResizedCrop: a crop of area fraction in [scale_min, 1] and aspect ratio
// in [3/4, 4/3] (log-uniform), 10 attempts, then a centre crop fallback; resized to size x size.
LIBREYOLO_INLINE Image random_resized_crop(const Image& img, int size, double scale_min, std::mt19937_64& rng);

// Resize so the shorter side is `size` (aspect kept), then take the centred size x size square.
LIBREYOLO_INLINE Image resize_center_crop(const Image& img, int size);

namespace detail {

LIBREYOLO_INLINE bool has_image_extension(const std::filesystem::path& p);

// Sorted sub-folder names (hidden folders such as .cache are not classes).
LIBREYOLO_INLINE std::vector<std::string> sorted_subdirs(const std::filesystem::path& dir);

LIBREYOLO_INLINE std::vector<std::filesystem::path> sorted_image_files(const std::filesystem::path& dir);

LIBREYOLO_INLINE void require_dir(const std::filesystem::path& dir, const std::string& what);

// Both splits must have the same class folders; names the first class present in only one.
LIBREYOLO_INLINE void check_same_classes(const std::filesystem::path& dir, const std::vector<std::string>& got,
                                         const std::vector<std::string>& expected);

// Indices found undecodable at load time: warned about once, then skipped directly.
struct LoadFailures {
  std::mutex mu;
  std::vector<bool> bad;
  bool is_bad(size_t i);
  bool mark(size_t i);  // true the first time
};

}  // namespace detail

// One split of a class-folder dataset; satisfies the Loader's Dataset contract.
class ClassifyFolder {
 public:
  using Sample = ClassifySample;
  using Batch = ClassifyBatch;

  // Scans split_dir/<class>/ (sorted, deterministic) and probes every image. expected_classes (the
  // train split's) makes a differing class set an error.
  static ClassifyFolder open(const std::filesystem::path& split_dir, ClassifyAugment aug,
                             const std::vector<std::string>* expected_classes = nullptr);

  size_t size() const { return items_.size(); }
  const std::vector<std::string>& classes() const { return classes_; }
  size_t skipped() const { return skipped_; }
  const std::filesystem::path& dir() const { return dir_; }
  const ClassifyAugment& augment() const { return aug_; }
  const std::filesystem::path& file(size_t i) const { return items_.at(i).file; }
  int64_t label(size_t i) const { return items_.at(i).label; }

  Sample get(size_t i, std::mt19937_64& rng, int /*epoch*/) const;

  static Batch collate(std::vector<Sample>&& samples);

  // The image transform alone: random-resized-crop + flip + HSV when training, else resize + centre crop.
  Image transform(const Image& img, std::mt19937_64& rng) const;

 private:
  struct Item {
    std::filesystem::path file;
    int64_t label;
  };

  static void validate(const ClassifyAugment& a);

  void scan_class(size_t k);

  std::filesystem::path dir_;
  ClassifyAugment aug_;
  std::vector<std::string> classes_;
  std::vector<Item> items_;
  size_t skipped_ = 0;
  std::shared_ptr<detail::LoadFailures> failures_;
  std::shared_ptr<ImageCache> cache_;
};

struct ClassifyData {
  std::vector<std::string> names;
  std::shared_ptr<ClassifyFolder> train, val;
};

// Opens root/train (with train_aug, imgsz overriding its imgsz) and root/val (centre-crop transform).
LIBREYOLO_INLINE ClassifyData open_classify(const std::filesystem::path& root, int imgsz, const ClassifyAugment& train_aug);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/classify-inl.hpp>
#endif
