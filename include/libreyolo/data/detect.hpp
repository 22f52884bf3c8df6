#pragma once
// Detection dataset (YOLO format) for the threaded Loader: labels from the cached label index
// (label_cache.hpp), images decoded with DCT scaling and resized to long side imgsz (optionally
// cached: image_cache.hpp), then the training pipeline of Ultralytics:
//   mosaic (p = mosaic, while open) or letterbox -> random perspective -> mixup (p = mixup)
//   -> HSV -> flip up-down (p = flipud) -> flip left-right (p = fliplr);
// or, for validation (train = false), a plain letterbox to imgsz x imgsz with the mapping kept.
// Mosaic closes for the last no_aug_epochs epochs; set_epoch() reports the change to listeners.
//
// An image that fails to decode at load time (changed after indexing) is warned about once and
// replaced by the next usable image, with that image's labels (deterministic for any worker count).
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
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
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
  // a plain letterbox keeps boxes whose sides exceed 1 px.
  bool affine = true;
  int no_aug_epochs = 15;
  int epochs = 300;            // mosaic closes for the last no_aug_epochs epochs
  std::string cache = "off";   // off | ram | disk
  int max_boxes = 0;           // > 0: pad targets to this fixed M (static shapes); 0: the batch's max
  bool multi_scale = false;    // training: a new size per batch, multiples of stride in [0.5, 1.5] * imgsz
  int stride = 32;
  // Mosaic/mixup partners come from within +-mosaic_window/2 positions of the sample in the epoch
  // order (Ultralytics takes them from a buffer of recently loaded images): they are mostly still
  // decoded in the shared buffer, so a mosaic costs about one decode instead of four.
  int mosaic_window = 64;
  // A family's own training pipeline (e.g. the original's YOLOX MosaicMixupDataset, families/yolox/
  // augment.hpp) in place of the one below: (dataset, index, rng, epoch, output size, boxes out, index
  // really used) -> uint8 [3, S, S]. Empty: the built-in pipeline.
  std::function<torch::Tensor(const DetectDataset&, size_t, std::mt19937_64&, int, int, DetBoxes&, size_t&)> pipeline;
};

static_assert(sizeof(DetBox) == 5 * sizeof(float), "DetBox rows are copied into [n, 5] float tensors");

struct DetectSample {
  torch::Tensor image;  // uint8 [3, S, S]
  torch::Tensor boxes;  // float [n, 5]: cls, x1, y1, x2, y2 in pixels of `image`
  std::string path;
  int orig_h = 0, orig_w = 0;
  // Validation only (train = false): original pixel = (pixel - pad) / ratio. Training: 1, 0, 0.
  double ratio = 1;
  double pad_x = 0, pad_y = 0;
  int max_boxes = 0;  // copied from DetectAugment so the static collate knows the padding
};

struct DetectBatch {
  torch::Tensor images;                            // uint8 [B, 3, S, S]
  torch::Tensor targets;                           // float [B, M, 5], padding rows: cls = -1, zeros
  std::vector<torch::Tensor> boxes;                // per image [n, 5] (stays on the CPU)
  std::vector<std::string> paths;
  std::vector<std::array<double, 5>> letterbox;    // orig_h, orig_w, ratio, pad_x, pad_y

  // The tensors the loader pins and the trainer moves: images and targets.
  template <class F>
  void for_each_tensor(F&& f) {
    f(images);
    f(targets);
  }
  DetectBatch to(const torch::Device& device, bool non_blocking = true) const {
    DetectBatch b = *this;
    b.images = images.to(device, non_blocking);
    b.targets = targets.to(device, non_blocking);
    return b;
  }
};

// Time spent per stage, summed over all threads, while enabled (the loader benchmark reads it).
struct DetectStageTimes {
  std::atomic<bool> enabled{false};
  std::atomic<int64_t> load_ns{0}, augment_ns{0}, tensor_ns{0}, collate_ns{0}, samples{0};
  void reset() {
    load_ns = augment_ns = tensor_ns = collate_ns = samples = 0;
  }
};
inline DetectStageTimes& detect_stage_times() {
  static DetectStageTimes t;
  return t;
}

namespace detail {
struct StageClock {
  std::atomic<int64_t>* sink;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  explicit StageClock(std::atomic<int64_t>& s) : sink(detect_stage_times().enabled ? &s : nullptr) {}
  ~StageClock() {
    if (sink) *sink += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  }
};

inline void validate_detect_augment(const DetectAugment& a) {
  auto bad = [](const std::string& key, double v, const char* allowed) {
    throw ConfigError("detection augment " + key + " = " + log::cat(v) + " is outside " + allowed);
  };
  if (a.stride < 1) bad("stride", a.stride, "[1, inf)");
  if (a.imgsz < a.stride || a.imgsz % a.stride != 0) bad("imgsz", a.imgsz, "the positive multiples of the stride (32)");
  const std::pair<const char*, double> probs[] = {{"mosaic", a.mosaic}, {"mixup", a.mixup}, {"fliplr", a.fliplr},
                                                  {"flipud", a.flipud}, {"translate", a.translate},
                                                  {"hsv_prob", a.hsv_prob}};
  for (const auto& [k, v] : probs)
    if (!(v >= 0 && v <= 1)) bad(k, v, "[0, 1]");
  if (a.hsv_mode != "multiply" && a.hsv_mode != "add")
    throw ConfigError("detection augment hsv_mode = " + a.hsv_mode + " is not one of: multiply, add");
  const bool add = a.hsv_mode == "add";
  const std::pair<const char*, double> hsv[] = {{"hsv_h", a.hsv_h}, {"hsv_s", a.hsv_s}, {"hsv_v", a.hsv_v}};
  for (size_t k = 0; k < 3; ++k) {
    const double hi = add ? (k == 0 ? 180 : 255) : 1;
    if (!(hsv[k].second >= 0 && hsv[k].second <= hi))
      bad(hsv[k].first, hsv[k].second, add ? (k == 0 ? "[0, 180] (hsv_mode=add)" : "[0, 255] (hsv_mode=add)")
                                           : "[0, 1] (hsv_mode=multiply)");
  }
  if (!(a.scale >= 0 && a.scale < 1)) bad("scale", a.scale, "[0, 1)");
  if (!(a.degrees >= 0 && a.degrees <= 180)) bad("degrees", a.degrees, "[0, 180]");
  if (!(a.shear >= 0 && a.shear < 90)) bad("shear", a.shear, "[0, 90)");
  if (!(a.perspective >= 0 && a.perspective <= 0.01)) bad("perspective", a.perspective, "[0, 0.01]");
  if (a.no_aug_epochs < 0) bad("no_aug_epochs", a.no_aug_epochs, "[0, inf)");
  if (a.epochs < 1) bad("epochs", a.epochs, "[1, inf)");
  if (a.max_boxes < 0) bad("max_boxes", a.max_boxes, "[0, inf) (0 = the batch's largest count)");
  if (a.mosaic_window < 2) bad("mosaic_window", a.mosaic_window, "[2, inf)");
  parse_cache_mode(a.cache);
}

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
  static std::shared_ptr<DetectDataset> open(const DatasetYaml& yaml, const std::string& split, DetectAugment aug) {
    const auto& sources = yaml.split(split);
    if (sources.empty())
      throw DataError("dataset YAML '" + yaml.file.string() + "' has no '" + split + "' split");
    const auto images = split_image_files(sources);
    if (images.empty())
      throw DataError("split '" + split + "' of dataset YAML '" + yaml.file.string() +
                      "' lists no images (.jpg, .jpeg, .png) in its folders or list files");
    return open_images(images, yaml.names, aug, label_cache_path(sources, images), split);
  }

  // A split given as an explicit image list; cache_file empty = no label cache.
  static std::shared_ptr<DetectDataset> open_images(const std::vector<std::filesystem::path>& images,
                                                    std::vector<std::string> names, DetectAugment aug,
                                                    const std::filesystem::path& cache_file,
                                                    const std::string& split = "split") {
    detail::validate_detect_augment(aug);
    if (names.empty()) throw ConfigError("detection dataset: no class names");
    auto ds = std::shared_ptr<DetectDataset>(new DetectDataset());
    ds->aug_ = aug;
    ds->names_ = std::move(names);
    ds->index_ = build_label_index(images, static_cast<int>(ds->names_.size()), cache_file);
    log_label_summary(split, ds->index_);
    require_class_ids_in_range(ds->index_, split);
    if (ds->index_.entries.empty())
      throw DataError("split '" + split + "' has no usable image: all " + std::to_string(images.size()) +
                      " were skipped (see the warnings above)");
    ds->affine_ = {aug.degrees, aug.translate, aug.scale, aug.shear, aug.perspective};
    ds->failures_ = std::make_shared<detail::DetectLoadFailures>();
    ds->failures_->bad.assign(ds->index_.entries.size(), false);
    ds->mosaic_active_ = ds->mosaic_on(0);
    ds->init_cache(split);
    return ds;
  }

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
  void set_epoch(int epoch) {
    const bool now = mosaic_on(epoch);
    if (now != mosaic_active_) {
      log::info(now ? "mosaic on from epoch " : "mosaic closed from epoch ", epoch + 1);
      mosaic_active_ = now;
      for (auto& f : listeners_) f(now, epoch);
    }
  }
  void on_mosaic_change(MosaicListener f) { listeners_.push_back(std::move(f)); }

  // Image size of batch b: imgsz, or with multi_scale (training) a multiple of the stride in
  // [0.5, 1.5] * imgsz drawn from (seed, epoch, b) alone. The Loader calls it for every batch.
  int imgsz_for_batch(uint64_t seed, int epoch, size_t b) const {
    if (!aug_.multi_scale || !aug_.train) return aug_.imgsz;
    const int st = aug_.stride;
    const int lo = std::max(1, (aug_.imgsz / 2 + st - 1) / st), hi = aug_.imgsz * 3 / 2 / st;
    std::mt19937_64 rng(sample_seed(seed ^ 0x4D554C5449ull, epoch, b));
    return static_cast<int>(randint(rng, lo, hi)) * st;
  }

  Sample get(size_t i, std::mt19937_64& rng, int epoch) const { return get(i, rng, epoch, aug_.imgsz); }

  Sample get(size_t i, std::mt19937_64& rng, int epoch, int out_size) const {
    Sample s;
    DetBoxes boxes;
    size_t used = i;
    if (aug_.train) {
      s.image = build_train(i, rng, epoch, out_size, boxes, used);
    } else {
      auto loaded = load(i, &used);
      boxes = pixel_boxes(used, loaded->w, loaded->h);
      detail::StageClock clock(detect_stage_times().augment_ns);
      LetterboxInfo lb;
      const Image img = letterbox(*loaded, out_size, out_size, boxes, &lb);
      s.ratio = static_cast<double>(loaded->w) * lb.scale_x / index_.entries[used].w;
      s.pad_x = lb.pad_x, s.pad_y = lb.pad_y;
      s.image = to_chw_tensor(img);
    }
    detail::StageClock clock(detect_stage_times().tensor_ns);
    const auto& e = index_.entries[used];
    s.path = e.image, s.orig_h = e.h, s.orig_w = e.w;
    s.boxes = torch::empty({static_cast<int64_t>(boxes.size()), 5}, torch::kFloat32);
    std::memcpy(s.boxes.data_ptr<float>(), boxes.data(), boxes.size() * sizeof(DetBox));
    s.max_boxes = aug_.max_boxes;
    if (detect_stage_times().enabled) ++detect_stage_times().samples;
    return s;
  }

  // Called by the Loader at each epoch start (no worker running): the epoch's order, so mosaic
  // partners can be drawn near each sample, and the decode buffer sized for the workers in flight.
  // `order`: the whole epoch's order, a permutation of 0 .. size() - 1 (before any sharding over ranks).
  void set_epoch_order(int epoch, const std::vector<size_t>& order, const LoaderOptions& opt) {
    if (order.size() != size())
      throw Error("DetectDataset::set_epoch_order: an order of " + std::to_string(order.size()) + " positions for " +
                  std::to_string(size()) + " images; it takes the whole epoch's order, before sharding over ranks");
    pos_of_.assign(order.size(), 0);
    for (size_t p = 0; p < order.size(); ++p) {
      if (order[p] >= order.size())
        throw Error("DetectDataset::set_epoch_order: position " + std::to_string(p) + " holds image " +
                    std::to_string(order[p]) + ", outside 0 .. " + std::to_string(order.size() - 1));
      pos_of_[order[p]] = p;
    }
    order_ = order;
    order_epoch_ = epoch;
    const size_t in_flight = static_cast<size_t>(std::max(1, opt.workers)) * opt.prefetch + 2;
    buffer_->set_capacity(in_flight * static_cast<size_t>(opt.batch) + static_cast<size_t>(aug_.mosaic_window));
  }
  const DecodeBuffer& decode_buffer() const { return *buffer_; }

  // A mosaic or mixup partner of i: near it in the epoch order when the Loader gave one, else any.
  size_t partner(size_t i, int epoch, std::mt19937_64& rng) const {
    const int64_t n = static_cast<int64_t>(size());
    if (order_epoch_ != epoch || pos_of_.size() != static_cast<size_t>(n)) return static_cast<size_t>(randint(rng, 0, n - 1));
    const int64_t half = aug_.mosaic_window / 2;
    int64_t d = randint(rng, -half, half - 1);
    d += d >= 0;  // in [-half, half] without 0
    return order_[static_cast<size_t>(((static_cast<int64_t>(pos_of_[i]) + d) % n + n) % n)];
  }

  static Batch collate(std::vector<Sample>&& samples);

  // The decoded image i resized to long side imgsz (cached when cache = ram | disk); *used receives
  // the index really loaded (i, or its substitute when i cannot be decoded any more).
  std::shared_ptr<const Image> load(size_t i, size_t* used = nullptr) const {
    detail::StageClock clock(detect_stage_times().load_ns);
    return with_substitute(i, used, [&](size_t j) {
      return cache_->get(j, index_.entries[j].image, [&] { return decode_resized(index_.entries[j]); });
    });
  }

  // Image i as a tile of the training canvas: with cache = off, decoded (DCT-scaled when it is at
  // least twice imgsz) but not resized, through the shared decode buffer; else the cached image.
  struct Tile {
    std::shared_ptr<const Image> img;
    int w = 0, h = 0;  // its size once resized to long side imgsz (canvas pixels)
    size_t index = 0;  // the entry really loaded
  };
  Tile load_tile(size_t i) const {
    Tile t;
    if (cache_->mode() != CacheMode::off) {
      t.img = load(i, &t.index);
    } else {
      detail::StageClock clock(detect_stage_times().load_ns);
      t.img = with_substitute(i, &t.index, [&](size_t j) {
        return buffer_->get(j, [&] {
          const auto& e = index_.entries[j];
          const auto [w, h] = resized_size(e);
          return read_image(e.image, std::max(e.h, e.w) > aug_.imgsz ? std::min(h, w) : 0);
        });
      });
    }
    std::tie(t.w, t.h) = resized_size(index_.entries[t.index]);
    return t;
  }

  // Labels of entry i in pixels of its image shown w x h, clipped to it.
  DetBoxes pixel_boxes(size_t i, int w, int h) const {
    DetBoxes out;
    const float W = static_cast<float>(w), H = static_cast<float>(h);
    for (const auto& b : index_.entries[i].boxes) {
      DetBox d{b[0], std::clamp((b[1] - b[3] / 2) * W, 0.f, W), std::clamp((b[2] - b[4] / 2) * H, 0.f, H),
               std::clamp((b[1] + b[3] / 2) * W, 0.f, W), std::clamp((b[2] + b[4] / 2) * H, 0.f, H)};
      if (d.x2 > d.x1 && d.y2 > d.y1) out.push_back(d);
    }
    return out;
  }

 private:
  DetectDataset() = default;

  // Size once resized so the long side is imgsz: (min(ceil(w0 r), S), min(ceil(h0 r), S)),
  // r = S / max(h0, w0), as Ultralytics' load_image.
  std::pair<int, int> resized_size(const LabelEntry& e) const {
    const int S = aug_.imgsz;
    const double r = static_cast<double>(S) / std::max(e.h, e.w);
    return {std::min(static_cast<int>(std::ceil(e.w * r - 1e-9)), S), std::min(static_cast<int>(std::ceil(e.h * r - 1e-9)), S)};
  }

  // Decodes with DCT scaling where the file is at least twice imgsz, then resizes (bilinear).
  Image decode_resized(const LabelEntry& e) const {
    const auto [w, h] = resized_size(e);
    Image img = read_image(e.image, std::max(e.h, e.w) > aug_.imgsz ? std::min(h, w) : 0);
    if (img.h == h && img.w == w) return img;
    return resize_bilinear(img, h, w);
  }

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
  };
  Canvas make_canvas(size_t i, std::mt19937_64& rng, int epoch) const {
    const int S = aug_.imgsz;
    Canvas c;
    auto place = [&](const Tile& t, int x, int y) {
      WarpTile w;
      w.img = t.img.get();
      w.ox = static_cast<float>(x), w.oy = static_cast<float>(y);
      w.sx = static_cast<float>(t.img->w) / t.w, w.sy = static_cast<float>(t.img->h) / t.h;
      w.rx0 = static_cast<float>(std::max(x, 0)), w.ry0 = static_cast<float>(std::max(y, 0));
      w.rx1 = static_cast<float>(std::min(x + t.w, c.w)), w.ry1 = static_cast<float>(std::min(y + t.h, c.h));
      if (w.rx1 > w.rx0 && w.ry1 > w.ry0) c.tiles.push_back(w);
      c.hold.push_back(t.img);
      for (auto b : pixel_boxes(t.index, t.w, t.h)) {
        b.x1 = std::clamp(b.x1 + x, 0.f, float(c.w)), b.x2 = std::clamp(b.x2 + x, 0.f, float(c.w));
        b.y1 = std::clamp(b.y1 + y, 0.f, float(c.h)), b.y2 = std::clamp(b.y2 + y, 0.f, float(c.h));
        if (b.x2 > b.x1 && b.y2 > b.y1) c.boxes.push_back(b);
      }
    };
    if (mosaic_on(epoch) && bernoulli(rng, aug_.mosaic)) {
      const std::array<size_t, 4> idx{i, partner(i, epoch, rng), partner(i, epoch, rng), partner(i, epoch, rng)};
      std::array<Tile, 4> t;
      for (int k = 0; k < 4; ++k) t[k] = load_tile(idx[k]);
      c.h = c.w = 2 * S;
      // Ultralytics' mosaic4: tile 0 ends at the centre from the top-left, 1 top-right, 2 bottom-left, 3 bottom-right.
      const int xc = static_cast<int>(uniform(rng, S / 2.0, 1.5 * S)), yc = static_cast<int>(uniform(rng, S / 2.0, 1.5 * S));
      for (int k = 0; k < 4; ++k) place(t[k], (k == 0 || k == 2) ? xc - t[k].w : xc, k < 2 ? yc - t[k].h : yc);
      c.primary = t[0].index;
    } else {
      const Tile t = load_tile(i);
      c.h = c.w = S;
      place(t, (S - t.w) / 2, (S - t.h) / 2);
      c.primary = t.index;
    }
    return c;
  }

  // Canvas -> random perspective (+ mixup) -> flips -> HSV, rendered in one warp per canvas.
  torch::Tensor build_train(size_t i, std::mt19937_64& rng, int epoch, int out, DetBoxes& boxes, size_t& used) const {
    if (aug_.pipeline) return aug_.pipeline(*this, i, rng, epoch, out, boxes, used);
    const Canvas c = make_canvas(i, rng, epoch);
    used = c.primary;
    Canvas c2;
    const bool mix = aug_.mixup > 0 && bernoulli(rng, aug_.mixup);
    if (mix) c2 = make_canvas(partner(i, epoch, rng), rng, epoch);
    detail::StageClock clock(detect_stage_times().augment_ns);
    const double extra = static_cast<double>(out) / aug_.imgsz;  // multi-scale: the canvas shrinks or grows
    double sc = 1;
    // One canvas -> output transform and its boxes: a random affine, or (affine = false) a plain resize.
    auto transform = [&](const Canvas& cv, Mat3& M, DetBoxes& out_boxes) {
      if (aug_.affine) {
        M = random_affine_matrix(cv.h, cv.w, out, out, affine_, extra, rng, &sc);
        out_boxes = warp_boxes(cv.boxes, M, out, out, sc);
        return;
      }
      const double k = static_cast<double>(out) / cv.w;
      M = kIdentity3;
      M[0] = k, M[4] = static_cast<double>(out) / cv.h;
      const float min_side = cv.w > aug_.imgsz ? 2.f : 1.f;  // mosaic canvases: > 2 px, as the original
      out_boxes.clear();
      for (const auto& b : cv.boxes) {
        DetBox m{b.cls, static_cast<float>(b.x1 * M[0]), static_cast<float>(b.y1 * M[4]),
                 static_cast<float>(b.x2 * M[0]), static_cast<float>(b.y2 * M[4])};
        if (m.x2 - m.x1 > min_side && m.y2 - m.y1 > min_side) out_boxes.push_back(m);
      }
    };
    Mat3 M;
    transform(c, M, boxes);
    Mat3 M2 = kIdentity3;
    double r = 1;
    if (mix) {
      DetBoxes b2;
      transform(c2, M2, b2);
      boxes.insert(boxes.end(), b2.begin(), b2.end());
      r = beta_draw(32.0, 32.0, rng);
    }
    // Flips are folded into the warp (a mirror of the output is a mirror of its transform).
    Mat3 F = kIdentity3;
    if (bernoulli(rng, aug_.flipud)) F[4] = -1, F[5] = out, flip_boxes_ud(boxes, out);
    if (bernoulli(rng, aug_.fliplr)) F[0] = -1, F[2] = out, flip_boxes_lr(boxes, out);
    Image img = warp_tiles(c.tiles, mat_mul(F, M), out, out);
    if (mix) blend_into(img, warp_tiles(c2.tiles, mat_mul(F, M2), out, out), r);
    if (aug_.hsv_prob < 1 && !bernoulli(rng, aug_.hsv_prob)) return to_chw_tensor(img);
    if (aug_.hsv_mode == "add") return hsv_add_chw(img, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
    return hsv_augment_chw(img, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
  }

  void init_cache(const std::string& split) {
    CacheMode mode = parse_cache_mode(aug_.cache);
    if (mode == CacheMode::ram) {
      uint64_t bytes = 0;
      for (const auto& e : index_.entries) {
        const double r = static_cast<double>(aug_.imgsz) / std::max(e.h, e.w);
        bytes += static_cast<uint64_t>(std::ceil(e.h * r)) * static_cast<uint64_t>(std::ceil(e.w * r)) * 3;
      }
      const uint64_t avail = available_memory_bytes();
      if (avail > 0 && bytes > avail / 10 * 7) {
        log::warn(split, ": cache=ram needs ", bytes >> 20, " MiB but only ", avail >> 20,
                  " MiB are available; not caching (use cache=disk)");
        mode = CacheMode::off;
      } else {
        log::info(split, ": cache=ram will hold ", bytes >> 20, " MiB of decoded images");
      }
    }
    cache_ = std::make_shared<ImageCache>(mode, size(), aug_.imgsz);
    buffer_ = std::make_shared<DecodeBuffer>(64);
  }

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
inline torch::Tensor pad_targets_to_bucket(const torch::Tensor& targets) {
  const int64_t m = targets.size(1);
  int64_t rows = 1;
  while (rows < m) rows <<= 1;
  if (rows == m) return targets;
  auto pad = torch::zeros({targets.size(0), rows - m, targets.size(2)}, targets.options());
  pad.select(2, 0).fill_(-1);
  return torch::cat({targets, pad}, 1);
}

// Stacks the images; targets are padded to M rows (max_boxes, or the batch's largest count, >= 1)
// with cls = -1. With a fixed max_boxes, an image with more boxes keeps its M largest in `targets`
// (all of them stay in `boxes`), with a warning.
inline DetectBatch DetectDataset::collate(std::vector<DetectSample>&& samples) {
  if (samples.empty()) throw Error("DetectDataset::collate: empty batch");
  detail::StageClock clock(detect_stage_times().collate_ns);
  DetectBatch b;
  const int64_t B = static_cast<int64_t>(samples.size());
  const auto& first = samples.front().image;
  for (const auto& s : samples)
    if (!s.image.sizes().equals(first.sizes()))
      throw Error("DetectDataset::collate: image '" + s.path + "' has a different size than '" + samples.front().path + "'");
  b.images = torch::empty({B, first.size(0), first.size(1), first.size(2)}, torch::kUInt8);
  int64_t most = 1;
  for (const auto& s : samples) most = std::max(most, s.boxes.size(0));
  const int64_t M = samples.front().max_boxes > 0 ? samples.front().max_boxes : most;
  b.targets = torch::zeros({B, M, 5}, torch::kFloat32);
  float* t = b.targets.data_ptr<float>();
  for (int64_t k = 0; k < B; ++k) {
    auto& s = samples[k];
    b.images[k].copy_(s.image);
    torch::Tensor rows = s.boxes;
    if (rows.size(0) > M) {
      log::notice_once("detect_collate_truncate:" + std::to_string(M),
                       "max_boxes = " + std::to_string(M) + ": image '" + s.path + "' has " + std::to_string(rows.size(0)) +
                           " boxes; the padded targets keep the largest " + std::to_string(M) +
                           " (raise max_boxes to keep all; warned once)",
                       log::Level::warn);
      const auto area = (rows.select(1, 3) - rows.select(1, 1)) * (rows.select(1, 4) - rows.select(1, 2));
      rows = rows.index_select(0, std::get<0>(std::get<1>(area.topk(M)).sort()));
    }
    for (int64_t m = 0; m < M; ++m) t[(k * M + m) * 5] = -1.f;
    if (rows.size(0) > 0) std::memcpy(t + k * M * 5, rows.contiguous().data_ptr<float>(), rows.numel() * sizeof(float));
    b.boxes.push_back(std::move(s.boxes));
    b.paths.push_back(std::move(s.path));
    b.letterbox.push_back({double(s.orig_h), double(s.orig_w), s.ratio, s.pad_x, s.pad_y});
  }
  return b;
}

}  // namespace libreyolo::data
