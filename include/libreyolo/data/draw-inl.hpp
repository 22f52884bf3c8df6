#pragma once
// Definitions of draw.hpp (core/api.hpp): included by draw.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/draw.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE void PixelBox::include(int x, int y) {
  if (empty()) {
    x0 = x, y0 = y, x1 = x + 1, y1 = y + 1;
    return;
  }
  x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x + 1), y1 = std::max(y1, y + 1);
}

LIBREYOLO_INLINE void PixelBox::include(const PixelBox& o) {
  if (o.empty()) return;
  include(o.x0, o.y0);
  include(o.x1 - 1, o.y1 - 1);
}

LIBREYOLO_INLINE Rgb Texture::at(double x, double y) const {
  const double dx = x - ox, dy = y - oy, c = std::cos(angle), s = std::sin(angle);
  const double u = dx * c + dy * s, v = -dx * s + dy * c;
  const double p = std::max(period, 1.0);
  switch (kind) {
    case TextureKind::solid: return a;
    case TextureKind::stripes: return parity(std::floor(2 * u / p)) ? b : a;
    case TextureKind::checker: return parity(std::floor(2 * u / p) + std::floor(2 * v / p)) ? b : a;
    case TextureKind::dots: {
      const double cu = u - p * (std::floor(u / p) + 0.5), cv = v - p * (std::floor(v / p) + 0.5);
      return cu * cu + cv * cv < 0.09 * p * p ? b : a;
    }
    case TextureKind::noise: {
      const double cell = std::max(1.0, p / 4);
      const auto ix = static_cast<uint64_t>(static_cast<int64_t>(std::floor(u / cell)));
      const auto iy = static_cast<uint64_t>(static_cast<int64_t>(std::floor(v / cell)));
      return lerp((mix64(seed ^ mix64(ix ^ (iy << 32 | iy >> 32))) >> 11) * 0x1.0p-53);
    }
    case TextureKind::gradient: return lerp(std::clamp(u / std::max(extent, 1.0) + 0.5, 0.0, 1.0));
    case TextureKind::rings: return parity(std::floor(2 * std::hypot(u, v) / p)) ? b : a;
    case TextureKind::grid: {  // lines of colour b, a quarter period wide, every period along u and v
      const double fu = u / p - std::floor(u / p), fv = v / p - std::floor(v / p);
      return fu < 0.25 || fv < 0.25 ? b : a;
    }
  }
  return a;
}

LIBREYOLO_INLINE Rgb Texture::lerp(double t) const {
  auto ch = [t](uint8_t p, uint8_t q) { return static_cast<uint8_t>(std::lround(p + (q - p) * t)); };
  return {ch(a.r, b.r), ch(a.g, b.g), ch(a.b, b.b)};
}

LIBREYOLO_INLINE void put_pixel(Image& img, int x, int y, Rgb c) {
  uint8_t* p = &img.px[(static_cast<size_t>(y) * img.w + x) * img.c];
  p[0] = c.r;
  if (img.c >= 3) p[1] = c.g, p[2] = c.b;
}

LIBREYOLO_INLINE PixelBox fill_polygon(Image& img, const std::vector<PointF>& pts, const Texture& tex) {
  PixelBox box;
  if (pts.size() < 3) return box;
  double ymin = pts[0].y, ymax = pts[0].y;
  for (const auto& p : pts) ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
  const int ya = std::max(0, static_cast<int>(std::floor(ymin))), yb = std::min(img.h, static_cast<int>(std::ceil(ymax)));
  std::vector<double> xs;
  for (int y = ya; y < yb; ++y) {
    const double yc = y + 0.5;
    xs.clear();
    for (size_t i = 0, j = pts.size() - 1; i < pts.size(); j = i++) {
      const PointF& p = pts[i];
      const PointF& q = pts[j];
      if ((p.y <= yc) != (q.y <= yc)) xs.push_back(p.x + (yc - p.y) * (q.x - p.x) / (q.y - p.y));
    }
    std::sort(xs.begin(), xs.end());
    for (size_t k = 0; k + 1 < xs.size(); k += 2) {
      // pixel x is inside when its centre x + 0.5 lies in [xs[k], xs[k+1])
      const int xa = std::max(0, static_cast<int>(std::ceil(xs[k] - 0.5)));
      const int xb = std::min(img.w, static_cast<int>(std::ceil(xs[k + 1] - 0.5)));
      for (int x = xa; x < xb; ++x) {
        put_pixel(img, x, y, tex.at(x + 0.5, yc));
        box.include(x, y);
      }
    }
  }
  return box;
}

LIBREYOLO_INLINE PixelBox fill_rect(Image& img, double x0, double y0, double x1, double y1, const Texture& tex) {
  return fill_polygon(img, {{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}}, tex);
}

LIBREYOLO_INLINE PixelBox fill_ellipse(Image& img, double cx, double cy, double rx, double ry, double angle, const Texture& tex) {
  const double c = std::cos(angle), s = std::sin(angle), r = std::max(rx, ry);
  auto inside = [&](double x, double y) {
    const double u = ((x - cx) * c + (y - cy) * s) / rx, v = (-(x - cx) * s + (y - cy) * c) / ry;
    return u * u + v * v <= 1.0;
  };
  return fill_where(img, cx - r, cy - r, cx + r, cy + r, inside, tex);
}

LIBREYOLO_INLINE PixelBox fill_circle(Image& img, double cx, double cy, double radius, const Texture& tex) {
  return fill_ellipse(img, cx, cy, radius, radius, 0.0, tex);
}

LIBREYOLO_INLINE PixelBox fill_ring(Image& img, double cx, double cy, double r_outer, double r_inner, const Texture& tex) {
  auto inside = [&](double x, double y) {
    const double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
    return d2 <= r_outer * r_outer && d2 >= r_inner * r_inner;
  };
  return fill_where(img, cx - r_outer, cy - r_outer, cx + r_outer, cy + r_outer, inside, tex);
}

LIBREYOLO_INLINE std::vector<PointF> regular_polygon(double cx, double cy, double r, int n, double angle) {
  std::vector<PointF> pts;
  for (int i = 0; i < n; ++i) {
    const double t = angle + 2 * std::numbers::pi * i / n;
    pts.push_back({cx + r * std::cos(t), cy + r * std::sin(t)});
  }
  return pts;
}

LIBREYOLO_INLINE std::vector<PointF> star_polygon(double cx, double cy, double r_outer, double r_inner, int points, double angle) {
  std::vector<PointF> pts;
  for (int i = 0; i < 2 * points; ++i) {
    const double t = angle + std::numbers::pi * i / points, r = i % 2 ? r_inner : r_outer;
    pts.push_back({cx + r * std::cos(t), cy + r * std::sin(t)});
  }
  return pts;
}

LIBREYOLO_INLINE std::vector<PointF> cross_polygon(double cx, double cy, double half_len, double half_thick, double angle) {
  const double L = half_len, T = half_thick;
  const PointF unit[12] = {{-T, -L}, {T, -L}, {T, -T}, {L, -T}, {L, T},   {T, T},
                           {T, L},   {-T, L}, {-T, T}, {-L, T}, {-L, -T}, {-T, -T}};
  const double c = std::cos(angle), s = std::sin(angle);
  std::vector<PointF> pts;
  for (const auto& p : unit) pts.push_back({cx + p.x * c - p.y * s, cy + p.x * s + p.y * c});
  return pts;
}

LIBREYOLO_INLINE PixelBox fill_star(Image& img, double cx, double cy, double r_outer, double r_inner, int points, double angle,
                                    const Texture& tex) {
  return fill_polygon(img, star_polygon(cx, cy, r_outer, r_inner, points, angle), tex);
}

LIBREYOLO_INLINE PixelBox fill_cross(Image& img, double cx, double cy, double half_len, double half_thick, double angle,
                                     const Texture& tex) {
  return fill_polygon(img, cross_polygon(cx, cy, half_len, half_thick, angle), tex);
}

LIBREYOLO_INLINE PixelBox draw_line(Image& img, PointF a, PointF b, double thickness, const Texture& tex) {
  const double dx = b.x - a.x, dy = b.y - a.y, len = std::max(std::hypot(dx, dy), 1e-9);
  const double nx = -dy / len * thickness / 2, ny = dx / len * thickness / 2;
  return fill_polygon(img, {{a.x + nx, a.y + ny}, {b.x + nx, b.y + ny}, {b.x - nx, b.y - ny}, {a.x - nx, a.y - ny}}, tex);
}

LIBREYOLO_INLINE void fill_image(Image& img, const Texture& tex) {
  for (int y = 0; y < img.h; ++y)
    for (int x = 0; x < img.w; ++x) put_pixel(img, x, y, tex.at(x + 0.5, y + 0.5));
}

LIBREYOLO_INLINE void add_noise(Image& img, int amplitude, std::mt19937_64& rng) {
  if (amplitude <= 0) return;
  for (auto& v : img.px) v = static_cast<uint8_t>(std::clamp(static_cast<int>(v) + static_cast<int>(randint(rng, -amplitude, amplitude)), 0, 255));
}

}  // namespace libreyolo::data
