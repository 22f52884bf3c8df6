#pragma once
// Detection dataset (YOLO format) for the threaded Loader: labels from the cached label index
// (label_cache.hpp), images decoded with DCT scaling and resized to long side imgsz (optionally
// cached: image_cache.hpp), then the training pipeline of Ultralytics:
//   mosaic (p = mosaic, while open) or letterbox -> random perspective -> mixup (p = mixup)
//   -> HSV -> flip up-down (p = flipud) -> flip left-right (p = fliplr);
// with affine = false, the original's YOLOv9 pipeline instead (build_train_plain: no perspective, flips and
// HSV of the image before its letterbox, mixup only after a mosaic);
// or, for validation (train = false), a plain letterbox (val_stretch: a stretch) to imgsz x imgsz with the mapping kept.
// Mosaic closes for the last no_aug_epochs epochs; set_epoch() reports the change to listeners.
//
// An image that fails to decode at load time (changed after indexing) is warned about once and
// replaced by the next usable image, with that image's labels (deterministic for any worker count).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/image_cache.hpp>
#include <libreyolo/data/label_cache.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/rng.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace libreyolo::data {

class DetectDataset;

struct DetectAugment {  // Ultralytics-style defaults; the trainer fills them from TrainConfig
  int imgsz = 640;
  bool train = true;
  double mosaic = 1.0, mixup = 0.0, degrees = 0, translate = 0.1, scale = 0.5, shear = 0, perspective = 0,
         fliplr = 0.5, flipud = 0, hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  std::string hsv_mode = "multiply";  // multiply: Ultralytics' gains (fractions); add: YOLOX's offsets (OpenCV units)
  double hsv_prob = 1.0;              // probability of the HSV jitter
  // true: Ultralytics' random perspective after the mosaic/letterbox canvas. false: the original's
  // YOLOv9 pipeline: no affine; the 2S x 2S mosaic is resized to S (boxes kept if both sides > 2 px),
  // a plain letterbox keeps boxes whose sides exceed 1 px; an image alone flips within its rectangle and
  // its padding is not jittered; mixup follows a mosaic only (DetectDataset::build_train_plain).
  bool affine = true;
  bool stretch = false;        // a family pipeline's last resize stretches to a square (train_resize=stretch)
  bool can_stretch = false;    // set by a pipeline that reads `stretch` (the D-FINE line's); else stretch is refused
  bool val_stretch = false;    // validation (train = false) stretches to imgsz x imgsz instead of letterboxing (val_resize)
  // Where a single image's letterbox sits (validation, and training samples without a mosaic): the family's
  // (DetectTask::letterbox_place: top-left for the YOLOv9, YOLOX and RTMDet originals).
  LetterboxPlace letterbox_place = LetterboxPlace::centre;
  // Validation: the square a letterboxed image is resized into (0: the canvas); DetectTask::letterbox_fit (YOLO-NAS: 636 at 640).
  int letterbox_fit = 0;
  int no_aug_epochs = 15;
  int epochs = 300;            // mosaic closes for the last no_aug_epochs epochs
  std::string cache = "off";   // off | ram | disk
  int max_boxes = 0;           // > 0: pad targets to this fixed M (static shapes); 0: the batch's max
  bool multi_scale = false;    // training: a new size per batch, multiples of stride in [0.5, 1.5] * imgsz
  int stride = 32;
  // multi_scale as a family's original draws it (the D-FINE line's collate): one of these sizes per batch,
  // uniformly (a size listed k times has weight k); empty: every multiple of stride in [0.5, 1.5] * imgsz.
  std::vector<int> multi_scale_sizes;
  // multi_scale stops from this (0-based) epoch on: imgsz only (the D-FINE line: int(epochs x ratio)).
  int multi_scale_stop_epoch = std::numeric_limits<int>::max();
  // Mosaic/mixup partners come from within +-mosaic_window/2 positions of the sample in the epoch
  // order (Ultralytics takes them from a buffer of recently loaded images): they are mostly still
  // decoded in the shared buffer, so a mosaic costs about one decode instead of four.
  int mosaic_window = 64;
  // A family's own training pipeline (e.g. the original's YOLOX MosaicMixupDataset, families/yolox/
  // augment.hpp) in place of the one below: (dataset, index, rng, epoch, output size, boxes out, index
  // really used) -> uint8 [3, S, S]. Empty: the built-in pipeline.
  std::function<torch::Tensor(const DetectDataset&, size_t, std::mt19937_64&, int, int, DetBoxes&, size_t&)> pipeline;
};

// A family's own pipeline refuses the generic keys it has no use for, set to anything but 0, rather than
// ignoring them: `keys` among mosaic, mixup, flipud, hsv_prob, perspective; `pipeline` names it in the error.
inline void refuse_unused_augment(const DetectAugment& a, std::initializer_list<std::string_view> keys,
                                  std::string_view pipeline) {
  for (std::string_view k : keys) {
    const double v = k == "mosaic" ? a.mosaic : k == "mixup" ? a.mixup : k == "flipud" ? a.flipud
                   : k == "hsv_prob" ? a.hsv_prob : k == "perspective" ? a.perspective
                   : throw Error("refuse_unused_augment: no key " + std::string(k));
    if (v == 0) continue;
    std::ostringstream o;
    o << k << "=" << v << ": " << pipeline << " has no " << k << "; allowed: 0";
    throw ConfigError(o.str());
  }
}

static_assert(sizeof(DetBox) == 5 * sizeof(float), "DetBox rows are copied into [n, 5] float tensors");

struct DetectSample {
  torch::Tensor image;  // uint8 [3, S, S]
  torch::Tensor boxes;  // float [n, 5]: cls, x1, y1, x2, y2 in pixels of `image`
  std::string path;
  int orig_h = 0, orig_w = 0;
  // Validation only (train = false): original pixel = (pixel - pad) / ratio, per axis (a letterbox's two
  // ratios are equal). Training: 1, 0.
  double ratio_x = 1, ratio_y = 1;
  double pad_x = 0, pad_y = 0;
  int max_boxes = 0;  // copied from DetectAugment so the static collate knows the padding
};

struct DetectBatch {
  torch::Tensor images;                            // uint8 [B, 3, S, S]
  torch::Tensor targets;                           // float [B, M, 5], padding rows: cls = -1, zeros
  std::vector<torch::Tensor> boxes;                // per image [n, 5] (stays on the CPU)
  std::vector<std::string> paths;
  std::vector<std::array<double, 6>> letterbox;    // orig_h, orig_w, ratio_x, ratio_y, pad_x, pad_y

  // The tensors the loader pins and the trainer moves: images and targets.
  template <class F>
  void for_each_tensor(F&& f) {
    f(images);
    f(targets);
  }
  DetectBatch to(const torch::Device& device, bool non_blocking = true) const;
};

// Time spent per stage, summed over all threads, while enabled (the loader benchmark reads it).
struct DetectStageTimes {
  std::atomic<bool> enabled{false};
  std::atomic<int64_t> load_ns{0}, augment_ns{0}, tensor_ns{0}, collate_ns{0}, samples{0};
  void reset();
};
LIBREYOLO_INLINE DetectStageTimes& detect_stage_times();

namespace detail {
struct StageClock {
  std::atomic<int64_t>* sink;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  explicit StageClock(std::atomic<int64_t>& s) : sink(detect_stage_times().enabled ? &s : nullptr) {}
  ~StageClock();
};

LIBREYOLO_INLINE void validate_detect_augment(const DetectAugment& a);

// Indices found undecodable at load time: warned about once, then skipped directly.
struct DetectLoadFailures {
  std::mutex mu;
  std::vector<bool> bad;
};
}  // namespace detail

class DetectDataset {
 public:
  using Sample = DetectSample;
  using Batch = DetectBatch;
  using MosaicListener = std::function<void(bool active, int epoch)>;

  // One split of a dataset YAML ("train", "val" or "test").
  static std::shared_ptr<DetectDataset> open(const DatasetYaml& yaml, const std::string& split, DetectAugment aug);

  // A split given as an explicit image list; cache_file empty = no label cache.
  static std::shared_ptr<DetectDataset> open_images(const std::vector<std::filesystem::path>& images,
                                                    std::vector<std::string> names, DetectAugment aug,
                                                    const std::filesystem::path& cache_file,
                                                    const std::string& split = "split");

  size_t size() const { return index_.entries.size(); }
  const std::vector<std::string>& names() const { return names_; }
  const DetectAugment& augment() const { return aug_; }
  const LabelIndex& index() const { return index_; }
  const ImageCache& cache() const { return *cache_; }

  // Whether mosaic is used in `epoch` (train, mosaic > 0, not in the last no_aug_epochs).
  bool mosaic_on(int epoch) const { return aug_.train && aug_.mosaic > 0 && epoch < aug_.epochs - aug_.no_aug_epochs; }
  bool mosaic_active() const { return mosaic_active_; }

  // Called by the Loader before each epoch; listeners hear when mosaic opens or closes (also on the
  // first call when a resumed run starts past the closing epoch).
  void set_epoch(int epoch);
  void on_mosaic_change(MosaicListener f) { listeners_.push_back(std::move(f)); }

  // Image size of batch b: imgsz, or with multi_scale (training, before multi_scale_stop_epoch) a multiple
  // of the stride in [0.5, 1.5] * imgsz (or one of multi_scale_sizes) drawn from (seed, epoch, b) alone.
  // The Loader calls it for every batch.
  int imgsz_for_batch(uint64_t seed, int epoch, size_t b) const;

  Sample get(size_t i, std::mt19937_64& rng, int epoch) const { return get(i, rng, epoch, aug_.imgsz); }

  Sample get(size_t i, std::mt19937_64& rng, int epoch, int out_size) const;

  // Called by the Loader at each epoch start (no worker running): the epoch's order, so mosaic
  // partners can be drawn near each sample, and the decode buffer sized for the workers in flight.
  // `order`: the whole epoch's order, a permutation of 0 .. size() - 1 (before any sharding over ranks).
  void set_epoch_order(int epoch, const std::vector<size_t>& order, const LoaderOptions& opt);
  const DecodeBuffer& decode_buffer() const { return *buffer_; }

  // A mosaic or mixup partner of i: near it in the epoch order when the Loader gave one, else any.
  size_t partner(size_t i, int epoch, std::mt19937_64& rng) const;

  // Stacks the images; targets are padded to M rows (max_boxes, or the batch's largest count, >= 1)
  // with cls = -1. With a fixed max_boxes, an image with more boxes keeps its M largest in `targets`
  // (all of them stay in `boxes`), with a warning.
  static Batch collate(std::vector<Sample>&& samples);

  // The decoded image i resized to long side imgsz (cached when cache = ram | disk); *used receives
  // the index really loaded (i, or its substitute when i cannot be decoded any more).
  std::shared_ptr<const Image> load(size_t i, size_t* used = nullptr) const;

  // Image i as a tile of the training canvas: the image resized to long side imgsz (the cached image, or
  // with cache = off decoded through the shared decode buffer). unresized = true (the D-FINE line, whose
  // originals resize once, at the end of their pipeline): with cache = off the decoded image itself
  // (DCT-scaled only where the file is at least twice imgsz); with a cache the cached, resized image.
  struct Tile {
    std::shared_ptr<const Image> img;
    int w = 0, h = 0;  // its size once resized to long side imgsz (canvas pixels; img may be larger)
    size_t index = 0;  // the entry really loaded
  };
  Tile load_tile(size_t i, bool unresized = false) const;

  // Labels of entry i in pixels of its image shown w x h, clipped to it (clip = false: as the label says, a box
  // overhanging the image kept overhanging, as the D-FINE line's originals load it).
  DetBoxes pixel_boxes(size_t i, int w, int h, bool clip = true) const;

 private:
  DetectDataset() = default;

  // Size once resized so the long side is imgsz: (min(ceil(w0 r), S), min(ceil(h0 r), S)),
  // r = S / max(h0, w0), as Ultralytics' load_image.
  std::pair<int, int> resized_size(const LabelEntry& e) const;

  // Decodes with DCT scaling where the file is at least twice imgsz, then resizes (bilinear) unless
  // resize = false.
  Image decode_resized(const LabelEntry& e, bool resize = true) const;

  // fetch(j) for i, or for the next index when i fails to decode (warned once, then skipped).
  template <class Fetch>
  std::shared_ptr<const Image> with_substitute(size_t i, size_t* used, Fetch&& fetch) const {
    const size_t n = size();
    for (size_t k = 0; k < n; ++k) {
      const size_t j = (i + k) % n;
      {
        std::lock_guard<std::mutex> lk(failures_->mu);
        if (failures_->bad[j]) continue;
      }
      try {
        auto img = fetch(j);
        if (used) *used = j;
        return img;
      } catch (const DataError& e) {
        std::lock_guard<std::mutex> lk(failures_->mu);
        if (!failures_->bad[j]) log::warn(e.what(), " (using the next image of the split instead)");
        failures_->bad[j] = true;
      }
    }
    throw DataError("no image of this split can be decoded any more (see the warnings above)");
  }

  // The canvas of a training sample, in imgsz units, not rendered: a 4-image mosaic on 2S x 2S
  // (when open and drawn) or the image letterboxed on S x S. Boxes are clipped to the canvas.
  struct Canvas {
    int h = 0, w = 0;
    std::vector<WarpTile> tiles;
    std::vector<std::shared_ptr<const Image>> hold;  // keeps the tiles' pixels alive
    DetBoxes boxes;
    size_t primary = 0;
    bool mosaic = false;
    // The image's rectangle on the canvas (a mosaic: the whole canvas); the letterbox padding lies outside it.
    int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  };
  Canvas make_canvas(size_t i, std::mt19937_64& rng, int epoch) const;
  Canvas single_canvas(size_t i) const;  // image i alone, letterboxed at the family's letterbox_place
  void place(Canvas& c, const Tile& t, int x, int y) const;  // tile t at canvas (x, y), its boxes moved and clipped

  // affine = true: canvas -> random perspective (+ mixup) -> flips -> HSV, rendered in one warp per canvas.
  // affine = false: build_train_plain.
  torch::Tensor build_train(size_t i, std::mt19937_64& rng, int epoch, int out, DetBoxes& boxes, size_t& used) const;
  // affine = false, the original's YOLOv9 pipeline (YOLO9MosaicMixupDataset + YOLO9TrainTransform, which
  // YOLOv7 and RT-DETR v1/v2 train through too): the canvas resized to out; HSV and flips as its transform
  // applies them before the letterbox (the image flips within its own rectangle, and the padding keeps the
  // fill colour); mixup only after a mosaic that kept a box, its partner an image alone with its own HSV
  // and flips, blended Beta(32, 32).
  torch::Tensor build_train_plain(size_t i, std::mt19937_64& rng, int epoch, int out, DetBoxes& boxes, size_t& used) const;
  // build_train_plain's one canvas rendered at out x out: boxes scaled and kept over 1 px (a mosaic: 2 px),
  // flips about the image's rectangle, HSV over the image only; a canvas left without a box is rendered
  // bare (no flip, no HSV; an image alone keeps its boxes under the size filter), as the original's transform.
  torch::Tensor render_plain(const Canvas& c, std::mt19937_64& rng, int out, DetBoxes& boxes) const;

  void init_cache(const std::string& split);

  DetectAugment aug_;
  AffineParams affine_;
  std::vector<std::string> names_;
  LabelIndex index_;
  std::shared_ptr<ImageCache> cache_;
  std::shared_ptr<detail::DetectLoadFailures> failures_;
  std::shared_ptr<DecodeBuffer> buffer_;
  std::vector<MosaicListener> listeners_;
  bool mosaic_active_ = false;
  std::vector<size_t> order_, pos_of_;  // the Loader's epoch order and each index's position in it
  int order_epoch_ = std::numeric_limits<int>::min();
};

// cuda_graph=step: targets [B, M, 5] padded with rows of class -1 to the smallest power of two >= M,
// so that one step graph serves every batch whose largest box count falls into the same bucket (the
// loss masks padding rows, so the padded targets give the same assignment and loss).
LIBREYOLO_INLINE torch::Tensor pad_targets_to_bucket(const torch::Tensor& targets);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/detect-inl.hpp>
#endif
