#pragma once
// Definitions of augment.hpp (core/api.hpp): included by augment.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/augment.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE void paste(Image& dst, const Image& src, int y, int x) {
  const int ya = std::max(0, y), yb = std::min(dst.h, y + src.h);
  const int xa = std::max(0, x), xb = std::min(dst.w, x + src.w);
  if (ya >= yb || xa >= xb) return;
  const size_t bytes = static_cast<size_t>(xb - xa) * dst.c;
  for (int r = ya; r < yb; ++r)
    std::memcpy(&dst.px[(static_cast<size_t>(r) * dst.w + xa) * dst.c],
                &src.px[(static_cast<size_t>(r - y) * src.w + (xa - x)) * src.c], bytes);
}

LIBREYOLO_INLINE torch::Tensor unletterbox(const torch::Tensor& boxes, std::array<int64_t, 2> from_hw, std::array<int64_t, 2> to_hw,
                                           double ratio, std::array<double, 2> pad_xy) {
  return unletterbox(boxes, from_hw, to_hw, std::array<double, 2>{ratio, ratio}, pad_xy);
}

LIBREYOLO_INLINE torch::Tensor unletterbox(const torch::Tensor& boxes, std::array<int64_t, 2> from_hw, std::array<int64_t, 2> to_hw,
                                           std::array<double, 2> ratio_xy, std::array<double, 2> pad_xy) {
  if (ratio_xy[0] <= 0 || ratio_xy[1] <= 0)
    throw ConfigError("unletterbox: ratio must be > 0, got " + std::to_string(ratio_xy[0]) + " x " + std::to_string(ratio_xy[1]));
  if (from_hw[0] <= 0 || from_hw[1] <= 0 || to_hw[0] <= 0 || to_hw[1] <= 0)
    throw ConfigError("unletterbox: image shapes must be positive");
  auto out = boxes.clone();
  auto xs = torch::tensor({0, 2}, torch::kInt64).to(boxes.device());
  auto ys = torch::tensor({1, 3}, torch::kInt64).to(boxes.device());
  out.index_copy_(-1, xs, ((out.index_select(-1, xs) - pad_xy[0]) / ratio_xy[0]).clamp(0, static_cast<double>(to_hw[1])));
  out.index_copy_(-1, ys, ((out.index_select(-1, ys) - pad_xy[1]) / ratio_xy[1]).clamp(0, static_cast<double>(to_hw[0])));
  return out;
}

LIBREYOLO_INLINE Image letterbox(const Image& img, int out_h, int out_w, DetBoxes& boxes, LetterboxInfo* info,
                                 bool scaleup, LetterboxPlace place, int fit) {
  if (fit > std::min(out_h, out_w))
    throw ConfigError("letterbox: fit " + std::to_string(fit) + " exceeds the " + std::to_string(out_h) + " x " +
                      std::to_string(out_w) + " canvas");
  const int fh = fit > 0 ? fit : out_h, fw = fit > 0 ? fit : out_w;
  double r = std::min(static_cast<double>(fh) / img.h, static_cast<double>(fw) / img.w);
  if (!scaleup) r = std::min(r, 1.0);
  const bool corner = place == LetterboxPlace::top_left;
  auto side = [&](int n) { return corner ? static_cast<int>(n * r) : static_cast<int>(std::lround(n * r)); };
  const int w = std::clamp(side(img.w), 1, out_w), h = std::clamp(side(img.h), 1, out_h);
  const int left = corner ? 0 : (out_w - w) / 2, top = corner ? 0 : (out_h - h) / 2;
  Image out(out_h, out_w, img.c, kLetterboxFill);
  if (h == img.h && w == img.w) paste(out, img, top, left);
  else paste(out, resize_bilinear(img, h, w), top, left);
  // The scale boxes move by (and that maps them back): the resized size over the image's, per axis; the
  // originals' top-left preproc scales (and maps back) by r itself.
  const double scale_x = corner ? r : static_cast<double>(w) / img.w, scale_y = corner ? r : static_cast<double>(h) / img.h;
  const float sx = static_cast<float>(scale_x), sy = static_cast<float>(scale_y);
  for (auto& b : boxes) {
    b.x1 = b.x1 * sx + left, b.x2 = b.x2 * sx + left;
    b.y1 = b.y1 * sy + top, b.y2 = b.y2 * sy + top;
  }
  if (info) *info = {scale_x, scale_y, left, top};
  return out;
}

LIBREYOLO_INLINE Image stretch_resize(const Image& img, int out_h, int out_w, DetBoxes& boxes, LetterboxInfo* info) {
  if (out_h <= 0 || out_w <= 0) throw ConfigError("stretch_resize: the output size must be positive, got " +
                                                  std::to_string(out_h) + " x " + std::to_string(out_w));
  const float sx = static_cast<float>(out_w) / img.w, sy = static_cast<float>(out_h) / img.h;
  for (auto& b : boxes) {
    b.x1 *= sx, b.x2 *= sx;
    b.y1 *= sy, b.y2 *= sy;
  }
  if (info) *info = {static_cast<double>(out_w) / img.w, static_cast<double>(out_h) / img.h, 0, 0};
  return (img.h == out_h && img.w == out_w) ? img : resize_bilinear(img, out_h, out_w);
}

LIBREYOLO_INLINE Mat3 mat_mul(const Mat3& a, const Mat3& b) {
  Mat3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
  return c;
}

LIBREYOLO_INLINE Mat3 mat_inverse(const Mat3& m) {
  const double a = m[0], b = m[1], c = m[2], d = m[3], e = m[4], f = m[5], g = m[6], h = m[7], i = m[8];
  const double A = e * i - f * h, B = -(d * i - f * g), C = d * h - e * g;
  const double det = a * A + b * B + c * C;
  if (std::abs(det) < 1e-12) throw Error("mat_inverse: the transform is singular (determinant " + std::to_string(det) + ")");
  const double k = 1.0 / det;
  return {A * k, -(b * i - c * h) * k, (b * f - c * e) * k, B * k, (a * i - c * g) * k, -(a * f - c * d) * k,
          C * k, -(a * h - b * g) * k, (a * e - b * d) * k};
}

LIBREYOLO_INLINE Mat3 random_affine_matrix(int in_h, int in_w, int out_h, int out_w, const AffineParams& p, double extra_scale,
                                           std::mt19937_64& rng, double* box_scale) {
  Mat3 C = kIdentity3, P = kIdentity3, R = kIdentity3, S = kIdentity3, T = kIdentity3;
  C[2] = -in_w / 2.0, C[5] = -in_h / 2.0;
  P[6] = uniform(rng, -p.perspective, p.perspective), P[7] = uniform(rng, -p.perspective, p.perspective);
  const double a = uniform(rng, -p.degrees, p.degrees) * std::numbers::pi / 180;
  const double s = uniform(rng, 1 - p.scale, 1 + p.scale) * extra_scale;
  // OpenCV's getRotationMatrix2D: positive angles turn counter-clockwise as displayed (y down).
  R[0] = s * std::cos(a), R[1] = s * std::sin(a), R[3] = -s * std::sin(a), R[4] = s * std::cos(a);
  S[1] = std::tan(uniform(rng, -p.shear, p.shear) * std::numbers::pi / 180);
  S[3] = std::tan(uniform(rng, -p.shear, p.shear) * std::numbers::pi / 180);
  T[2] = uniform(rng, 0.5 - p.translate, 0.5 + p.translate) * out_w;
  T[5] = uniform(rng, 0.5 - p.translate, 0.5 + p.translate) * out_h;
  if (box_scale) *box_scale = s;
  return mat_mul(T, mat_mul(S, mat_mul(R, mat_mul(P, C))));
}

namespace detail {

LIBREYOLO_INLINE int floor_int(float v) {
  const int i = static_cast<int>(v);
  return v < static_cast<float>(i) ? i - 1 : i;
}

LIBREYOLO_INLINE void sample_bilinear(const Image& src, float u, float v, uint8_t fill, uint8_t* out) {
  const int x0 = floor_int(u), y0 = floor_int(v);
  if (x0 < -1 || y0 < -1 || x0 >= src.w || y0 >= src.h) {
    out[0] = out[1] = out[2] = fill;
    return;
  }
  const int wx = static_cast<int>((u - x0) * 2048.f), wy = static_cast<int>((v - y0) * 2048.f);
  const int w00 = (2048 - wx) * (2048 - wy), w01 = wx * (2048 - wy), w10 = (2048 - wx) * wy, w11 = wx * wy;
  const size_t stride = src.row_bytes();
  if (x0 >= 0 && y0 >= 0 && x0 + 1 < src.w && y0 + 1 < src.h) {
    const uint8_t* p = &src.px[static_cast<size_t>(y0) * stride + static_cast<size_t>(x0) * 3];
    for (int ch = 0; ch < 3; ++ch)
      out[ch] = static_cast<uint8_t>((p[ch] * w00 + p[3 + ch] * w01 + p[stride + ch] * w10 + p[stride + 3 + ch] * w11 +
                                      (1 << 21)) >> 22);
    return;
  }
  auto px = [&](int y, int x, int ch) -> int {
    return (x < 0 || y < 0 || x >= src.w || y >= src.h) ? fill : src.px[static_cast<size_t>(y) * stride + x * 3 + ch];
  };
  for (int ch = 0; ch < 3; ++ch)
    out[ch] = static_cast<uint8_t>((px(y0, x0, ch) * w00 + px(y0, x0 + 1, ch) * w01 + px(y0 + 1, x0, ch) * w10 +
                                    px(y0 + 1, x0 + 1, ch) * w11 + (1 << 21)) >> 22);
}

}  // namespace detail

LIBREYOLO_INLINE Image warp_image(const Image& src, const Mat3& M, int out_h, int out_w, uint8_t fill) {
  if (src.c != 3) throw Error("warp_image: needs an RGB image, got " + std::to_string(src.c) + " channels");
  const Mat3 inv = mat_inverse(M);
  Image out(out_h, out_w, 3);
  const bool affine = inv[6] == 0 && inv[7] == 0;
  for (int y = 0; y < out_h; ++y) {
    uint8_t* row = &out.px[static_cast<size_t>(y) * out.row_bytes()];
    const double yc = y + 0.5;
    if (affine) {  // source point moves by (inv[0], inv[3]) per output column
      const double k = 1.0 / inv[8];
      const float du = static_cast<float>(inv[0] * k), dv = static_cast<float>(inv[3] * k);
      const float u0 = static_cast<float>((inv[0] * 0.5 + inv[1] * yc + inv[2]) * k - 0.5);
      const float v0 = static_cast<float>((inv[3] * 0.5 + inv[4] * yc + inv[5]) * k - 0.5);
      for (int x = 0; x < out_w; ++x)  // u0 + x * du, not a running sum: no drift along the row
        detail::sample_bilinear(src, u0 + x * du, v0 + x * dv, fill, row + 3 * x);
    } else {
      for (int x = 0; x < out_w; ++x) {
        const double xc = x + 0.5, z = inv[6] * xc + inv[7] * yc + inv[8];
        const float u = static_cast<float>((inv[0] * xc + inv[1] * yc + inv[2]) / z - 0.5);
        const float v = static_cast<float>((inv[3] * xc + inv[4] * yc + inv[5]) / z - 0.5);
        detail::sample_bilinear(src, u, v, fill, row + 3 * x);
      }
    }
  }
  return out;
}

namespace detail {

LIBREYOLO_INLINE void sample_bilinear_clamped(const Image& src, float u, float v, uint8_t* out) {
  int x0 = floor_int(u), y0 = floor_int(v);
  int wx = static_cast<int>((u - x0) * 2048.f), wy = static_cast<int>((v - y0) * 2048.f);
  int x1 = x0 + 1, y1 = y0 + 1;
  if (x0 < 0 || y0 < 0 || x1 >= src.w || y1 >= src.h) {
    x0 = std::clamp(x0, 0, src.w - 1), x1 = std::clamp(x1, 0, src.w - 1);
    y0 = std::clamp(y0, 0, src.h - 1), y1 = std::clamp(y1, 0, src.h - 1);
  }
  const size_t stride = src.row_bytes();
  const uint8_t* a = &src.px[static_cast<size_t>(y0) * stride + static_cast<size_t>(x0) * 3];
  const uint8_t* b = &src.px[static_cast<size_t>(y0) * stride + static_cast<size_t>(x1) * 3];
  const uint8_t* c = &src.px[static_cast<size_t>(y1) * stride + static_cast<size_t>(x0) * 3];
  const uint8_t* d = &src.px[static_cast<size_t>(y1) * stride + static_cast<size_t>(x1) * 3];
  const int w00 = (2048 - wx) * (2048 - wy), w01 = wx * (2048 - wy), w10 = (2048 - wx) * wy, w11 = wx * wy;
  for (int ch = 0; ch < 3; ++ch)
    out[ch] = static_cast<uint8_t>((a[ch] * w00 + b[ch] * w01 + c[ch] * w10 + d[ch] * w11 + (1 << 21)) >> 22);
}

LIBREYOLO_INLINE void warp_tiles_generic(const std::vector<WarpTile>& tiles, const Mat3& inv, Image& out, uint8_t fill) {
  size_t last = 0;  // neighbouring pixels usually come from the same tile
  for (int y = 0; y < out.h; ++y) {
    uint8_t* row = &out.px[static_cast<size_t>(y) * out.row_bytes()];
    const double yc = y + 0.5;
    for (int x = 0; x < out.w; ++x) {
      const double xc = x + 0.5, z = inv[6] * xc + inv[7] * yc + inv[8];
      const float u = static_cast<float>((inv[0] * xc + inv[1] * yc + inv[2]) / z);
      const float v = static_cast<float>((inv[3] * xc + inv[4] * yc + inv[5]) / z);
      const WarpTile* t = &tiles[last];
      if (!(u >= t->rx0 && u < t->rx1 && v >= t->ry0 && v < t->ry1)) {
        t = nullptr;
        for (size_t j = 0; j < tiles.size() && !t; ++j)
          if (u >= tiles[j].rx0 && u < tiles[j].rx1 && v >= tiles[j].ry0 && v < tiles[j].ry1) t = &tiles[j], last = j;
        if (!t) {
          row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = fill;
          continue;
        }
      }
      sample_bilinear_clamped(*t->img, (u - t->ox) * t->sx - 0.5f, (v - t->oy) * t->sy - 0.5f, row + 3 * x);
    }
  }
}

LIBREYOLO_INLINE std::pair<int, int> row_interval(double f0, double df, double lo, double hi, int n) {
  if (std::abs(df) < 1e-12) return (f0 >= lo && f0 < hi) ? std::pair{0, n} : std::pair{0, 0};
  double a = (lo - f0) / df, b = (hi - f0) / df;
  if (df < 0) std::swap(a, b);
  const int ia = static_cast<int>(std::clamp(std::ceil(a - 1e-9), 0.0, double(n)));
  const int ib = static_cast<int>(std::clamp(std::ceil(b - 1e-9), 0.0, double(n)));
  return {ia, std::max(ia, ib)};
}

}  // namespace detail

LIBREYOLO_INLINE Image warp_tiles(const std::vector<WarpTile>& tiles, const Mat3& M, int out_h, int out_w,
                                  uint8_t fill) {
  for (const auto& t : tiles)
    if (!t.img || t.img->c != 3 || t.img->empty()) throw Error("warp_tiles: every tile needs a non-empty RGB image");
  const Mat3 inv = mat_inverse(M);
  Image out(out_h, out_w, 3, fill);
  if (tiles.empty()) return out;
  if (inv[6] != 0 || inv[7] != 0) {
    detail::warp_tiles_generic(tiles, inv, out, fill);
    return out;
  }
  const double k = 1.0 / inv[8];
  const double du = inv[0] * k, dv = inv[3] * k;
  for (int y = 0; y < out_h; ++y) {
    uint8_t* row = &out.px[static_cast<size_t>(y) * out.row_bytes()];
    const double yc = y + 0.5;
    const double u0 = (inv[0] * 0.5 + inv[1] * yc + inv[2]) * k, v0 = (inv[3] * 0.5 + inv[4] * yc + inv[5]) * k;
    for (const auto& t : tiles) {
      const auto [ua, ub] = detail::row_interval(u0, du, t.rx0, t.rx1, out_w);
      const auto [va, vb] = detail::row_interval(v0, dv, t.ry0, t.ry1, out_w);
      const int a = std::max(ua, va), b = std::min(ub, vb);
      if (a >= b) continue;
      const Image& src = *t.img;
      // Tile pixel coordinates along the row: tx = tx0 + x dtx (sample positions, centres at .0).
      const double tx0 = (u0 - t.ox) * t.sx - 0.5, dtx = du * t.sx, ty0 = (v0 - t.oy) * t.sy - 0.5, dty = dv * t.sy;
      const auto [ia, ib] = detail::row_interval(tx0, dtx, 0, src.w - 1, out_w);
      const auto [ja, jb] = detail::row_interval(ty0, dty, 0, src.h - 1, out_w);
      const int fa = std::clamp(std::max(ia, ja), a, b), fb = std::clamp(std::min(ib, jb), fa, b);
      for (int x = a; x < fa; ++x)
        detail::sample_bilinear_clamped(src, float(tx0 + x * dtx), float(ty0 + x * dty), row + 3 * x);
      int64_t TX = std::llround((tx0 + fa * dtx) * 65536.0), TY = std::llround((ty0 + fa * dty) * 65536.0);
      const int64_t DX = std::llround(dtx * 65536.0), DY = std::llround(dty * 65536.0);
      const size_t stride = src.row_bytes();
      const uint8_t* base = src.px.data();
      for (int x = fa; x < fb; ++x, TX += DX, TY += DY) {
        const int64_t cx = std::clamp<int64_t>(TX, 0, (int64_t(src.w - 1) << 16) - 1);  // rounding guard
        const int64_t cy = std::clamp<int64_t>(TY, 0, (int64_t(src.h - 1) << 16) - 1);
        const int wx = static_cast<int>((cx >> 5) & 2047), wy = static_cast<int>((cy >> 5) & 2047);
        const uint8_t* p = base + static_cast<size_t>(cy >> 16) * stride + static_cast<size_t>(cx >> 16) * 3;
        const int w00 = (2048 - wx) * (2048 - wy), w01 = wx * (2048 - wy), w10 = (2048 - wx) * wy, w11 = wx * wy;
        uint8_t* o = row + 3 * x;
        for (int ch = 0; ch < 3; ++ch)
          o[ch] = static_cast<uint8_t>((p[ch] * w00 + p[3 + ch] * w01 + p[stride + ch] * w10 + p[stride + 3 + ch] * w11 +
                                        (1 << 21)) >> 22);
      }
      for (int x = fb; x < b; ++x)
        detail::sample_bilinear_clamped(src, float(tx0 + x * dtx), float(ty0 + x * dty), row + 3 * x);
    }
  }
  return out;
}

LIBREYOLO_INLINE bool box_candidate(const DetBox& before, double scale, const DetBox& after, double wh_thr,
                                    double ar_thr, double area_thr) {
  const double w1 = (before.x2 - before.x1) * scale, h1 = (before.y2 - before.y1) * scale;
  const double w2 = after.x2 - after.x1, h2 = after.y2 - after.y1;
  const double ar = std::max(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16));
  return w2 > wh_thr && h2 > wh_thr && w2 * h2 / (w1 * h1 + 1e-16) > area_thr && ar < ar_thr;
}

LIBREYOLO_INLINE DetBoxes warp_boxes(const DetBoxes& boxes, const Mat3& M, int out_h, int out_w, double scale) {
  DetBoxes out;
  out.reserve(boxes.size());
  for (const auto& b : boxes) {
    const double xs[4] = {b.x1, b.x2, b.x2, b.x1}, ys[4] = {b.y1, b.y1, b.y2, b.y2};
    double x_lo = 1e30, x_hi = -1e30, y_lo = 1e30, y_hi = -1e30;
    for (int k = 0; k < 4; ++k) {
      const double z = M[6] * xs[k] + M[7] * ys[k] + M[8];
      const double x = (M[0] * xs[k] + M[1] * ys[k] + M[2]) / z, y = (M[3] * xs[k] + M[4] * ys[k] + M[5]) / z;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
    DetBox a{b.cls, static_cast<float>(std::clamp(x_lo, 0.0, double(out_w))), static_cast<float>(std::clamp(y_lo, 0.0, double(out_h))),
             static_cast<float>(std::clamp(x_hi, 0.0, double(out_w))), static_cast<float>(std::clamp(y_hi, 0.0, double(out_h)))};
    if (box_candidate(b, scale, a)) out.push_back(a);
  }
  return out;
}

LIBREYOLO_INLINE bool is_identity(const Mat3& M) {
  for (int k = 0; k < 9; ++k)
    if (std::abs(M[k] - kIdentity3[k]) > 1e-12) return false;
  return true;
}

LIBREYOLO_INLINE Image random_perspective(const Image& img, DetBoxes& boxes, int out_h, int out_w, const AffineParams& p,
                                          double extra_scale, std::mt19937_64& rng) {
  double s = 1;
  const Mat3 M = random_affine_matrix(img.h, img.w, out_h, out_w, p, extra_scale, rng, &s);
  if (out_h == img.h && out_w == img.w && is_identity(M)) return img;
  boxes = warp_boxes(boxes, M, out_h, out_w, s);
  return warp_image(img, M, out_h, out_w);
}

LIBREYOLO_INLINE Image mosaic4(const std::array<const Image*, 4>& tiles, const std::array<const DetBoxes*, 4>& tile_boxes, int S,
                               int xc, int yc, DetBoxes& out_boxes) {
  const int S2 = 2 * S;
  Image canvas(S2, S2, 3, kLetterboxFill);
  out_boxes.clear();
  for (int i = 0; i < 4; ++i) {
    const Image& t = *tiles[i];
    const int x = (i == 0 || i == 2) ? xc - t.w : xc;  // left column ends at xc, right starts there
    const int y = (i == 0 || i == 1) ? yc - t.h : yc;
    paste(canvas, t, y, x);
    for (const auto& b : *tile_boxes[i]) {
      DetBox m{b.cls, std::clamp(b.x1 + x, 0.f, float(S2)), std::clamp(b.y1 + y, 0.f, float(S2)),
               std::clamp(b.x2 + x, 0.f, float(S2)), std::clamp(b.y2 + y, 0.f, float(S2))};
      if (m.x2 > m.x1 && m.y2 > m.y1) out_boxes.push_back(m);
    }
  }
  return canvas;
}

namespace detail {

LIBREYOLO_INLINE HsvTables::HsvTables() {
  for (int i = 1; i < 256; ++i) {
    sdiv[i] = static_cast<int>(std::lround((255 << 12) / static_cast<double>(i)));
    hdiv[i] = static_cast<int>(std::lround((180 << 12) / (6.0 * i)));
  }
}

LIBREYOLO_INLINE const HsvTables& hsv_tables() {
  static const HsvTables t;
  return t;
}

LIBREYOLO_INLINE HsvJitterLut hsv_jitter_lut(double rh, double rs, double rv) {
  HsvJitterLut L;
  for (int x = 0; x < 256; ++x) {
    L.s[x] = static_cast<uint8_t>(std::clamp(x * rs, 0.0, 255.0));
    L.v[x] = static_cast<uint8_t>(std::clamp(x * rv, 0.0, 255.0));
  }
  for (int x = 0; x < 180; ++x) {
    double hx = std::fmod(x * rh, 180.0);
    const int h = static_cast<int>(hx < 0 ? hx + 180.0 : hx);
    L.sector[x] = static_cast<uint8_t>(h / 30), L.f30[x] = static_cast<uint8_t>(h % 30);
  }
  return L;
}

LIBREYOLO_INLINE void hsv_jitter_pixel(const HsvJitterLut& L, const HsvTables& tb, int r, int g, int b, uint8_t& R, uint8_t& G,
                                       uint8_t& B) {
  static constexpr uint8_t perm[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
  const int v = std::max(std::max(r, g), b), diff = v - std::min(std::min(r, g), b);
  const int s = (diff * tb.sdiv[v] + (1 << 11)) >> 12;
  const int h_r = g - b, h_g = b - r + 2 * diff, h_b = r - g + 4 * diff;
  int h = v == r ? h_r : (v == g ? h_g : h_b);
  h = (h * tb.hdiv[diff] + (1 << 11)) >> 12;
  h += h < 0 ? 180 : 0;
  h -= h >= 180 ? 180 : 0;
  const unsigned vv = L.v[v], ss = L.s[s], f = L.f30[h];  // unsigned: cheaper constant divisions
  const unsigned vals[4] = {vv, (vv * (255 - ss) + 127) / 255,      // v, p = v (1 - s)
                            (vv * (7650 - ss * f) + 3825) / 7650,   // q = v (1 - s f)
                            (vv * (7650 - ss * (30 - f)) + 3825) / 7650};  // t = v (1 - s (1 - f))
  const uint8_t* pm = perm[L.sector[h]];
  R = static_cast<uint8_t>(vals[pm[0]]), G = static_cast<uint8_t>(vals[pm[1]]), B = static_cast<uint8_t>(vals[pm[2]]);
}

LIBREYOLO_INLINE HsvJitterLut hsv_add_lut(int dh, int ds, int dv) {
  HsvJitterLut L;
  for (int x = 0; x < 256; ++x) {
    L.s[x] = static_cast<uint8_t>(std::clamp(x + ds, 0, 255));
    L.v[x] = static_cast<uint8_t>(std::clamp(x + dv, 0, 255));
  }
  for (int x = 0; x < 180; ++x) {
    const int h = ((x + dh) % 180 + 180) % 180;
    L.sector[x] = static_cast<uint8_t>(h / 30), L.f30[x] = static_cast<uint8_t>(h % 30);
  }
  return L;
}

LIBREYOLO_INLINE HsvJitterLut draw_hsv_add(double h_gain, double s_gain, double v_gain, std::mt19937_64& rng) {
  double d[3] = {uniform(rng, -1, 1) * h_gain, uniform(rng, -1, 1) * s_gain, uniform(rng, -1, 1) * v_gain};
  for (double& x : d)
    if (!bernoulli(rng, 0.5)) x = 0;
  return hsv_add_lut(static_cast<int>(d[0]), static_cast<int>(d[1]), static_cast<int>(d[2]));
}

LIBREYOLO_INLINE HsvJitterLut draw_hsv_jitter(double h_gain, double s_gain, double v_gain, std::mt19937_64& rng) {
  const double rh = uniform(rng, -1, 1) * h_gain + 1, rs = uniform(rng, -1, 1) * s_gain + 1;
  const double rv = uniform(rng, -1, 1) * v_gain + 1;
  return hsv_jitter_lut(rh, rs, rv);
}

}  // namespace detail

LIBREYOLO_INLINE void hsv_augment(Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng) {
  if (h_gain == 0 && s_gain == 0 && v_gain == 0) return;
  if (img.c != 3) throw Error("hsv_augment: needs a 3-channel RGB image, got " + std::to_string(img.c) + " channels");
  const auto L = detail::draw_hsv_jitter(h_gain, s_gain, v_gain, rng);
  const auto& tb = detail::hsv_tables();
  uint8_t* p = img.px.data();
  for (size_t i = 0, n = img.px.size() / 3; i < n; ++i, p += 3) detail::hsv_jitter_pixel(L, tb, p[0], p[1], p[2], p[0], p[1], p[2]);
}

LIBREYOLO_INLINE torch::Tensor hsv_lut_chw(const Image& img, const detail::HsvJitterLut& L) {
  if (img.c != 3) throw Error("hsv_lut_chw: needs a 3-channel RGB image, got " + std::to_string(img.c) + " channels");
  const auto& tb = detail::hsv_tables();
  torch::Tensor out = torch::empty({3, img.h, img.w}, torch::kUInt8);
  const size_t n = static_cast<size_t>(img.h) * img.w;
  uint8_t *r = out.data_ptr<uint8_t>(), *g = r + n, *b = g + n;
  const uint8_t* p = img.px.data();
  for (size_t i = 0; i < n; ++i, p += 3) detail::hsv_jitter_pixel(L, tb, p[0], p[1], p[2], r[i], g[i], b[i]);
  return out;
}

LIBREYOLO_INLINE torch::Tensor hsv_add_chw(const Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng) {
  if (h_gain == 0 && s_gain == 0 && v_gain == 0) return to_chw_tensor(img);
  return hsv_lut_chw(img, detail::draw_hsv_add(h_gain, s_gain, v_gain, rng));
}

LIBREYOLO_INLINE torch::Tensor hsv_augment_chw(const Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng) {
  if (h_gain == 0 && s_gain == 0 && v_gain == 0) return to_chw_tensor(img);
  if (img.c != 3) throw Error("hsv_augment_chw: needs a 3-channel RGB image, got " + std::to_string(img.c) + " channels");
  return hsv_lut_chw(img, detail::draw_hsv_jitter(h_gain, s_gain, v_gain, rng));
}

LIBREYOLO_INLINE void flip_boxes_lr(DetBoxes& boxes, float width) {
  for (auto& b : boxes) {
    const float x1 = width - b.x2, x2 = width - b.x1;
    b.x1 = x1, b.x2 = x2;
  }
}

LIBREYOLO_INLINE void flip_boxes_ud(DetBoxes& boxes, float height) {
  for (auto& b : boxes) {
    const float y1 = height - b.y2, y2 = height - b.y1;
    b.y1 = y1, b.y2 = y2;
  }
}

LIBREYOLO_INLINE double gamma_draw(double k, std::mt19937_64& rng) {
  const double d = k - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    const double u1 = 1 - uniform01(rng), u2 = uniform01(rng);
    const double x = std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
    const double v = std::pow(1 + c * x, 3);
    if (v <= 0) continue;
    const double u = 1 - uniform01(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

LIBREYOLO_INLINE double beta_draw(double a, double b, std::mt19937_64& rng) {
  const double x = gamma_draw(a, rng), y = gamma_draw(b, rng);
  return x / (x + y);
}

LIBREYOLO_INLINE void blend_into(Image& a, const Image& b, double r) {
  if (a.h != b.h || a.w != b.w || a.c != b.c)
    throw Error("blend_into: image sizes differ (" + std::to_string(a.h) + "x" + std::to_string(a.w) + " vs " +
                std::to_string(b.h) + "x" + std::to_string(b.w) + ")");
  const float fr = static_cast<float>(r), fq = 1 - fr;
  for (size_t i = 0; i < a.px.size(); ++i) a.px[i] = static_cast<uint8_t>(a.px[i] * fr + b.px[i] * fq);
}

}  // namespace libreyolo::data
