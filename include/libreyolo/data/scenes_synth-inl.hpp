#pragma once
// Definitions of scenes_synth.hpp (core/api.hpp): included by scenes_synth.hpp when header-only, compiled once otherwise.
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/scenes_synth.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace libreyolo::data {

LIBREYOLO_INLINE std::string scenes_class_name(int k) {
  return std::string(kScenesShapeNames[static_cast<size_t>(k / 2)]) + "_" + std::string(kScenesFinishNames[static_cast<size_t>(k % 2)]);
}

LIBREYOLO_INLINE bool scenes_shape_inside(int shape, double u, double v) {
  if (std::abs(u) > 1 || std::abs(v) > 1) return false;
  switch (shape) {
    case 0: return v <= -0.4 || std::abs(u) <= 0.3;                                          // tee
    case 1: return u <= -0.35 || v >= 0.35;                                                  // ell
    case 2: return u <= -0.4 || u >= 0.4 || v >= 0.4;                                        // cup
    case 3: return v <= -0.55 || std::abs(v) <= 0.2 || v >= 0.55;                            // bars
    case 4: return (v <= -0.35 && u <= 0.35) || (std::abs(v) < 0.35 && std::abs(u) <= 0.35) ||
                   (v >= 0.35 && u >= -0.35);                                                // zed
    case 5: return std::abs(v - (0.9 * std::abs(u) - 0.45)) <= 0.35;                         // chevron
    case 6: return u * u + (v + 0.35) * (v + 0.35) <= 0.42 ||
                   (v >= -0.1 && std::abs(u) <= 0.18 + 0.3 * (v + 0.1));                     // keyhole
    case 7: return std::abs(u) <= 0.9 * std::abs(v) + 0.08;                                  // hourglass
    default: return false;
  }
}

namespace detail {

// Who owns each pixel: an object's index, or -1 (background, distractor).
struct ScenesCanvas {
  Image img;
  std::vector<int16_t> owner;
  std::vector<int64_t> painted;  // pixels each object had when it was drawn
  std::vector<int64_t> visible;  // pixels each object has now
};

// A region of the canvas saved before a draw, to undo it.
struct ScenesSaved {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  std::vector<uint8_t> px;
  std::vector<int16_t> owner;
};

LIBREYOLO_INLINE ScenesSaved scenes_save(const ScenesCanvas& c, int x0, int y0, int x1, int y1) {
  ScenesSaved s{std::max(0, x0), std::max(0, y0), std::min(c.img.w, x1), std::min(c.img.h, y1), {}, {}};
  for (int y = s.y0; y < s.y1; ++y) {
    const auto* row = &c.img.px[(static_cast<size_t>(y) * c.img.w + s.x0) * 3];
    s.px.insert(s.px.end(), row, row + static_cast<size_t>(std::max(0, s.x1 - s.x0)) * 3);
    const auto* orow = &c.owner[static_cast<size_t>(y) * c.img.w + s.x0];
    s.owner.insert(s.owner.end(), orow, orow + std::max(0, s.x1 - s.x0));
  }
  return s;
}

LIBREYOLO_INLINE void scenes_restore(ScenesCanvas& c, const ScenesSaved& s) {
  const size_t n = static_cast<size_t>(std::max(0, s.x1 - s.x0));
  for (int y = s.y0, r = 0; y < s.y1; ++y, ++r) {
    std::copy_n(&s.px[r * n * 3], n * 3, &c.img.px[(static_cast<size_t>(y) * c.img.w + s.x0) * 3]);
    std::copy_n(&s.owner[r * n], n, &c.owner[static_cast<size_t>(y) * c.img.w + s.x0]);
  }
}

// Visible pixels of every object inside the region [x0, x1) x [y0, y1), added to `count`.
LIBREYOLO_INLINE void scenes_count(const ScenesCanvas& c, int x0, int y0, int x1, int y1, std::vector<int64_t>& count) {
  for (int y = std::max(0, y0); y < std::min(c.img.h, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(c.img.w, x1); ++x) {
      const int o = c.owner[static_cast<size_t>(y) * c.img.w + x];
      if (o >= 0) ++count[static_cast<size_t>(o)];
    }
}

LIBREYOLO_INLINE Rgb scenes_muted(std::mt19937_64& rng) { return toward_grey(random_colour(rng), uniform(rng, 0.45, 0.8)); }

LIBREYOLO_INLINE Texture scenes_surface(std::mt19937_64& rng, double scale) {
  Texture t;
  t.a = scenes_muted(rng);
  t.b = scenes_muted(rng);
  switch (randint(rng, 0, 3)) {
    case 0: t.kind = TextureKind::noise, t.period = scale * uniform(rng, 0.05, 0.2); break;
    case 1: t.kind = TextureKind::stripes, t.period = scale * uniform(rng, 0.02, 0.08); break;
    case 2: t.kind = TextureKind::checker, t.period = scale * uniform(rng, 0.05, 0.2); break;
    default: t.kind = TextureKind::gradient, t.extent = scale * uniform(rng, 0.6, 1.5); break;
  }
  t.angle = uniform(rng, 0, std::numbers::pi);
  t.ox = uniform(rng, 0, scale), t.oy = uniform(rng, 0, scale);
  t.seed = rng();
  return t;
}

LIBREYOLO_INLINE void scenes_background(Image& img, std::mt19937_64& rng) {
  const double S = std::max(img.h, img.w);
  fill_image(img, scenes_surface(rng, S));
  const int furniture = static_cast<int>(randint(rng, 0, 4));
  for (int i = 0; i < furniture; ++i) {
    const double fw = S * uniform(rng, 0.15, 0.6), fh = S * uniform(rng, 0.1, 0.4);
    const double x0 = uniform(rng, -0.2 * fw, img.w - 0.8 * fw), y0 = uniform(rng, -0.2 * fh, img.h - 0.8 * fh);
    fill_rect(img, x0, y0, x0 + fw, y0 + fh, scenes_surface(rng, S));
  }
}

// A shape in its box (centre, half sizes, turn): the local square coordinates of a pixel centre.
struct ScenesPlace {
  double cx = 0, cy = 0, hw = 0, hh = 0, angle = 0;
  void local(double x, double y, double& u, double& v) const {
    const double dx = x - cx, dy = y - cy, c = std::cos(angle), s = std::sin(angle);
    u = (c * dx + s * dy) / hw;
    v = (-s * dx + c * dy) / hh;
  }
  // Bounds of the turned box in pixels.
  void bounds(int& x0, int& y0, int& x1, int& y1) const {
    const double c = std::abs(std::cos(angle)), s = std::abs(std::sin(angle));
    const double ex = c * hw + s * hh, ey = s * hw + c * hh;
    x0 = static_cast<int>(std::floor(cx - ex)) - 1, x1 = static_cast<int>(std::ceil(cx + ex)) + 1;
    y0 = static_cast<int>(std::floor(cy - ey)) - 1, y1 = static_cast<int>(std::ceil(cy + ey)) + 1;
  }
};

// Paints `inside` (local coordinates) at `pl` with colour(x, y, u, v); sets the owner of every painted
// pixel to `id`; returns the number of pixels painted.
template <class Inside, class Colour>
int64_t scenes_paint(ScenesCanvas& c, const ScenesPlace& pl, Inside&& inside, Colour&& colour, int16_t id) {
  int x0, y0, x1, y1;
  pl.bounds(x0, y0, x1, y1);
  int64_t n = 0;
  for (int y = std::max(0, y0); y < std::min(c.img.h, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(c.img.w, x1); ++x) {
      double u, v;
      pl.local(x + 0.5, y + 0.5, u, v);
      if (!inside(u, v)) continue;
      put_pixel(c.img, x, y, colour(x + 0.5, y + 0.5, u, v));
      c.owner[static_cast<size_t>(y) * c.img.w + x] = id;
      ++n;
    }
  return n;
}

}  // namespace detail

LIBREYOLO_INLINE Image synth_scenes_image(int h, int w, int classes, std::mt19937_64& rng, std::vector<SynthObject>& objects) {
  using namespace detail;
  ScenesCanvas c{Image(h, w, 3), std::vector<int16_t>(static_cast<size_t>(h) * w, -1), {}, {}};
  scenes_background(c.img, rng);
  const double short_side = std::min(h, w);
  const int n_obj = static_cast<int>(randint(rng, 2, 9)), n_dis = static_cast<int>(randint(rng, 1, 5));
  // Objects (true) and distractors (false) in a random order, so either may cover the other.
  std::vector<char> order(static_cast<size_t>(n_obj), 1);
  order.resize(static_cast<size_t>(n_obj + n_dis), 0);
  shuffle_portable(order, rng);
  std::vector<int> cls_of;
  constexpr double kMinVisible = 0.45;
  for (const char is_object : order) {
    for (int attempt = 0; attempt < 25; ++attempt) {
      const double side = short_side * std::exp(uniform(rng, std::log(0.05), std::log(is_object ? 0.4 : 0.3)));
      const double aspect = std::exp(uniform(rng, -std::log(1.5), std::log(1.5)));
      ScenesPlace pl;
      pl.hw = std::max(8.0, side * std::sqrt(aspect)) / 2, pl.hh = std::max(8.0, side / std::sqrt(aspect)) / 2;
      if (2 * pl.hw >= w || 2 * pl.hh >= h) continue;
      pl.cx = uniform(rng, pl.hw, w - pl.hw), pl.cy = uniform(rng, pl.hh, h - pl.hh);
      pl.angle = uniform(rng, -0.4, 0.4);
      int x0, y0, x1, y1;
      pl.bounds(x0, y0, x1, y1);
      // Visible pixels of the earlier objects in this region, before and after the draw.
      std::vector<int64_t> before(c.painted.size() + 1, 0), after(c.painted.size() + 1, 0);  // + the new one
      scenes_count(c, x0, y0, x1, y1, before);
      const ScenesSaved saved = scenes_save(c, x0, y0, x1, y1);
      const Rgb base = random_colour(rng), other = contrasting(base);
      int64_t n = 0;
      int cls = -1;
      if (is_object) {
        cls = static_cast<int>(randint(rng, 0, classes - 1));
        const int shape = cls / 2;
        auto in = [shape](double u, double v) { return scenes_shape_inside(shape, u, v); };
        if (cls % 2 == 0) {  // plain: the colour with an outline about 8% of the shape's size thick
          const double t = 0.16;
          const Rgb line = bernoulli(rng, 0.5) ? toward_grey(Rgb{20, 20, 20}, 0.1) : toward_grey(Rgb{240, 240, 240}, 0.1);
          auto colour = [&](double, double, double u, double v) {
            const bool edge = !scenes_shape_inside(shape, u + t, v) || !scenes_shape_inside(shape, u - t, v) ||
                              !scenes_shape_inside(shape, u, v + t) || !scenes_shape_inside(shape, u, v - t);
            return edge ? line : base;
          };
          n = scenes_paint(c, pl, in, colour, static_cast<int16_t>(c.painted.size()));
        } else {  // dotted: dots of a contrasting colour on a grid turned with the shape
          Texture dots{TextureKind::dots, base, other, std::max(5.0, std::min(pl.hw, pl.hh) * 0.55), pl.angle, pl.cx, pl.cy};
          auto colour = [&](double x, double y, double, double) { return dots.at(x, y); };
          n = scenes_paint(c, pl, in, colour, static_cast<int16_t>(c.painted.size()));
        }
      } else {
        Texture tex = scenes_surface(rng, 2 * std::max(pl.hw, pl.hh));
        tex.a = base, tex.b = other;
        if (tex.kind == TextureKind::gradient) tex.kind = TextureKind::stripes, tex.period = std::max(4.0, pl.hw * 0.5);
        auto colour = [&](double x, double y, double, double) { return tex.at(x, y); };
        const int kind = static_cast<int>(randint(rng, 0, 4));
        const int shape = static_cast<int>(randint(rng, 0, kScenesShapes - 1));
        const double r_in = uniform(rng, 0.4, 0.75);
        std::array<double, 8> bumps{};
        for (auto& b : bumps) b = uniform(rng, 0.55, 1.0);
        auto in = [&](double u, double v) {
          const double r2 = u * u + v * v;
          switch (kind) {
            case 0: return r2 <= 1.0;                                     // ellipse
            case 1: return r2 <= 1.0 && r2 >= r_in * r_in;                // ring
            case 2: {                                                     // blob
              const double a = std::atan2(v, u) / (2 * std::numbers::pi) * 8 + 8;
              const int i = static_cast<int>(a) % 8;
              const double f = a - std::floor(a), r = bumps[static_cast<size_t>(i)] * (1 - f) + bumps[static_cast<size_t>((i + 1) % 8)] * f;
              return r2 <= r * r;
            }
            case 3: return std::abs(v) <= 0.12;                          // stick
            default: return scenes_shape_inside(shape, u, v);            // a class shape in no class's finish
          }
        };
        scenes_paint(c, pl, in, colour, -1);
      }
      scenes_count(c, x0, y0, x1, y1, after);
      bool ok = !is_object || n >= 24;
      for (size_t k = 0; k < c.painted.size() && ok; ++k)
        ok = c.visible[k] - (before[k] - after[k]) >= kMinVisible * static_cast<double>(c.painted[k]);
      if (!ok) {
        scenes_restore(c, saved);
        continue;
      }
      for (size_t k = 0; k < c.painted.size(); ++k) c.visible[k] -= before[k] - after[k];
      if (is_object) {
        c.painted.push_back(n);
        c.visible.push_back(n);
        cls_of.push_back(cls);
      }
      break;
    }
  }
  objects.clear();
  std::vector<PixelBox> boxes(c.painted.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int o = c.owner[static_cast<size_t>(y) * w + x];
      if (o >= 0) boxes[static_cast<size_t>(o)].include(x, y);
    }
  for (size_t k = 0; k < boxes.size(); ++k)
    if (boxes[k].x1 - boxes[k].x0 >= 4 && boxes[k].y1 - boxes[k].y0 >= 4) objects.push_back({cls_of[k], boxes[k]});
  add_noise(c.img, 5, rng);
  return std::move(c.img);
}

LIBREYOLO_INLINE void synth_detect_scenes(const SynthOptions& o) {
  const std::string what = "--task detect --style scenes";
  if (o.classes < 1 || o.classes > kScenesMaxClasses)
    detail::synth_option_error(what, "classes", std::to_string(o.classes), "[1, 16]");
  if (o.imgsz < 160 || o.imgsz > 8192)
    detail::synth_option_error(what, "imgsz", std::to_string(o.imgsz), "[160, 8192] (the long side's maximum)");
  detail::validate_synth_split(o, what);
  SynthSizes sizes;
  sizes.long_min = static_cast<int>(std::lround(o.imgsz * 5.0 / 12.0));
  sizes.long_max = o.imgsz;
  sizes.short_min = 0.6;
  sizes.landscape = 2.0 / 3.0;
  std::vector<std::string> names;
  for (int k = 0; k < o.classes; ++k) names.push_back(scenes_class_name(k));
  const SynthDetectMaker make = [&](int h, int w, std::mt19937_64& rng, std::vector<SynthObject>& objs) {
    return synth_scenes_image(h, w, o.classes, rng, objs);
  };
  detail::write_synth_detect_set(o, sizes, 0x5CE4E5, make, names, "--task detect --style scenes");
}

}  // namespace libreyolo::data
