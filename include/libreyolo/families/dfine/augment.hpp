#pragma once
// The D-FINE line's training pipeline (the originals' DFINETrainTransform / DEIMTrainTransform, models/
// dfine/transforms.py and models/deim/transforms.py at c41461e: torchvision.transforms.v2 ops), as a
// DetectAugment::pipeline. Per sample, on the image at canvas size w x h (long side imgsz):
//
//   while the strong augmentations are open (epoch < min(int(epochs x aug_stop_epoch_ratio), epochs -
//   no_aug_epochs): the originals' set_epoch / close_mosaic) and the sample has boxes:
//   1. RandomPhotometricDistort(p 0.5): each of brightness U(0.875, 1.125), contrast U(0.5, 1.5),
//      saturation U(0.5, 1.5), hue U(-0.05, 0.05) drawn with p 0.5; contrast before or after saturation
//      and hue (1/2); a random channel permutation with p 0.5; uint8 arithmetic as torchvision's (each op
//      truncates to 0..255; grey = floor(0.2989 R + 0.587 G + 0.114 B); contrast blends with the image's
//      mean grey);
//   2. RandomZoomOut(p 0.5, side 1..4, fill 0): the image at a random place of a black canvas r times
//      its size;
//   3. RandomIoUCrop with p 0.8 (min scale 0.3, aspect 0.5..2, IoU options {0, .1, .3, .5, .7, .9, 1},
//      40 trials, re-drawing the option until one succeeds; option 1 leaves the image as it is): a crop
//      that holds the centre of at least one box whose IoU with the crop reaches the option; boxes whose
//      centre falls outside are dropped, the rest clipped to the crop;
//   4. SanitizeBoundingBoxes(min_size: 1, DEIMv2's sanitize_min_size for atto / femto / pico 12 / 10 / 8);
//   then always: a left-right flip (p fliplr), the resize to imgsz, SanitizeBoundingBoxes(min_size)
//   again on its pixels, and boxes kept when both sides exceed 1 pixel; under multi-scale the sample is then
//   resized (plain bilinear) to the batch's drawn size, as the originals' collate resizes the batch.
//
// Deliberate differences: the last resize letterboxes (centred, grey 114) where the originals stretch to
// a square, because our validation letterboxes too (the originals validate stretched) — the two agree on
// square images and each library trains in its own validation geometry (train_resize=stretch stretches
// as the originals, and such a run validates stretched too, val_resize=auto). The resize is the originals' one antialiased
// resize (torchvision's Resize(antialias=True)) from the decoded file, their "unresized image" (with
// cache = off; a cached image was already resized to long side imgsz): data::resample_aa.
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/rng.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <memory>
#include <random>
#include <utility>

namespace libreyolo::families::dfine {

// ---- RandomPhotometricDistort ----------------------------------------------------------------------

struct Photometric {
  std::optional<double> brightness, contrast, saturation, hue;
  bool contrast_before = true;
  std::optional<std::array<int, 3>> permutation;  // output channel c takes input channel permutation[c]
};

// torchvision's make_params order: the four factors, contrast's place, then the permutation.
inline Photometric draw_photometric(std::mt19937_64& rng, double p = 0.5) {
  Photometric ph;
  auto maybe = [&](double lo, double hi) -> std::optional<double> {
    if (data::uniform01(rng) < p) return data::uniform(rng, lo, hi);
    return std::nullopt;
  };
  ph.brightness = maybe(0.875, 1.125);
  ph.contrast = maybe(0.5, 1.5);
  ph.saturation = maybe(0.5, 1.5);
  ph.hue = maybe(-0.05, 0.05);
  ph.contrast_before = data::uniform01(rng) < 0.5;
  if (data::uniform01(rng) < p) {
    std::array<int, 3> perm{0, 1, 2};  // Fisher-Yates, as data::shuffle_portable
    for (int k = 2; k > 0; --k) std::swap(perm[static_cast<size_t>(k)], perm[static_cast<size_t>(data::randint(rng, 0, k))]);
    ph.permutation = perm;
  }
  return ph;
}

namespace detail {
inline uint8_t trunc255(double v) { return static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)); }
inline double grey_floor(const uint8_t* p) { return std::floor(0.2989 * p[0] + 0.587 * p[1] + 0.114 * p[2]); }

inline void blend_with(data::Image& img, double f, double other) {
  for (auto& v : img.px) v = trunc255(f * v + (1 - f) * other);
}
inline void contrast(data::Image& img, double f) {
  double sum = 0;
  for (size_t i = 0; i < img.px.size(); i += 3) sum += grey_floor(&img.px[i]);
  blend_with(img, f, sum / static_cast<double>(img.px.size() / 3));
}
inline void saturation(data::Image& img, double f) {
  for (size_t i = 0; i < img.px.size(); i += 3) {
    const double g = grey_floor(&img.px[i]);
    for (int c = 0; c < 3; ++c) img.px[i + c] = trunc255(f * img.px[i + c] + (1 - f) * g);
  }
}
// torchvision's adjust_hue on uint8: to float / 255, RGB -> HSV, h = (h + f) mod 1, back, x 255.999 truncated.
inline void hue(data::Image& img, double f) {
  for (size_t i = 0; i < img.px.size(); i += 3) {
    const double r = img.px[i] / 255.0, g = img.px[i + 1] / 255.0, b = img.px[i + 2] / 255.0;
    const double mx = std::max({r, g, b}), mn = std::min({r, g, b}), d = mx - mn;
    double h = 0;
    if (d > 0) {
      if (mx == r) h = std::fmod((g - b) / d + 6.0, 6.0);
      else if (mx == g) h = (b - r) / d + 2.0;
      else h = (r - g) / d + 4.0;
      h /= 6.0;
    }
    const double s = mx > 0 ? d / mx : 0, v = mx;
    h = h + f;
    h -= std::floor(h);
    const double h6 = h * 6.0;
    const int k = static_cast<int>(std::floor(h6)) % 6;
    const double fr = h6 - std::floor(h6);
    const double p = v * (1 - s), q = v * (1 - s * fr), t = v * (1 - s * (1 - fr));
    double o[3];
    switch (k) {
      case 0: o[0] = v, o[1] = t, o[2] = p; break;
      case 1: o[0] = q, o[1] = v, o[2] = p; break;
      case 2: o[0] = p, o[1] = v, o[2] = t; break;
      case 3: o[0] = p, o[1] = q, o[2] = v; break;
      case 4: o[0] = t, o[1] = p, o[2] = v; break;
      default: o[0] = v, o[1] = p, o[2] = q; break;
    }
    for (int c = 0; c < 3; ++c) img.px[i + c] = trunc255(o[c] * (255.0 + 1.0 - 1e-3));
  }
}
}  // namespace detail

// A copy of `src` with the distortion applied (torchvision's transform order).
inline data::Image apply_photometric(const data::Image& src, const Photometric& ph) {
  data::Image img = src;
  if (ph.brightness) detail::blend_with(img, *ph.brightness, 0.0);
  if (ph.contrast && ph.contrast_before) detail::contrast(img, *ph.contrast);
  if (ph.saturation) detail::saturation(img, *ph.saturation);
  if (ph.hue) detail::hue(img, *ph.hue);
  if (ph.contrast && !ph.contrast_before) detail::contrast(img, *ph.contrast);
  if (ph.permutation) {
    const auto& pm = *ph.permutation;
    for (size_t i = 0; i < img.px.size(); i += 3) {
      const uint8_t v[3] = {img.px[i], img.px[i + 1], img.px[i + 2]};
      for (int c = 0; c < 3; ++c) img.px[i + c] = v[pm[c]];
    }
  }
  return img;
}

// ---- RandomZoomOut and RandomIoUCrop: integer canvas geometry --------------------------------------

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

// RandomZoomOut(side 1..4) once applied: the canvas (w, h are its size) and where the image lies in it.
inline Rect draw_zoom_out(int w, int h, std::mt19937_64& rng, double side_max = 4.0) {
  const double r = data::uniform(rng, 1.0, side_max);
  Rect c;
  c.w = static_cast<int>(w * r), c.h = static_cast<int>(h * r);
  c.x = static_cast<int>((c.w - w) * data::uniform01(rng));
  c.y = static_cast<int>((c.h - h) * data::uniform01(rng));
  return c;
}

inline double box_iou(const data::DetBox& b, const Rect& r) {
  const double ix = std::max(0.0, std::min<double>(b.x2, r.x + r.w) - std::max<double>(b.x1, r.x));
  const double iy = std::max(0.0, std::min<double>(b.y2, r.y + r.h) - std::max<double>(b.y1, r.y));
  const double inter = ix * iy, ua = double(b.x2 - b.x1) * (b.y2 - b.y1) + double(r.w) * r.h - inter;
  return ua > 0 ? inter / ua : 0.0;
}
inline bool centre_in(const data::DetBox& b, const Rect& r) {
  const double cx = 0.5 * (b.x1 + b.x2), cy = 0.5 * (b.y1 + b.y2);
  return r.x < cx && cx < r.x + r.w && r.y < cy && cy < r.y + r.h;
}

// RandomIoUCrop's search on a w x h canvas with `boxes` (canvas pixels): nullopt = no crop (the option
// 1.0 was drawn). The option is drawn again after 40 failed trials, as torchvision's `while True`.
inline std::optional<Rect> draw_iou_crop(int w, int h, const data::DetBoxes& boxes, std::mt19937_64& rng) {
  static constexpr std::array<double, 7> options{0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};
  constexpr double min_scale = 0.3, max_scale = 1.0, min_aspect = 0.5, max_aspect = 2.0;
  for (;;) {
    const double min_iou = options[static_cast<size_t>(data::randint(rng, 0, 6))];
    if (min_iou >= 1.0) return std::nullopt;
    for (int trial = 0; trial < 40; ++trial) {
      const double r0 = min_scale + (max_scale - min_scale) * data::uniform01(rng);
      const double r1 = min_scale + (max_scale - min_scale) * data::uniform01(rng);
      Rect c;
      c.w = static_cast<int>(w * r0), c.h = static_cast<int>(h * r1);
      if (c.h <= 0) continue;
      const double aspect = static_cast<double>(c.w) / c.h;
      if (!(min_aspect <= aspect && aspect <= max_aspect)) continue;
      c.x = static_cast<int>((w - c.w) * data::uniform01(rng));
      c.y = static_cast<int>((h - c.h) * data::uniform01(rng));
      if (c.w == 0 || c.h == 0) continue;
      double best = -1;
      for (const auto& b : boxes)
        if (centre_in(b, c)) best = std::max(best, box_iou(b, c));
      if (best < 0 || best < min_iou) continue;  // no box centre inside, or none overlaps enough
      return c;
    }
  }
}

// The crop applied to the boxes: those with the centre inside kept, moved and clipped to it.
inline data::DetBoxes crop_boxes(const data::DetBoxes& boxes, const Rect& c) {
  data::DetBoxes out;
  for (const auto& b : boxes) {
    if (!centre_in(b, c)) continue;
    out.push_back({b.cls, std::clamp(b.x1 - c.x, 0.f, float(c.w)), std::clamp(b.y1 - c.y, 0.f, float(c.h)),
                   std::clamp(b.x2 - c.x, 0.f, float(c.w)), std::clamp(b.y2 - c.y, 0.f, float(c.h))});
  }
  return out;
}

// SanitizeBoundingBoxes(min_size): both sides at least min_size.
inline void sanitize(data::DetBoxes& boxes, float min_size = 1.f) {
  std::erase_if(boxes, [&](const data::DetBox& b) { return b.x2 - b.x1 < min_size || b.y2 - b.y1 < min_size; });
}
// SanitizeBoundingBoxes' canvas test on a w x h canvas: a box with any coordinate outside it (below 0, or beyond w
// or h; on the edge is inside) goes: torchvision's _get_sanitize_bounding_boxes_mask. Only a label box that
// overhangs its image reaches it: pad and crop clamp what they move.
inline void drop_outside(data::DetBoxes& boxes, int w, int h) {
  const float W = static_cast<float>(w), H = static_cast<float>(h);
  std::erase_if(boxes, [&](const data::DetBox& b) {
    return b.x1 < 0 || b.y1 < 0 || b.x2 > W || b.y2 > H || b.x2 < 0 || b.y2 < 0 || b.x1 > W || b.y1 > H;
  });
}

// RandomZoomOut applied to the boxes: moved with the image to (z.x, z.y) and clamped to the z.w x z.h canvas
// (torchvision's pad_bounding_boxes clamps; only a label box that overhangs its image is changed by it).
inline void zoom_out_boxes(data::DetBoxes& boxes, const Rect& z) {
  const float W = static_cast<float>(z.w), H = static_cast<float>(z.h);
  for (auto& b : boxes) {
    b.x1 = std::clamp(b.x1 + z.x, 0.f, W), b.x2 = std::clamp(b.x2 + z.x, 0.f, W);
    b.y1 = std::clamp(b.y1 + z.y, 0.f, H), b.y2 = std::clamp(b.y2 + z.y, 0.f, H);
  }
}

// ---- the sample ----------------------------------------------------------------------------------

// Where a sample's strong augmentations stop (0-based epoch): the first of the originals' two switches.
inline int strong_stop_epoch(const data::DetectAugment& a, int ratio_stop) {
  return std::min(ratio_stop, a.epochs - a.no_aug_epochs);
}

// One training sample (header comment): made at imgsz x imgsz, then resized to the drawn size (multi-scale).
inline torch::Tensor strong_aug_sample(const data::DetectDataset& ds, int ratio_stop, size_t i, std::mt19937_64& rng, int epoch,
                                       int drawn, data::DetBoxes& boxes, size_t& used, float min_size = 1.f) {
  const auto& a = ds.augment();
  // The sample is made at imgsz; a multi-scale batch size other than imgsz is reached afterwards (below).
  const int out = a.imgsz > 0 ? a.imgsz : drawn;
  const auto t = ds.load_tile(i, /*unresized=*/true);  // resized once, at the end, as the originals
  used = t.index;
  boxes = ds.pixel_boxes(t.index, t.w, t.h, /*clip=*/false);  // as the label says: the originals clamp at pad and crop only
  std::shared_ptr<const data::Image> src = t.img;
  Rect canvas{0, 0, t.w, t.h};  // the canvas, in tile pixels: the image at (ox, oy)
  int ox = 0, oy = 0;
  if (a.train && epoch < strong_stop_epoch(a, ratio_stop) && !boxes.empty()) {
    const Photometric ph = draw_photometric(rng);
    src = std::make_shared<const data::Image>(apply_photometric(*t.img, ph));
    if (data::uniform01(rng) < 0.5) {  // RandomZoomOut's p
      const Rect z = draw_zoom_out(t.w, t.h, rng);
      canvas = {0, 0, z.w, z.h}, ox = z.x, oy = z.y;
      zoom_out_boxes(boxes, z);
    }
    if (data::uniform01(rng) < 0.8) {  // RandomApply(RandomIoUCrop)'s p
      if (const auto c = draw_iou_crop(canvas.w, canvas.h, boxes, rng)) {
        boxes = crop_boxes(boxes, *c);
        ox -= c->x, oy -= c->y;
        canvas = {0, 0, c->w, c->h};
      }
    }
    sanitize(boxes, min_size);
  }
  // Both SanitizeBoundingBoxes points' canvas test, once, here: the strong ops' point sees this canvas, and the weak
  // ops' point after the resize sees it flipped and scaled, which moves nothing across its edge (nothing between
  // the two points reads the boxes). A label box overhanging its image, not clamped by a zoom-out or a crop (or
  // with the strong ops closed), goes.
  drop_outside(boxes, canvas.w, canvas.h);
  const bool flip = data::bernoulli(rng, a.fliplr);
  if (flip) data::flip_boxes_lr(boxes, canvas.w);
  // Letterbox the canvas into out x out: scale r, centred; or (train_resize=stretch, the originals' Resize)
  // scale it to out x out, rx and ry per axis.
  const double r = std::min(static_cast<double>(out) / canvas.w, static_cast<double>(out) / canvas.h);
  const double rx = a.stretch ? static_cast<double>(out) / canvas.w : r, ry = a.stretch ? static_cast<double>(out) / canvas.h : r;
  const double pw = canvas.w * rx, ph = canvas.h * ry, px = (out - pw) / 2, py = (out - ph) / 2;
  // The resize: torchvision's Resize(antialias=True) of the canvas (the image at (ox, oy), the zoom-out's
  // black around it), computed from the image's own pixels (sx, sy of them per tile pixel) on the output
  // grid; the flip mirrors the output (the letterbox is centred, so this is the canvas flipped).
  const double sx = static_cast<double>(src->w) / t.w, sy = static_cast<double>(src->h) / t.h;
  const data::ResampleAxis ax{out, (-px / rx - ox) * sx, sx / rx, -ox * sx, (canvas.w - ox) * sx};
  const data::ResampleAxis ay{out, (-py / ry - oy) * sy, sy / ry, -oy * sy, (canvas.h - oy) * sy};
  data::Image img = data::resample_aa(*src, ax, ay);
  if (flip) data::flip_lr(img);
  // Outside the canvas: the letterbox grey (inside it, outside the image: the zoom-out's black).
  for (int y = 0; y < out; ++y)
    for (int x = 0; x < out; ++x)
      if (x + 0.5 < px || x + 0.5 > px + pw || y + 0.5 < py || y + 0.5 > py + ph)
        for (int c = 0; c < 3; ++c) img.at(y, x, c) = data::kLetterboxFill;
  data::DetBoxes kept;
  for (auto b : boxes) {
    b.x1 = static_cast<float>(b.x1 * rx + px), b.x2 = static_cast<float>(b.x2 * rx + px);
    b.y1 = static_cast<float>(b.y1 * ry + py), b.y2 = static_cast<float>(b.y2 * ry + py);
    if (b.x2 - b.x1 > 1 && b.y2 - b.y1 > 1) kept.push_back(b);
  }
  boxes = std::move(kept);
  sanitize(boxes, min_size);
  // The originals' multi-scale collate (DFINEMultiScaleCollate, DEIMMultiScaleCollate): the batch of imgsz
  // samples resized to the drawn size by a plain bilinear interpolate (no antialiasing), the boxes scaled
  // and not filtered again.
  if (drawn != out) {
    img = data::resize_bilinear(img, drawn, drawn);
    const float k = static_cast<float>(drawn) / static_cast<float>(out);
    for (auto& b : boxes) b.x1 *= k, b.y1 *= k, b.x2 *= k, b.y2 *= k;
  }
  return data::to_chw_tensor(img);
}

// The family hook: the pipeline above, its strong augmentations open until int(epochs x ratio). A setting
// of the generic pipeline that this one has no place for is refused rather than ignored.
inline void use_strong_aug_pipeline(data::DetectAugment& a, int ratio_stop, float min_size = 1.f) {
  data::refuse_unused_augment(a, {"mosaic", "mixup", "flipud", "hsv_prob", "perspective"},
                              "the D-FINE line's training pipeline (the originals': photometric distort, zoom-out, IoU crop, "
                              "left-right flip)");
  a.can_stretch = true;  // strong_aug_sample reads train_resize
  // A cache holds images resized to long side imgsz: said once here, not per sample.
  if (data::parse_cache_mode(a.cache) != data::CacheMode::off)
    log::notice_once("dfine.pipeline.cache",
                     "cache=" + a.cache +
                         ": the D-FINE line's pipeline reads the cached image, already resized to long side imgsz, and "
                         "resizes it again; with cache=off it reads the file unresized and resizes once, as the originals "
                         "(which never cache for this pipeline)");
  a.pipeline = [ratio_stop, min_size](const data::DetectDataset& ds, size_t i, std::mt19937_64& rng, int epoch, int out,
                                      data::DetBoxes& boxes, size_t& used) {
    return strong_aug_sample(ds, ratio_stop, i, rng, epoch, out, boxes, used, min_size);
  };
}

}  // namespace libreyolo::families::dfine
