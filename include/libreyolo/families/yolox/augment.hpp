#pragma once
// The original's YOLOX training pipeline (libreyolo/training/augment.py: MosaicMixupDataset +
// TrainTransform, used by its YOLOX and RTMDet trainers), as a DetectAugment::pipeline:
//
//   mosaic (p = mosaic, while open): 4 images (long side S) on a 2S x 2S grey canvas around a centre
//     (xc, yc) ~ U(S/2, 3S/2)², boxes clipped to the canvas; then the original's random_affine straight
//     into S x S: M = [R(angle, scale) + shear | translate], rotation and scale about the canvas ORIGIN
//     (no centring: the output shows the canvas from its top-left corner, 640 / scale pixels of it),
//     angle ~ U(-degrees, degrees), scale ~ U(0.1, 2.0) (mosaic_scale), shear ~ U(-shear, shear) on both
//     axes, translation ~ U(-translate, translate) · S; boxes: the corners' bounding box, clipped, no
//     filter. Then mixup (p = mixup, when the mosaic has boxes): ONE other image with boxes, letterboxed
//     top-left on an S x S grey canvas, that canvas resized by j ~ U(0.5, 1.5) (mixup_scale), mirrored
//     with p = 1/2, put on a black canvas of max(jS, S) and cropped to S x S at a random offset; the two
//     are averaged 0.5 / 0.5.
//   otherwise (mosaic closed for the last no_aug_epochs, or not drawn): the image alone, letterboxed; no
//     affine and no mixup (the original's close_mosaic / _get_normal_item).
//   then TrainTransform: HSV (p = hsv_prob; over the image only, before the padding, when there is no
//     mosaic), a left-right flip (p = fliplr), and boxes kept when both sides exceed 1 pixel.
//
// The no-mosaic image's letterbox is placed as the family's letterbox_place says (YOLOX: top-left, as
// the original's). Deliberate differences (see the report of the fidelity audit): pixel centres at +0.5
// in the warps (OpenCV's warpAffine takes them at integers: a sub-pixel shift); mosaic / mixup partners come from the dataset's
// partner() (near the sample in the shuffled epoch order) instead of any index; no fallback to the
// un-augmented image when no box survives (the original then trains on its degenerate boxes); the
// targets are padded to the batch's largest count rather than truncated at max_labels (50 / 120).
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/rng.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace libreyolo::families::yolox {

struct MosaicMixupOptions {
  double mosaic_scale_lo = 0.1, mosaic_scale_hi = 2.0;  // the original's mosaic_scale
  double mixup_scale_lo = 0.5, mixup_scale_hi = 1.5;    // the original's mixup_scale
};

// The original's get_affine_matrix for given draws (angle and shears in degrees, translation in pixels):
// cv2.getRotationMatrix2D about (0, 0), the shears mixed into its rows, then the translation. Row-major
// 3 x 3 (last row 0 0 1).
inline data::Mat3 original_affine(double angle_deg, double scale, double shear_x_deg, double shear_y_deg, double tx,
                                  double ty) {
  if (!(scale > 0)) throw ConfigError("yolox affine: the scale " + std::to_string(scale) + " must be positive");
  const double a = angle_deg * std::numbers::pi / 180;
  const double alpha = scale * std::cos(a), beta = scale * std::sin(a);
  const double r0[3] = {alpha, beta, 0}, r1[3] = {-beta, alpha, 0};
  const double shear_x = std::tan(shear_x_deg * std::numbers::pi / 180);
  const double shear_y = std::tan(shear_y_deg * std::numbers::pi / 180);
  data::Mat3 M = data::kIdentity3;
  for (int k = 0; k < 3; ++k) {
    M[k] = r0[k] + shear_y * r1[k];
    M[3 + k] = r1[k] + shear_x * r0[k];
  }
  M[2] = tx, M[5] = ty;
  return M;
}

// The original's draws, in its order: angle ~ U(-degrees, degrees), scale ~ U(lo, hi), shear_x, shear_y
// ~ U(-shear, shear), translations ~ U(-translate, translate) x the output size.
inline data::Mat3 original_affine_matrix(int out_w, int out_h, double degrees, double translate, double scale_lo,
                                         double scale_hi, double shear, std::mt19937_64& rng) {
  const double angle = data::uniform(rng, -degrees, degrees);
  const double s = data::uniform(rng, scale_lo, scale_hi);
  const double shx = data::uniform(rng, -shear, shear), shy = data::uniform(rng, -shear, shear);
  const double tx = data::uniform(rng, -translate, translate) * out_w;
  const double ty = data::uniform(rng, -translate, translate) * out_h;
  return original_affine(angle, s, shx, shy, tx, ty);
}

// The original's apply_affine_to_bboxes: each box's four corners through M, their bounding box, clipped to
// w x h; nothing is dropped here.
inline data::DetBoxes affine_boxes_clipped(const data::DetBoxes& boxes, const data::Mat3& M, int w, int h) {
  data::DetBoxes out;
  out.reserve(boxes.size());
  for (const auto& b : boxes) {
    const double xs[4] = {b.x1, b.x2, b.x1, b.x2}, ys[4] = {b.y1, b.y2, b.y2, b.y1};
    double x_lo = 1e30, x_hi = -1e30, y_lo = 1e30, y_hi = -1e30;
    for (int k = 0; k < 4; ++k) {
      const double x = M[0] * xs[k] + M[1] * ys[k] + M[2], y = M[3] * xs[k] + M[4] * ys[k] + M[5];
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
    out.push_back({b.cls, static_cast<float>(std::clamp(x_lo, 0.0, double(w))), static_cast<float>(std::clamp(y_lo, 0.0, double(h))),
                   static_cast<float>(std::clamp(x_hi, 0.0, double(w))), static_cast<float>(std::clamp(y_hi, 0.0, double(h)))});
  }
  return out;
}

// TrainTransform's filter: boxes whose sides both exceed 1 pixel.
inline data::DetBoxes keep_boxes_over_1px(const data::DetBoxes& boxes) {
  data::DetBoxes out;
  for (const auto& b : boxes)
    if (std::min(b.x2 - b.x1, b.y2 - b.y1) > 1.f) out.push_back(b);
  return out;
}

inline void mirror_image(data::Image& img) {
  const int c = img.c;
  for (int y = 0; y < img.h; ++y) {
    uint8_t* row = &img.px[static_cast<size_t>(y) * img.row_bytes()];
    for (int a = 0, b = img.w - 1; a < b; ++a, --b)
      for (int k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
  }
}

namespace detail {
inline torch::Tensor hsv_tensor(const data::Image& img, const data::DetectAugment& a, std::mt19937_64& rng) {
  if (a.hsv_prob < 1 && !data::bernoulli(rng, a.hsv_prob)) return data::to_chw_tensor(img);
  if (a.hsv_mode == "add") return data::hsv_add_chw(img, a.hsv_h, a.hsv_s, a.hsv_v, rng);
  return data::hsv_augment_chw(img, a.hsv_h, a.hsv_s, a.hsv_v, rng);
}
}  // namespace detail

// The original's _mixup on the partner's boxes (image pixels): scaled by s (letterbox ratio x jitter),
// clipped to the jittered canvas Wj x Hj, mirrored in it when flip, moved by the crop offset (xo, yo) and
// clipped to S x S; then x k (output pixels per S pixel). Nothing is dropped here.
inline data::DetBoxes mixup_boxes(const data::DetBoxes& cp, double s, int Wj, int Hj, bool flip, int xo, int yo, int S,
                                  double k = 1.0) {
  data::DetBoxes boxes;
  for (const auto& b : cp) {
    double x1 = std::clamp(b.x1 * s, 0.0, double(Wj)), x2 = std::clamp(b.x2 * s, 0.0, double(Wj));
    const double y1 = std::clamp(b.y1 * s, 0.0, double(Hj)), y2 = std::clamp(b.y2 * s, 0.0, double(Hj));
    if (flip) std::tie(x1, x2) = std::pair{Wj - x2, Wj - x1};
    boxes.push_back({b.cls, static_cast<float>(std::clamp(x1 - xo, 0.0, double(S)) * k),
                     static_cast<float>(std::clamp(y1 - yo, 0.0, double(S)) * k),
                     static_cast<float>(std::clamp(x2 - xo, 0.0, double(S)) * k),
                     static_cast<float>(std::clamp(y2 - yo, 0.0, double(S)) * k)});
  }
  return boxes;
}

// The mixup partner (the original's _mixup) rendered into out x out with its boxes; S = imgsz.
inline data::Image mixup_partner(const data::DetectDataset& ds, const MosaicMixupOptions& o, size_t i, std::mt19937_64& rng,
                                 int epoch, int out, data::DetBoxes& boxes) {
  const int S = ds.augment().imgsz;
  const double jit = data::uniform(rng, o.mixup_scale_lo, o.mixup_scale_hi);
  const bool flip = data::uniform01(rng) > 0.5;
  data::DetectDataset::Tile t;
  data::DetBoxes cp;
  for (size_t tries = 0; tries < ds.size() && cp.empty(); ++tries) {  // an image with boxes
    t = ds.load_tile(ds.partner(i, epoch, rng));
    cp = ds.pixel_boxes(t.index, t.w, t.h);
  }
  const double r = std::min(static_cast<double>(S) / t.h, static_cast<double>(S) / t.w);
  const int lw = std::max(1, static_cast<int>(t.w * r)), lh = std::max(1, static_cast<int>(t.h * r));
  const int Wj = static_cast<int>(S * jit), Hj = static_cast<int>(S * jit);
  const int xo = Wj > S ? static_cast<int>(data::randint(rng, 0, Wj - S - 1)) : 0;
  const int yo = Hj > S ? static_cast<int>(data::randint(rng, 0, Hj - S - 1)) : 0;
  const double k = static_cast<double>(out) / S;  // output pixels per S-canvas pixel (1 without multi-scale)
  // Letterbox canvas (S x S, image at the top-left) -> jittered canvas (x Wj / S) -> mirrored -> cropped.
  data::Mat3 M = data::kIdentity3;
  M[0] = (flip ? -1.0 : 1.0) * Wj / S * k, M[2] = ((flip ? Wj : 0) - xo) * k;
  M[4] = static_cast<double>(Hj) / S * k, M[5] = -yo * k;
  data::WarpTile w;
  w.img = t.img.get();
  w.rx0 = 0, w.ry0 = 0, w.rx1 = static_cast<float>(lw), w.ry1 = static_cast<float>(lh);
  w.sx = static_cast<float>(t.img->w) / lw, w.sy = static_cast<float>(t.img->h) / lh;
  data::Image img = data::warp_tiles({w}, M, out, out, data::kLetterboxFill);
  // Outside the jittered canvas the original's padding is black.
  const int bx = std::clamp(static_cast<int>(std::lround((Wj - xo) * k)), 0, out);
  const int by = std::clamp(static_cast<int>(std::lround((Hj - yo) * k)), 0, out);
  for (int y = 0; y < out; ++y) {
    uint8_t* row = &img.px[static_cast<size_t>(y) * img.row_bytes()];
    if (y >= by) std::fill(row, row + static_cast<size_t>(out) * 3, uint8_t{0});
    else if (bx < out) std::fill(row + static_cast<size_t>(bx) * 3, row + static_cast<size_t>(out) * 3, uint8_t{0});
  }
  boxes = mixup_boxes(cp, r * jit, Wj, Hj, flip, xo, yo, S, k);
  return img;
}

// One training sample of the original's MosaicMixupDataset + TrainTransform (header comment).
inline torch::Tensor mosaic_mixup_sample(const data::DetectDataset& ds, const MosaicMixupOptions& o, size_t i,
                                         std::mt19937_64& rng, int epoch, int out, data::DetBoxes& boxes, size_t& used) {
  const auto& a = ds.augment();
  const int S = a.imgsz;
  const double k = static_cast<double>(out) / S;
  boxes.clear();
  if (!(ds.mosaic_on(epoch) && data::bernoulli(rng, a.mosaic))) {
    // The image alone: flip, letterbox (the family's placement: top-left as the original's preproc, whose
    // padding is right and below), HSV over the image only, boxes over 1 px.
    const auto t = ds.load_tile(i);
    used = t.index;
    boxes = ds.pixel_boxes(t.index, t.w, t.h);
    const bool flip = data::bernoulli(rng, a.fliplr);
    const double r = std::min(static_cast<double>(out) / t.h, static_cast<double>(out) / t.w);
    const int w = std::clamp(static_cast<int>(t.w * r), 1, out), h = std::clamp(static_cast<int>(t.h * r), 1, out);
    const bool corner = a.letterbox_place == data::LetterboxPlace::top_left;
    const int left = corner ? 0 : (out - w) / 2, top = corner ? 0 : (out - h) / 2;
    const data::WarpTile wt = data::place_tile(*t.img, t.w, t.h, 0, 0, t.w, t.h);
    data::Mat3 M = data::kIdentity3;
    M[0] = (flip ? -r : r), M[2] = flip ? w : 0, M[4] = r;
    const data::Image small = data::warp_tiles({wt}, M, h, w);
    auto img = torch::full({3, out, out}, static_cast<int64_t>(data::kLetterboxFill), torch::kUInt8);
    img.narrow(1, top, h).narrow(2, left, w).copy_(detail::hsv_tensor(small, a, rng));
    for (auto& b : boxes) {
      double x1 = b.x1 * r, x2 = b.x2 * r;
      if (flip) std::tie(x1, x2) = std::pair{w - x2, w - x1};
      b.x1 = static_cast<float>(x1 + left), b.x2 = static_cast<float>(x2 + left);
      b.y1 = static_cast<float>(b.y1 * r + top), b.y2 = static_cast<float>(b.y2 * r + top);
    }
    boxes = keep_boxes_over_1px(boxes);
    return img;
  }
  // Mosaic on 2S x 2S (the original's get_mosaic_coordinate), boxes clipped to the canvas.
  const int C = 2 * S;
  const int yc = static_cast<int>(data::uniform(rng, 0.5 * S, 1.5 * S));
  const int xc = static_cast<int>(data::uniform(rng, 0.5 * S, 1.5 * S));
  const std::array<size_t, 4> idx{i, ds.partner(i, epoch, rng), ds.partner(i, epoch, rng), ds.partner(i, epoch, rng)};
  std::array<data::DetectDataset::Tile, 4> tiles;
  std::vector<data::WarpTile> warp;
  data::DetBoxes canvas_boxes;
  for (int q = 0; q < 4; ++q) {
    tiles[q] = ds.load_tile(idx[q]);
    const auto& t = tiles[q];
    const int x = (q == 0 || q == 2) ? xc - t.w : xc, y = q < 2 ? yc - t.h : yc;
    const data::WarpTile wt = data::place_tile(*t.img, t.w, t.h, x, y, C, C);
    if (wt.visible()) warp.push_back(wt);
    for (auto b : ds.pixel_boxes(t.index, t.w, t.h))
      canvas_boxes.push_back({b.cls, std::clamp(b.x1 + x, 0.f, float(C)), std::clamp(b.y1 + y, 0.f, float(C)),
                              std::clamp(b.x2 + x, 0.f, float(C)), std::clamp(b.y2 + y, 0.f, float(C))});
  }
  used = tiles[0].index;
  data::Mat3 M = original_affine_matrix(S, S, a.degrees, a.translate, o.mosaic_scale_lo, o.mosaic_scale_hi, a.shear, rng);
  if (out != S)
    for (int q = 0; q < 6; ++q) M[q] *= k;
  boxes = affine_boxes_clipped(canvas_boxes, M, out, out);
  data::Image img = data::warp_tiles(warp, M, out, out);
  if (a.mixup > 0 && !boxes.empty() && data::bernoulli(rng, a.mixup)) {
    data::DetBoxes cp;
    const data::Image partner = mixup_partner(ds, o, i, rng, epoch, out, cp);
    data::blend_into(img, partner, 0.5);
    boxes.insert(boxes.end(), cp.begin(), cp.end());
  }
  // TrainTransform: mirror, HSV, boxes over 1 px.
  if (data::bernoulli(rng, a.fliplr)) {
    mirror_image(img);
    data::flip_boxes_lr(boxes, out);
  }
  boxes = keep_boxes_over_1px(boxes);
  return detail::hsv_tensor(img, a, rng);
}

// The family hook (tasks/detect.hpp): the original's pipeline in place of the built-in one. The mosaic
// scale is the original's (0.1, 2.0) unless scale= is given (then 1 ± scale).
inline void use_mosaic_mixup_pipeline(data::DetectAugment& a, const TrainConfig& cfg) {
  data::refuse_unused_augment(a, {"flipud", "perspective"},
                              "the YOLOX/RTMDet training pipeline (the original's MosaicMixupDataset: mosaic, affine, mixup, "
                              "HSV, left-right flip)");
  MosaicMixupOptions o;
  if (cfg.is_explicit("scale")) o.mosaic_scale_lo = 1 - cfg.scale, o.mosaic_scale_hi = 1 + cfg.scale;
  a.pipeline = [o](const data::DetectDataset& ds, size_t i, std::mt19937_64& rng, int epoch, int out, data::DetBoxes& boxes,
                   size_t& used) { return mosaic_mixup_sample(ds, o, i, rng, epoch, out, boxes, used); };
}

}  // namespace libreyolo::families::yolox
