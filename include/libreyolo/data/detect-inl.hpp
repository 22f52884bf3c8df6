#pragma once
// Definitions of detect.hpp (core/api.hpp): included by detect.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/label_cache-inl.hpp>  // detail::require_label_files, refuse_other_task_yaml

namespace libreyolo::data {

LIBREYOLO_INLINE DetectBatch DetectBatch::to(const torch::Device& device, bool non_blocking) const {
  DetectBatch b = *this;
  b.images = images.to(device, non_blocking);
  b.targets = targets.to(device, non_blocking);
  return b;
}

LIBREYOLO_INLINE void DetectStageTimes::reset() {
  load_ns = augment_ns = tensor_ns = collate_ns = samples = 0;
}

LIBREYOLO_INLINE DetectStageTimes& detect_stage_times() {
  static DetectStageTimes t;
  return t;
}

namespace detail {

LIBREYOLO_INLINE StageClock::~StageClock() {
  if (sink) *sink += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

LIBREYOLO_INLINE void validate_detect_augment(const DetectAugment& a) {
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

}  // namespace detail

LIBREYOLO_INLINE std::shared_ptr<DetectDataset> DetectDataset::open(const DatasetYaml& yaml, const std::string& split, DetectAugment aug) {
  const auto& sources = yaml.split(split);
  if (sources.empty())
    throw DataError("dataset YAML '" + yaml.file.string() + "' has no '" + split + "' split");
  const auto images = split_image_files(sources);
  if (images.empty())
    throw DataError("split '" + split + "' of dataset YAML '" + yaml.file.string() +
                    "' lists no images (.jpg, .jpeg, .png) in its folders or list files");
  detail::refuse_other_task_yaml(yaml, "detection");
  detail::require_label_files(images, split, yaml.file, "detection");
  return open_images(images, yaml.names, aug, label_cache_path(sources, images), split);
}

LIBREYOLO_INLINE std::shared_ptr<DetectDataset> DetectDataset::open_images(const std::vector<std::filesystem::path>& images,
                                                                           std::vector<std::string> names, DetectAugment aug,
                                                                           const std::filesystem::path& cache_file,
                                                                           const std::string& split) {
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

LIBREYOLO_INLINE void DetectDataset::set_epoch(int epoch) {
  const bool now = mosaic_on(epoch);
  if (now != mosaic_active_) {
    log::info(now ? "mosaic on from epoch " : "mosaic closed from epoch ", epoch + 1);
    mosaic_active_ = now;
    for (auto& f : listeners_) f(now, epoch);
  }
}

LIBREYOLO_INLINE int DetectDataset::imgsz_for_batch(uint64_t seed, int epoch, size_t b) const {
  if (!aug_.multi_scale || !aug_.train || epoch >= aug_.multi_scale_stop_epoch) return aug_.imgsz;
  std::mt19937_64 rng(sample_seed(seed ^ 0x4D554C5449ull, epoch, b));
  if (!aug_.multi_scale_sizes.empty())
    return aug_.multi_scale_sizes[static_cast<size_t>(randint(rng, 0, static_cast<int64_t>(aug_.multi_scale_sizes.size()) - 1))];
  const int st = aug_.stride;
  const int lo = std::max(1, (aug_.imgsz / 2 + st - 1) / st), hi = aug_.imgsz * 3 / 2 / st;
  return static_cast<int>(randint(rng, lo, hi)) * st;
}

LIBREYOLO_INLINE DetectDataset::Sample DetectDataset::get(size_t i, std::mt19937_64& rng, int epoch, int out_size) const {
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
    const Image img = aug_.val_stretch ? stretch_resize(*loaded, out_size, out_size, boxes, &lb)
                                       : letterbox(*loaded, out_size, out_size, boxes, &lb, /*scaleup=*/true, aug_.letterbox_place,
                                                   out_size == aug_.imgsz ? aug_.letterbox_fit : 0);
    // The loaded image may be a cached, smaller copy: the ratios are to the file's own size. A letterbox
    // scales both axes by one ratio (its per-axis scales differ only by the rounding of the resized size).
    s.ratio_x = static_cast<double>(loaded->w) * lb.scale_x / index_.entries[used].w;
    s.ratio_y = aug_.val_stretch ? static_cast<double>(loaded->h) * lb.scale_y / index_.entries[used].h : s.ratio_x;
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

LIBREYOLO_INLINE void DetectDataset::set_epoch_order(int epoch, const std::vector<size_t>& order, const LoaderOptions& opt) {
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

LIBREYOLO_INLINE size_t DetectDataset::partner(size_t i, int epoch, std::mt19937_64& rng) const {
  const int64_t n = static_cast<int64_t>(size());
  if (order_epoch_ != epoch || pos_of_.size() != static_cast<size_t>(n)) return static_cast<size_t>(randint(rng, 0, n - 1));
  const int64_t half = aug_.mosaic_window / 2;
  int64_t d = randint(rng, -half, half - 1);
  d += d >= 0;  // in [-half, half] without 0
  return order_[static_cast<size_t>(((static_cast<int64_t>(pos_of_[i]) + d) % n + n) % n)];
}

LIBREYOLO_INLINE std::shared_ptr<const Image> DetectDataset::load(size_t i, size_t* used) const {
  detail::StageClock clock(detect_stage_times().load_ns);
  return with_substitute(i, used, [&](size_t j) {
    return cache_->get(j, index_.entries[j].image, [&] { return decode_resized(index_.entries[j]); });
  });
}

LIBREYOLO_INLINE DetectDataset::Tile DetectDataset::load_tile(size_t i, bool unresized) const {
  Tile t;
  if (cache_->mode() != CacheMode::off) {
    t.img = load(i, &t.index);
  } else {
    detail::StageClock clock(detect_stage_times().load_ns);
    // The tile is the image resized to its long side imgsz, as a cached one is and as the original's
    // pull_item gives it (data/dataset.py load_resized_img): a mosaic then halves the 2 imgsz canvas at
    // exactly 1/2 (each output pixel the mean of a 2 x 2 block, the original's cv2.resize). Tiles kept at
    // the decoded size were resampled once, straight to the output: for an image over imgsz that skipped
    // source pixels (a step of up to 3 for 960 px images) and aliased fine texture and noise, the harder
    // samples benchmarks/s25/yolo9_audit.md traced (+6-9% training loss while mosaic is on).
    // An unresized decode is kept under its own key (the top bit set) beside the resized one.
    const size_t tag = unresized ? size_t{1} << (sizeof(size_t) * 8 - 1) : 0;
    t.img = with_substitute(i, &t.index, [&](size_t j) {
      return buffer_->get(j | tag, [&] { return decode_resized(index_.entries[j], !unresized); });
    });
  }
  std::tie(t.w, t.h) = resized_size(index_.entries[t.index]);
  return t;
}

LIBREYOLO_INLINE DetBoxes DetectDataset::pixel_boxes(size_t i, int w, int h, bool clip) const {
  DetBoxes out;
  const float W = static_cast<float>(w), H = static_cast<float>(h);
  auto fit = [clip](float v, float size) { return clip ? std::clamp(v, 0.f, size) : v; };
  for (const auto& b : index_.entries[i].boxes) {
    DetBox d{b[0], fit((b[1] - b[3] / 2) * W, W), fit((b[2] - b[4] / 2) * H, H), fit((b[1] + b[3] / 2) * W, W),
             fit((b[2] + b[4] / 2) * H, H)};
    if (d.x2 > d.x1 && d.y2 > d.y1) out.push_back(d);
  }
  return out;
}

LIBREYOLO_INLINE std::pair<int, int> DetectDataset::resized_size(const LabelEntry& e) const {
  const int S = aug_.imgsz;
  const double r = static_cast<double>(S) / std::max(e.h, e.w);
  return {std::min(static_cast<int>(std::ceil(e.w * r - 1e-9)), S), std::min(static_cast<int>(std::ceil(e.h * r - 1e-9)), S)};
}

LIBREYOLO_INLINE Image DetectDataset::decode_resized(const LabelEntry& e, bool resize) const {
  const auto [w, h] = resized_size(e);
  Image img = read_image(e.image, std::max(e.h, e.w) > aug_.imgsz ? std::min(h, w) : 0);
  if (!resize || (img.h == h && img.w == w)) return img;
  return resize_bilinear(img, h, w);
}

LIBREYOLO_INLINE void DetectDataset::place(Canvas& c, const Tile& t, int x, int y) const {
  const WarpTile w = place_tile(*t.img, t.w, t.h, x, y, c.w, c.h);
  if (w.visible()) c.tiles.push_back(w);
  c.hold.push_back(t.img);
  for (auto b : pixel_boxes(t.index, t.w, t.h)) {
    b.x1 = std::clamp(b.x1 + x, 0.f, float(c.w)), b.x2 = std::clamp(b.x2 + x, 0.f, float(c.w));
    b.y1 = std::clamp(b.y1 + y, 0.f, float(c.h)), b.y2 = std::clamp(b.y2 + y, 0.f, float(c.h));
    if (b.x2 > b.x1 && b.y2 > b.y1) c.boxes.push_back(b);
  }
}

LIBREYOLO_INLINE DetectDataset::Canvas DetectDataset::single_canvas(size_t i) const {
  const int S = aug_.imgsz;
  Canvas c;
  const Tile t = load_tile(i);
  c.h = c.w = S;
  const bool corner = aug_.letterbox_place == LetterboxPlace::top_left;
  c.x0 = corner ? 0 : (S - t.w) / 2, c.y0 = corner ? 0 : (S - t.h) / 2;
  c.x1 = c.x0 + t.w, c.y1 = c.y0 + t.h;
  place(c, t, c.x0, c.y0);
  c.primary = t.index;
  return c;
}

LIBREYOLO_INLINE DetectDataset::Canvas DetectDataset::make_canvas(size_t i, std::mt19937_64& rng, int epoch) const {
  if (!(mosaic_on(epoch) && bernoulli(rng, aug_.mosaic))) return single_canvas(i);
  const int S = aug_.imgsz;
  Canvas c;
  const std::array<size_t, 4> idx{i, partner(i, epoch, rng), partner(i, epoch, rng), partner(i, epoch, rng)};
  std::array<Tile, 4> t;
  for (int k = 0; k < 4; ++k) t[k] = load_tile(idx[k]);
  c.h = c.w = 2 * S;
  c.mosaic = true;
  c.x1 = c.w, c.y1 = c.h;
  // Ultralytics' mosaic4: tile 0 ends at the centre from the top-left, 1 top-right, 2 bottom-left, 3 bottom-right.
  const int xc = static_cast<int>(uniform(rng, S / 2.0, 1.5 * S)), yc = static_cast<int>(uniform(rng, S / 2.0, 1.5 * S));
  for (int k = 0; k < 4; ++k) place(c, t[k], (k == 0 || k == 2) ? xc - t[k].w : xc, k < 2 ? yc - t[k].h : yc);
  c.primary = t[0].index;
  return c;
}

LIBREYOLO_INLINE torch::Tensor DetectDataset::build_train(size_t i, std::mt19937_64& rng, int epoch, int out, DetBoxes& boxes, size_t& used) const {
  if (aug_.pipeline) return aug_.pipeline(*this, i, rng, epoch, out, boxes, used);
  if (!aug_.affine) return build_train_plain(i, rng, epoch, out, boxes, used);
  const Canvas c = make_canvas(i, rng, epoch);
  used = c.primary;
  Canvas c2;
  const bool mix = aug_.mixup > 0 && bernoulli(rng, aug_.mixup);
  if (mix) c2 = make_canvas(partner(i, epoch, rng), rng, epoch);
  detail::StageClock clock(detect_stage_times().augment_ns);
  const double extra = static_cast<double>(out) / aug_.imgsz;  // multi-scale: the canvas shrinks or grows
  double sc = 1;
  // One canvas -> output: a random affine and its boxes.
  auto transform = [&](const Canvas& cv, Mat3& M, DetBoxes& out_boxes) {
    M = random_affine_matrix(cv.h, cv.w, out, out, affine_, extra, rng, &sc);
    out_boxes = warp_boxes(cv.boxes, M, out, out, sc);
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

LIBREYOLO_INLINE torch::Tensor DetectDataset::render_plain(const Canvas& c, std::mt19937_64& rng, int out, DetBoxes& boxes) const {
  const double kx = static_cast<double>(out) / c.w, ky = static_cast<double>(out) / c.h;
  Mat3 M = kIdentity3;
  M[0] = kx, M[4] = ky;
  const float min_side = c.mosaic ? 2.f : 1.f;  // the 2S mosaic resized to S: > 2 px, as the original
  boxes.clear();
  DetBoxes all;
  for (const auto& b : c.boxes) {
    DetBox m{b.cls, static_cast<float>(b.x1 * kx), static_cast<float>(b.y1 * ky), static_cast<float>(b.x2 * kx),
             static_cast<float>(b.y2 * ky)};
    all.push_back(m);
    if (m.x2 - m.x1 > min_side && m.y2 - m.y1 > min_side) boxes.push_back(m);
  }
  // The original's transform leaves an image without a box as it is: no HSV, no flip; and where every box of
  // an image alone falls under the size filter it falls back to that same bare image with all its boxes.
  if (boxes.empty()) {
    if (!c.mosaic) boxes = std::move(all);
    return to_chw_tensor(warp_tiles(c.tiles, M, out, out));
  }
  // The original's transform flips the image before its letterbox, so an image alone flips about its own
  // rectangle (one in the top-left corner stays there); a mosaic's rectangle is the whole canvas.
  const double ax = (c.x0 + c.x1) * kx, ay = (c.y0 + c.y1) * ky;  // mirror: x -> ax - x
  Mat3 F = kIdentity3;
  if (bernoulli(rng, aug_.flipud)) F[4] = -1, F[5] = ay, flip_boxes_ud(boxes, static_cast<float>(ay));
  if (bernoulli(rng, aug_.fliplr)) F[0] = -1, F[2] = ax, flip_boxes_lr(boxes, static_cast<float>(ax));
  const Image img = warp_tiles(c.tiles, mat_mul(F, M), out, out);
  torch::Tensor t;
  if (aug_.hsv_prob < 1 && !bernoulli(rng, aug_.hsv_prob)) t = to_chw_tensor(img);
  else if (aug_.hsv_mode == "add") t = hsv_add_chw(img, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
  else t = hsv_augment_chw(img, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
  if (c.mosaic) return t;
  // HSV jitters the image before the letterbox in the original: the padding keeps the fill colour (pixels
  // the image only partly covers after a multi-scale resize stay jittered).
  const int64_t X0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(c.x0 * kx)), 0, out),
                X1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(c.x1 * kx)), X0, out),
                Y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(c.y0 * ky)), 0, out),
                Y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(c.y1 * ky)), Y0, out);
  t.narrow(2, 0, X0).fill_(kLetterboxFill), t.narrow(2, X1, out - X1).fill_(kLetterboxFill);
  t.narrow(1, 0, Y0).fill_(kLetterboxFill), t.narrow(1, Y1, out - Y1).fill_(kLetterboxFill);
  return t;
}

LIBREYOLO_INLINE torch::Tensor DetectDataset::build_train_plain(size_t i, std::mt19937_64& rng, int epoch, int out, DetBoxes& boxes,
                                                                size_t& used) const {
  const Canvas c = make_canvas(i, rng, epoch);
  used = c.primary;
  detail::StageClock clock(detect_stage_times().augment_ns);
  torch::Tensor img = render_plain(c, rng, out, boxes);
  // The original's mixup (YOLO9MosaicMixupDataset._mixup) follows a mosaic only -- never an image alone, so
  // never once mosaic has closed -- and only when the mosaic kept a box; its partner is an image alone.
  if (!(c.mosaic && aug_.mixup > 0 && !boxes.empty() && bernoulli(rng, aug_.mixup))) return img;
  DetBoxes b2;
  const torch::Tensor img2 = render_plain(single_canvas(partner(i, epoch, rng)), rng, out, b2);
  const double r = beta_draw(32.0, 32.0, rng);
  boxes.insert(boxes.end(), b2.begin(), b2.end());
  return img.to(torch::kFloat32).mul_(r).add_(img2.to(torch::kFloat32), 1 - r).round_().to(torch::kUInt8);
}

LIBREYOLO_INLINE void DetectDataset::init_cache(const std::string& split) {
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

LIBREYOLO_INLINE torch::Tensor pad_targets_to_bucket(const torch::Tensor& targets) {
  const int64_t m = targets.size(1);
  int64_t rows = 1;
  while (rows < m) rows <<= 1;
  if (rows == m) return targets;
  auto pad = torch::zeros({targets.size(0), rows - m, targets.size(2)}, targets.options());
  pad.select(2, 0).fill_(-1);
  return torch::cat({targets, pad}, 1);
}

LIBREYOLO_INLINE DetectBatch DetectDataset::collate(std::vector<DetectSample>&& samples) {
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
    b.letterbox.push_back({double(s.orig_h), double(s.orig_w), s.ratio_x, s.ratio_y, s.pad_x, s.pad_y});
  }
  return b;
}

}  // namespace libreyolo::data
