#pragma once
// Definitions of image_ops.hpp (core/api.hpp): included by image_ops.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/image_ops.hpp>

namespace libreyolo::data {

namespace detail {

LIBREYOLO_INLINE std::atomic<uint64_t>& max_image_pixels_ref() {
  static std::atomic<uint64_t> limit{[] {
    if (const char* env = std::getenv("LIBREYOLO_MAX_IMAGE_PIXELS"); env && *env) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(env, &end, 10);
      if (errno == 0 && end && *end == '\0' && env[0] != '-') return static_cast<uint64_t>(v);
    }
    return default_max_image_pixels;
  }()};
  return limit;
}

}  // namespace detail

LIBREYOLO_INLINE uint64_t max_image_pixels() { return detail::max_image_pixels_ref().load(std::memory_order_relaxed); }

LIBREYOLO_INLINE void set_max_image_pixels(uint64_t n) { detail::max_image_pixels_ref().store(n); }

namespace detail {

LIBREYOLO_INLINE std::string pixel_limit_violation(uint64_t w, uint64_t h) {
  const uint64_t limit = max_image_pixels();
  if (limit == 0 || w * h <= limit) return {};
  return std::string(too_many_pixels) + "the header declares " + std::to_string(w) + "x" + std::to_string(h) + " = " +
         std::to_string(w * h) + " pixels, more than the limit of " + std::to_string(limit) +
         " (a decompression bomb?); raise it with LIBREYOLO_MAX_IMAGE_PIXELS=N or data::set_max_image_pixels(N), 0 = no limit";
}

}  // namespace detail

LIBREYOLO_INLINE Image::Image(int height, int width, int channels, uint8_t fill)
    : h(height), w(width), c(channels),
      px(static_cast<size_t>(height) * static_cast<size_t>(width) * static_cast<size_t>(channels), fill) {}

LIBREYOLO_INLINE Image resize_bilinear(const Image& src, int h, int w) {
  if (src.empty() || h <= 0 || w <= 0)
    throw Error("resize_bilinear: cannot resize a " + std::to_string(src.h) + "x" + std::to_string(src.w) +
                " image to " + std::to_string(h) + "x" + std::to_string(w) + " (sizes must be > 0)");
  Image dst(h, w, src.c);
  // Per output column: left source index and weight of the right neighbour (shared by all rows).
  std::vector<int> x0(w), x1(w);
  std::vector<float> fx(w);
  const double sx = static_cast<double>(src.w) / w, sy = static_cast<double>(src.h) / h;
  for (int x = 0; x < w; ++x) {
    double p = std::max(0.0, (x + 0.5) * sx - 0.5);
    int i = std::min(static_cast<int>(p), src.w - 1);
    x0[x] = i;
    x1[x] = std::min(i + 1, src.w - 1);
    fx[x] = static_cast<float>(p - i);
  }
  const int c = src.c;
  std::vector<float> top(static_cast<size_t>(w) * c), bot(static_cast<size_t>(w) * c);
  for (int y = 0; y < h; ++y) {
    double p = std::max(0.0, (y + 0.5) * sy - 0.5);
    int y0 = std::min(static_cast<int>(p), src.h - 1);
    int y1 = std::min(y0 + 1, src.h - 1);
    float fy = static_cast<float>(p - y0);
    const uint8_t* r0 = &src.px[static_cast<size_t>(y0) * src.row_bytes()];
    const uint8_t* r1 = &src.px[static_cast<size_t>(y1) * src.row_bytes()];
    uint8_t* out = &dst.px[static_cast<size_t>(y) * dst.row_bytes()];
    for (int x = 0; x < w; ++x) {
      const uint8_t* a0 = r0 + x0[x] * c;
      const uint8_t* a1 = r0 + x1[x] * c;
      const uint8_t* b0 = r1 + x0[x] * c;
      const uint8_t* b1 = r1 + x1[x] * c;
      for (int ch = 0; ch < c; ++ch) {
        float t = a0[ch] + (a1[ch] - a0[ch]) * fx[x];
        float b = b0[ch] + (b1[ch] - b0[ch]) * fx[x];
        float v = t + (b - t) * fy;
        out[x * c + ch] = static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
      }
    }
  }
  return dst;
}

namespace detail {

// One axis of resample_aa: per output pixel, its first image pixel, how many, and their weights (already
// divided by the sum over every canvas pixel the filter covers, fill included).
struct AaTaps {
  std::vector<int> first, count;
  std::vector<float> w;  // n_out x width
  int width = 0;
  int lo = 0, hi = 0;  // the image pixels any output reads: [lo, hi)
};

LIBREYOLO_INLINE AaTaps aa_taps(const ResampleAxis& a, int src_n) {
  if (a.n_out <= 0 || !(a.step > 0) || !std::isfinite(a.origin) || !std::isfinite(a.step))
    throw Error("resample_aa: an axis needs n_out > 0 and a finite step > 0 (got n_out " + std::to_string(a.n_out) +
                ", step " + std::to_string(a.step) + ")");
  const double support = std::max(1.0, a.step);  // the triangle's half-width, in source pixels
  AaTaps t;
  t.width = 2 * static_cast<int>(std::ceil(support)) + 2;
  t.first.assign(static_cast<size_t>(a.n_out), 0);
  t.count.assign(static_cast<size_t>(a.n_out), 0);
  t.w.assign(static_cast<size_t>(a.n_out) * t.width, 0.f);
  t.lo = src_n, t.hi = 0;
  for (int k = 0; k < a.n_out; ++k) {
    const double c = a.origin + (k + 0.5) * a.step;
    const int j0 = static_cast<int>(std::floor(c - support)), j1 = static_cast<int>(std::ceil(c + support));
    double total = 0;
    int first = -1, n = 0;
    float* w = &t.w[static_cast<size_t>(k) * t.width];
    for (int j = j0; j <= j1; ++j) {
      const double centre = j + 0.5;
      if (centre < a.lo || centre >= a.hi) continue;  // not on the canvas
      const double wj = 1.0 - std::abs(centre - c) / support;
      if (wj <= 0) continue;
      total += wj;
      if (j < 0 || j >= src_n) continue;  // the fill: counted, reads 0
      if (first < 0) first = j;
      w[n++] = static_cast<float>(wj);
    }
    if (n == 0 || total <= 0) continue;
    for (int q = 0; q < n; ++q) w[q] = static_cast<float>(w[q] / total);
    t.first[static_cast<size_t>(k)] = first, t.count[static_cast<size_t>(k)] = n;
    t.lo = std::min(t.lo, first), t.hi = std::max(t.hi, first + n);
  }
  return t;
}

}  // namespace detail

LIBREYOLO_INLINE std::vector<float> resample_aa_float(const Image& src, const ResampleAxis& x, const ResampleAxis& y) {
  if (src.empty() || src.c <= 0) throw Error("resample_aa: the source image is empty");
  const detail::AaTaps tx = detail::aa_taps(x, src.w), ty = detail::aa_taps(y, src.h);
  const int c = src.c, W = x.n_out;
  std::vector<float> out(static_cast<size_t>(y.n_out) * W * c, 0.f);
  if (ty.hi <= ty.lo || tx.hi <= tx.lo) return out;  // no image pixel under the output
  // Horizontal pass over the source rows some output row reads, then the vertical pass.
  std::vector<float> rows(static_cast<size_t>(ty.hi - ty.lo) * W * c, 0.f);
  for (int r = ty.lo; r < ty.hi; ++r) {
    const uint8_t* in = &src.px[static_cast<size_t>(r) * src.row_bytes()];
    float* o = &rows[static_cast<size_t>(r - ty.lo) * W * c];
    for (int k = 0; k < W; ++k) {
      const int n = tx.count[static_cast<size_t>(k)];
      const float* w = &tx.w[static_cast<size_t>(k) * tx.width];
      const uint8_t* p = in + static_cast<size_t>(tx.first[static_cast<size_t>(k)]) * c;
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0.f;
        for (int q = 0; q < n; ++q) acc += w[q] * p[q * c + ch];
        o[k * c + ch] = acc;
      }
    }
  }
  const size_t row = static_cast<size_t>(W) * c;
  for (int k = 0; k < y.n_out; ++k) {
    const int n = ty.count[static_cast<size_t>(k)];
    const float* w = &ty.w[static_cast<size_t>(k) * ty.width];
    const float* base = &rows[static_cast<size_t>(ty.first[static_cast<size_t>(k)] - (n ? ty.lo : 0)) * row];
    float* o = &out[static_cast<size_t>(k) * row];
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < row; ++i) o[i] += w[q] * base[q * row + i];
  }
  return out;
}

LIBREYOLO_INLINE Image resample_aa(const Image& src, const ResampleAxis& x, const ResampleAxis& y) {
  const std::vector<float> v = resample_aa_float(src, x, y);
  Image dst(y.n_out, x.n_out, src.c);
  for (size_t i = 0; i < v.size(); ++i) dst.px[i] = static_cast<uint8_t>(std::clamp(v[i] + 0.5f, 0.0f, 255.0f));
  return dst;
}

LIBREYOLO_INLINE Image crop(const Image& src, int y, int x, int h, int w) {
  if (h <= 0 || w <= 0 || y < 0 || x < 0 || y + h > src.h || x + w > src.w)
    throw Error("crop: region y=" + std::to_string(y) + " x=" + std::to_string(x) + " h=" + std::to_string(h) +
                " w=" + std::to_string(w) + " is not inside the " + std::to_string(src.h) + "x" +
                std::to_string(src.w) + " image (need 0 <= y, y+h <= H, 0 <= x, x+w <= W, h, w > 0)");
  Image dst(h, w, src.c);
  const size_t rb = dst.row_bytes();
  for (int r = 0; r < h; ++r)
    std::memcpy(&dst.px[r * rb], &src.px[(static_cast<size_t>(y + r) * src.w + x) * src.c], rb);
  return dst;
}

LIBREYOLO_INLINE void flip_lr(Image& img) {
  const int c = img.c;
  for (int y = 0; y < img.h; ++y) {
    uint8_t* row = &img.px[static_cast<size_t>(y) * img.row_bytes()];
    for (int a = 0, b = img.w - 1; a < b; ++a, --b)
      for (int ch = 0; ch < c; ++ch) std::swap(row[a * c + ch], row[b * c + ch]);
  }
}

LIBREYOLO_INLINE void flip_ud(Image& img) {
  const size_t rb = img.row_bytes();
  std::vector<uint8_t> tmp(rb);
  for (int a = 0, b = img.h - 1; a < b; ++a, --b) {
    std::memcpy(tmp.data(), &img.px[a * rb], rb);
    std::memcpy(&img.px[a * rb], &img.px[b * rb], rb);
    std::memcpy(&img.px[b * rb], tmp.data(), rb);
  }
}

namespace detail {

LIBREYOLO_INLINE std::array<uint8_t, 3> rgb_to_hsv8(int r, int g, int b) {
  int v = std::max({r, g, b}), mn = std::min({r, g, b}), diff = v - mn;
  int s = v == 0 ? 0 : static_cast<int>(std::lround(255.0 * diff / v));
  double h = 0;
  if (diff != 0) {
    if (v == r) h = 30.0 * (g - b) / diff;
    else if (v == g) h = 30.0 * (b - r) / diff + 60.0;
    else h = 30.0 * (r - g) / diff + 120.0;
  }
  int hi = static_cast<int>(std::lround(h));
  if (hi < 0) hi += 180;
  if (hi >= 180) hi -= 180;
  return {static_cast<uint8_t>(hi), static_cast<uint8_t>(s), static_cast<uint8_t>(v)};
}

LIBREYOLO_INLINE std::array<uint8_t, 3> hsv8_to_rgb(int h, int s, int v) {
  double hh = h / 30.0, ss = s / 255.0, vv = v / 255.0;  // hh: sector position in [0, 6)
  int sector = static_cast<int>(std::floor(hh)) % 6;
  double f = hh - std::floor(hh);
  double p = vv * (1 - ss), q = vv * (1 - ss * f), t = vv * (1 - ss * (1 - f));
  double r, g, b;
  switch (sector) {
    case 0: r = vv, g = t, b = p; break;
    case 1: r = q, g = vv, b = p; break;
    case 2: r = p, g = vv, b = t; break;
    case 3: r = p, g = q, b = vv; break;
    case 4: r = t, g = p, b = vv; break;
    default: r = vv, g = p, b = q; break;
  }
  auto u8 = [](double x) { return static_cast<uint8_t>(std::clamp(std::lround(x * 255.0), 0L, 255L)); };
  return {u8(r), u8(g), u8(b)};
}

}  // namespace detail

LIBREYOLO_INLINE void hsv_jitter(Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng) {
  if (h_gain == 0 && s_gain == 0 && v_gain == 0) return;
  if (img.c != 3) throw Error("hsv_jitter: needs a 3-channel RGB image, got " + std::to_string(img.c) + " channels");
  const double rh = uniform(rng, -1, 1) * h_gain + 1;
  const double rs = uniform(rng, -1, 1) * s_gain + 1;
  const double rv = uniform(rng, -1, 1) * v_gain + 1;
  std::array<uint8_t, 256> lut_h{}, lut_s{}, lut_v{};
  for (int x = 0; x < 256; ++x) {
    double hx = std::fmod(x * rh, 180.0);
    if (hx < 0) hx += 180.0;
    lut_h[x] = static_cast<uint8_t>(hx);
    lut_s[x] = static_cast<uint8_t>(std::clamp(x * rs, 0.0, 255.0));
    lut_v[x] = static_cast<uint8_t>(std::clamp(x * rv, 0.0, 255.0));
  }
  for (size_t i = 0; i + 2 < img.px.size(); i += 3) {
    auto hsv = detail::rgb_to_hsv8(img.px[i], img.px[i + 1], img.px[i + 2]);
    auto rgb = detail::hsv8_to_rgb(lut_h[hsv[0]], lut_s[hsv[1]], lut_v[hsv[2]]);
    img.px[i] = rgb[0], img.px[i + 1] = rgb[1], img.px[i + 2] = rgb[2];
  }
}

LIBREYOLO_INLINE torch::Tensor to_chw_tensor(const Image& img) {
  if (img.c != 3 || img.empty())
    throw Error("to_chw_tensor: needs a non-empty 3-channel image, got " + std::to_string(img.h) + "x" +
                std::to_string(img.w) + "x" + std::to_string(img.c));
  auto hwc = torch::from_blob(const_cast<uint8_t*>(img.px.data()), {img.h, img.w, 3}, torch::kUInt8);
  return hwc.permute({2, 0, 1}).contiguous();
}

}  // namespace libreyolo::data
