#pragma once
// The 8-bit RGB image buffer used by every data pipeline, and the pixel operations on it
// (bilinear resize, antialiased resampling, crop, flips, HSV jitter, conversion to a CHW tensor).
// Included by image.hpp, which adds decoding/encoding; include that one.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/rng.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace libreyolo::data {

// Decompression-bomb guard: the most pixels (width x height, from the file's header) an image may
// declare before its pixels are allocated, as PIL's Image.MAX_IMAGE_PIXELS guard (PIL refuses above
// 2 x 89478485 = 178956970). A larger image is a DataError naming the file, so a dataset scan skips
// it with a warning. Set it with set_max_image_pixels(n) (0 = no limit) or the environment variable
// LIBREYOLO_MAX_IMAGE_PIXELS (read once, at the first image).
inline constexpr uint64_t default_max_image_pixels = 178956970;
namespace detail {
LIBREYOLO_INLINE std::atomic<uint64_t>& max_image_pixels_ref();
// Marks a decode failure that is the pixel limit (image.hpp reports it as it is, not as corruption).
inline constexpr const char* too_many_pixels = "too many pixels: ";
}  // namespace detail
LIBREYOLO_INLINE uint64_t max_image_pixels();
LIBREYOLO_INLINE void set_max_image_pixels(uint64_t n);
namespace detail {
// "" when a w x h image is within the limit, else the reason (starting with too_many_pixels).
LIBREYOLO_INLINE std::string pixel_limit_violation(uint64_t w, uint64_t h);
}  // namespace detail

// Interleaved 8-bit image: px[(y * w + x) * c + ch]. Decoders always produce c = 3, RGB order.
struct Image {
  int h = 0, w = 0, c = 3;
  std::vector<uint8_t> px;

  Image() = default;
  Image(int height, int width, int channels = 3, uint8_t fill = 0);

  uint8_t& at(int y, int x, int ch) { return px[(static_cast<size_t>(y) * w + x) * c + ch]; }
  uint8_t at(int y, int x, int ch) const { return px[(static_cast<size_t>(y) * w + x) * c + ch]; }
  bool empty() const { return h <= 0 || w <= 0; }
  size_t row_bytes() const { return static_cast<size_t>(w) * c; }
};

// Bilinear resize with half-pixel centres (align_corners = false), the convention of OpenCV's
// INTER_LINEAR and torch's interpolate; results are rounded to the nearest integer.
LIBREYOLO_INLINE Image resize_bilinear(const Image& src, int h, int w);

// One axis of resample_aa: output pixel k (centre k + 0.5) reads the source around the coordinate
// origin + (k + 0.5) * step (source pixel j covers [j, j + 1)); step > 1 shrinks. [lo, hi) is the
// canvas in source coordinates: a source pixel whose centre lies inside it and outside the image reads 0
// (a zero fill, e.g. RandomZoomOut's), one whose centre lies outside it does not exist (edge clamping).
struct ResampleAxis {
  int n_out = 0;
  double origin = 0, step = 1;
  double lo = 0, hi = 0;
};

// The resize ResampleAxis spans: n source pixels onto n_out output pixels, the canvas the image.
inline ResampleAxis resize_axis(int n, int n_out) {
  return {n_out, 0.0, static_cast<double>(n) / n_out, 0.0, static_cast<double>(n)};
}

// Antialiased bilinear resampling: torch's interpolate(mode=bilinear, antialias=true, align_corners=false),
// which torchvision's Resize(antialias=True) and PIL's BILINEAR resize compute: a triangle filter widened to
// `step` source pixels per axis when shrinking (plain bilinear when enlarging), its weights normalised over
// the canvas pixels it covers. An output pixel that covers no canvas pixel is 0. resample_aa_float returns
// the unrounded values (HWC, src.c channels); resample_aa rounds them to 8 bits.
LIBREYOLO_INLINE std::vector<float> resample_aa_float(const Image& src, const ResampleAxis& x, const ResampleAxis& y);
LIBREYOLO_INLINE Image resample_aa(const Image& src, const ResampleAxis& x, const ResampleAxis& y);

// The h x w region whose top-left pixel is (y, x); it must lie inside the image.
LIBREYOLO_INLINE Image crop(const Image& src, int y, int x, int h, int w);

// Mirror left-right, in place.
LIBREYOLO_INLINE void flip_lr(Image& img);

// Mirror top-bottom, in place.
LIBREYOLO_INLINE void flip_ud(Image& img);

namespace detail {
// 8-bit HSV with OpenCV's ranges (H in [0,180), S and V in [0,255]) so the gains mean what they
// mean in Ultralytics, whose hsv augmentation runs on cv2's 8-bit HSV.
LIBREYOLO_INLINE std::array<uint8_t, 3> rgb_to_hsv8(int r, int g, int b);
LIBREYOLO_INLINE std::array<uint8_t, 3> hsv8_to_rgb(int h, int s, int v);
}  // namespace detail

// Ultralytics-style colour jitter: gains r_k uniform in [1-g_k, 1+g_k] scale hue (mod 180),
// saturation and value through 256-entry lookup tables. All gains 0 leaves the image untouched.
LIBREYOLO_INLINE void hsv_jitter(Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng);

// uint8 tensor [3, H, W] owning its own memory (a copy; the Image may die afterwards).
LIBREYOLO_INLINE torch::Tensor to_chw_tensor(const Image& img);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/image_ops-inl.hpp>
#endif
