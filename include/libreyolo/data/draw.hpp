#pragma once
// Small raster helpers for synthetic data: filled polygons, ellipses, rings, stars, crosses, thick
// lines and rectangles, painted with a solid colour or a procedural texture. Every fill tests pixel
// centres (no anti-aliasing) and returns the tight box of the pixels it painted.
#include <libreyolo/core/api.hpp>
#include <libreyolo/data/image_ops.hpp>
#include <libreyolo/data/rng.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace libreyolo::data {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

struct PointF {
  double x = 0, y = 0;
};

// Pixel box [x0, x1) x [y0, y1); empty when nothing was painted.
struct PixelBox {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool empty() const { return x1 <= x0 || y1 <= y0; }
  void include(int x, int y);
  void include(const PixelBox& o);
};

enum class TextureKind { solid, stripes, checker, dots, noise, gradient, rings, grid };

// A procedural fill. The pattern is laid out in its own frame: origin (ox, oy), rotated by `angle`
// radians, so a shape's texture can move and turn with the shape.
struct Texture {
  TextureKind kind = TextureKind::solid;
  Rgb a, b;             // base colour, pattern colour
  double period = 8;    // stripe pair / checker pair / dot cell / ring pair / grid cell / 4 x noise cell, pixels
  double angle = 0;
  double ox = 0, oy = 0;
  double extent = 64;   // gradient: distance over which a turns into b
  uint64_t seed = 0;    // noise

  static Texture solid(Rgb c) { return Texture{TextureKind::solid, c, c}; }

  Rgb at(double x, double y) const;

 private:
  static bool parity(double k) { return (static_cast<int64_t>(k) & 1) != 0; }
  Rgb lerp(double t) const;
};

LIBREYOLO_INLINE void put_pixel(Image& img, int x, int y, Rgb c);

// Paints every pixel of the bounds [x0,x1) x [y0,y1) whose centre satisfies inside(cx, cy).
template <class Inside>
PixelBox fill_where(Image& img, double x0, double y0, double x1, double y1, Inside&& inside, const Texture& tex) {
  PixelBox box;
  const int ya = std::max(0, static_cast<int>(std::floor(y0))), yb = std::min(img.h, static_cast<int>(std::ceil(y1)));
  const int xa = std::max(0, static_cast<int>(std::floor(x0))), xb = std::min(img.w, static_cast<int>(std::ceil(x1)));
  for (int y = ya; y < yb; ++y)
    for (int x = xa; x < xb; ++x)
      if (inside(x + 0.5, y + 0.5)) {
        put_pixel(img, x, y, tex.at(x + 0.5, y + 0.5));
        box.include(x, y);
      }
  return box;
}

// Scanline fill with the even-odd rule at pixel centres (handles concave and star polygons).
LIBREYOLO_INLINE PixelBox fill_polygon(Image& img, const std::vector<PointF>& pts, const Texture& tex);

// Axis-aligned rectangle [x0, x1) x [y0, y1) in pixel coordinates.
LIBREYOLO_INLINE PixelBox fill_rect(Image& img, double x0, double y0, double x1, double y1, const Texture& tex);

// Ellipse with radii (rx, ry) turned by `angle` radians about its centre.
LIBREYOLO_INLINE PixelBox fill_ellipse(Image& img, double cx, double cy, double rx, double ry, double angle, const Texture& tex);

LIBREYOLO_INLINE PixelBox fill_circle(Image& img, double cx, double cy, double radius, const Texture& tex);

// Annulus between radii r_inner and r_outer.
LIBREYOLO_INLINE PixelBox fill_ring(Image& img, double cx, double cy, double r_outer, double r_inner, const Texture& tex);

// Vertices of a regular n-gon of circumradius r; the first vertex points along `angle`.
LIBREYOLO_INLINE std::vector<PointF> regular_polygon(double cx, double cy, double r, int n, double angle);

// A star with `points` tips at radius r_outer and notches at r_inner.
LIBREYOLO_INLINE std::vector<PointF> star_polygon(double cx, double cy, double r_outer, double r_inner, int points, double angle);

// A plus sign: two bars of half-length `half_len` and half-width `half_thick`, turned by `angle`.
LIBREYOLO_INLINE std::vector<PointF> cross_polygon(double cx, double cy, double half_len, double half_thick, double angle);

LIBREYOLO_INLINE PixelBox fill_star(Image& img, double cx, double cy, double r_outer, double r_inner, int points, double angle,
                                    const Texture& tex);
LIBREYOLO_INLINE PixelBox fill_cross(Image& img, double cx, double cy, double half_len, double half_thick, double angle,
                                     const Texture& tex);

// A straight segment of the given thickness (square ends).
LIBREYOLO_INLINE PixelBox draw_line(Image& img, PointF a, PointF b, double thickness, const Texture& tex);

// Fills the whole image with a texture (backgrounds).
LIBREYOLO_INLINE void fill_image(Image& img, const Texture& tex);

// Adds independent uniform noise in [-amplitude, amplitude] to every channel value.
LIBREYOLO_INLINE void add_noise(Image& img, int amplitude, std::mt19937_64& rng);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/draw-inl.hpp>
#endif
