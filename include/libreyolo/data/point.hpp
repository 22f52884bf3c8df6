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
#include <libreyolo/core/api.hpp>
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
  PointBatch to(const torch::Device& device, bool non_blocking = true) const;
};

// The grid cell of a centre (pixels of an imgsz x imgsz image) on a G x G grid, as the original
// computes it: int(c / imgsz * G), clamped to [0, G - 1].
LIBREYOLO_INLINE int64_t point_cell(double c, int imgsz, int64_t G);

// points: float [n, 3] (class, x, y in pixels of an imgsz x imgsz image) -> int64 [G, G] target.
LIBREYOLO_INLINE torch::Tensor points_to_grid(const torch::Tensor& points, int imgsz, int64_t G);

namespace detail {
LIBREYOLO_INLINE void validate_point_augment(const PointAugment& a);
}  // namespace detail

// One split of a dataset YAML; satisfies the Loader's Dataset contract.
class PointDataset {
 public:
  using Sample = PointSample;
  using Batch = PointBatch;

  static std::shared_ptr<PointDataset> open(const DatasetYaml& yaml, const std::string& split, PointAugment aug);

  static std::shared_ptr<PointDataset> open_images(const std::vector<std::filesystem::path>& images,
                                                   std::vector<std::string> names, PointAugment aug,
                                                   const std::filesystem::path& cache_file,
                                                   const std::string& split = "split");

  size_t size() const { return index_.entries.size(); }
  const std::vector<std::string>& names() const { return names_; }
  const PointAugment& augment() const { return aug_; }
  const LabelIndex& index() const { return index_; }
  int64_t grid_size() const { return aug_.imgsz / aug_.stride; }

  Sample get(size_t i, std::mt19937_64& rng, int /*epoch*/) const;

  static Batch collate(std::vector<Sample>&& samples);

 private:
  struct Failures {
    std::mutex mu;
    std::vector<bool> bad;
  };
  bool is_bad(size_t j) const;
  bool mark_bad(size_t j) const;

  PointAugment aug_;
  std::vector<std::string> names_;
  LabelIndex index_;
  std::shared_ptr<Failures> bad_;
  std::shared_ptr<ImageCache> cache_;
};

// The point task's synthetic set: square imgsz x imgsz JPEGs with 1-5 small non-overlapping shapes
// (side 12-30% of the image, at least 12 px), YOLO box labels (their centres are the points), data.yaml.
// The first round(val_fraction * images) go to val.
LIBREYOLO_INLINE void synth_point(const SynthOptions& o);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/point-inl.hpp>
#endif
