#pragma once
// Definitions of synth.hpp (core/api.hpp): included by synth.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/synth.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE PixelBox draw_class_shape(Image& img, int k, const BoxF& box, double rotation, const Texture& tex) {
  const double cx = (box.x0 + box.x1) / 2, cy = (box.y0 + box.y1) / 2;
  const double sx = (box.x1 - box.x0) / 2, sy = (box.y1 - box.y0) / 2;
  const double c = std::cos(rotation), s = std::sin(rotation);
  auto polygon = [&](const std::vector<PointF>& unit) {
    std::vector<PointF> pts;
    for (const auto& p : unit) pts.push_back({cx + (p.x * c - p.y * s) * sx, cy + (p.x * s + p.y * c) * sy});
    return fill_polygon(img, pts, tex);
  };
  auto region = [&](auto&& inside_unit) {
    auto inside = [&](double x, double y) {
      const double u0 = (x - cx) / sx, v0 = (y - cy) / sy;
      return inside_unit(u0 * c + v0 * s, -u0 * s + v0 * c);  // undo the rotation
    };
    return fill_where(img, box.x0, box.y0, box.x1, box.y1, inside, tex);
  };
  const double up = -std::numbers::pi / 2;  // first vertex pointing up (image y grows downwards)
  switch (k) {
    case 0: return region([](double u, double v) { return u * u + v * v <= 0.95 * 0.95; });
    case 1: return polygon({{-0.67, -0.67}, {0.67, -0.67}, {0.67, 0.67}, {-0.67, 0.67}});
    case 2: return polygon(regular_polygon(0, 0.12, 0.95, 3, up));
    case 3: return polygon(star_polygon(0, 0.05, 0.95, 0.42, 5, up));
    case 4: return polygon(cross_polygon(0, 0, 0.92, 0.27, 0));
    case 5: return region([](double u, double v) { double r2 = u * u + v * v; return r2 <= 0.95 * 0.95 && r2 >= 0.55 * 0.55; });
    case 6: return polygon(regular_polygon(0, 0, 0.95, 6, 0));
    case 7: return polygon({{0, -0.95}, {0.6, 0}, {0, 0.95}, {-0.6, 0}});
    case 8: return region([](double u, double v) {
      return u * u + v * v <= 0.92 * 0.92 && (u - 0.38) * (u - 0.38) + v * v >= 0.78 * 0.78;
    });
    case 9: return region([](double u, double v) { return (u / 0.95) * (u / 0.95) + (v / 0.42) * (v / 0.42) <= 1; });
    case 10: return polygon(regular_polygon(0, 0.05, 0.95, 5, up));
    case 11: return polygon({{-0.9, -0.22}, {0.2, -0.22}, {0.2, -0.6}, {0.92, 0}, {0.2, 0.6}, {0.2, 0.22}, {-0.9, 0.22}});
    case 12: return region([](double u, double v) {  // (x^2 + y^2 - 1)^3 <= x^2 y^3, y pointing up
      const double x = u / 0.75, y = -v / 0.75 + 0.1, q = x * x + y * y - 1;
      return q * q * q <= x * x * y * y * y;
    });
    case 13: return region([](double u, double v) { return u * u + (v - 0.3) * (v - 0.3) <= 0.85 * 0.85 && v <= 0.3; });
    case 14: return region([](double u, double v) { double m = std::max(std::abs(u), std::abs(v)); return m <= 0.68 && m >= 0.42; });
    case 15: return polygon({{-0.45, -0.45}, {0.45, -0.45}, {0.9, 0.4}, {-0.9, 0.4}});
    default:
      throw ConfigError("draw_class_shape: shape index " + std::to_string(k) + " is outside [0, " +
                        std::to_string(kSynthMaxClasses - 1) + "]");
  }
}

LIBREYOLO_INLINE Texture synth_class_texture(int k, Rgb base, Rgb pattern, PointF centre, double rotation, int imgsz) {
  struct Spec {
    TextureKind kind;
    double period;  // at 64 px, scaled with imgsz
  };
  // The first ten (the default class count) are ten different textures, coarse enough to survive a
  // stride-4 network stem at 64 px; beyond ten the shapes carry the distinction.
  static constexpr Spec table[kSynthMaxClasses] = {
      {TextureKind::solid, 8},   {TextureKind::stripes, 12}, {TextureKind::checker, 14}, {TextureKind::dots, 11},
      {TextureKind::noise, 16},  {TextureKind::gradient, 8}, {TextureKind::rings, 10},   {TextureKind::grid, 10},
      {TextureKind::stripes, 5}, {TextureKind::checker, 6},  {TextureKind::dots, 6},     {TextureKind::grid, 6},
      {TextureKind::rings, 5},   {TextureKind::noise, 6},    {TextureKind::solid, 8},    {TextureKind::gradient, 8}};
  const Spec& spec = table[k % kSynthMaxClasses];
  Texture t;
  t.kind = spec.kind;
  t.a = base;
  t.b = pattern;
  t.period = spec.period * imgsz / 64.0;
  t.angle = rotation;
  t.ox = centre.x, t.oy = centre.y;
  t.extent = 0.6 * imgsz;
  t.seed = static_cast<uint64_t>(k) * 7919u;
  return t;
}

namespace detail {

LIBREYOLO_INLINE Rgb random_colour(std::mt19937_64& rng) {
  return {static_cast<uint8_t>(randint(rng, 0, 255)), static_cast<uint8_t>(randint(rng, 0, 255)),
          static_cast<uint8_t>(randint(rng, 0, 255))};
}

LIBREYOLO_INLINE Rgb toward_grey(Rgb c, double t) {
  auto ch = [t](uint8_t v) { return static_cast<uint8_t>(std::lround(v + (128 - v) * t)); };
  return {ch(c.r), ch(c.g), ch(c.b)};
}

LIBREYOLO_INLINE Rgb contrasting(Rgb c) {
  return {static_cast<uint8_t>((c.r + 128) % 256), static_cast<uint8_t>((c.g + 128) % 256),
          static_cast<uint8_t>((c.b + 128) % 256)};
}

LIBREYOLO_INLINE void synth_background(Image& img, std::mt19937_64& rng, const SynthStyle& st) {
  const double S = img.w;
  Texture bg;
  bg.kind = TextureKind::gradient;
  bg.a = toward_grey(random_colour(rng), st.background_mute);
  bg.b = toward_grey(random_colour(rng), st.background_mute);
  bg.angle = uniform(rng, 0, 2 * std::numbers::pi);
  bg.ox = S / 2, bg.oy = img.h / 2.0;
  bg.extent = S * uniform(rng, 0.8, 1.6);
  fill_image(img, bg);
  add_noise(img, 10, rng);
  const int lines = static_cast<int>(randint(rng, 0, st.distractor_lines_max));
  const int blobs = static_cast<int>(randint(rng, 0, st.distractor_blobs_max));
  for (int i = 0; i < lines; ++i) {
    PointF a{uniform(rng, 0, S), uniform(rng, 0, img.h)}, b{uniform(rng, 0, S), uniform(rng, 0, img.h)};
    draw_line(img, a, b, uniform(rng, 0.8, 2.0) * S / 64, Texture::solid(random_colour(rng)));
  }
  for (int i = 0; i < blobs; ++i) {
    const double r = uniform(rng, 0.04, 0.09) * S, cx = uniform(rng, 0, S), cy = uniform(rng, 0, img.h);
    std::vector<PointF> pts;
    const int n = static_cast<int>(randint(rng, 6, 9));
    for (int j = 0; j < n; ++j) {
      const double t = 2 * std::numbers::pi * (j + uniform(rng, -0.3, 0.3)) / n, rr = r * uniform(rng, 0.4, 1.0);
      pts.push_back({cx + rr * std::cos(t), cy + rr * std::sin(t)});
    }
    fill_polygon(img, pts, Texture::solid(random_colour(rng)));
  }
}

}  // namespace detail

LIBREYOLO_INLINE Image synth_classify_image(int cls, int imgsz, std::mt19937_64& rng, const SynthStyle& st) {
  Image img(imgsz, imgsz, 3);
  detail::synth_background(img, rng, st);
  const double side = uniform(rng, st.object_min, st.object_max) * imgsz;
  const double aspect = std::exp(uniform(rng, -std::log(st.aspect_max), std::log(st.aspect_max)));
  const double w = std::min<double>(imgsz, side * std::sqrt(aspect)), h = std::min<double>(imgsz, side / std::sqrt(aspect));
  const double x0 = uniform(rng, 0, imgsz - w), y0 = uniform(rng, 0, imgsz - h);
  const double rotation = uniform(rng, -st.rotation_max, st.rotation_max);
  const Rgb base = detail::random_colour(rng);
  const Texture tex = synth_class_texture(cls, base, detail::contrasting(base), {x0 + w / 2, y0 + h / 2}, rotation, imgsz);
  draw_class_shape(img, cls, {x0, y0, x0 + w, y0 + h}, rotation, tex);
  if (bernoulli(rng, st.occluder_p)) {  // an occasional thin line across the object
    PointF a{uniform(rng, 0, imgsz), uniform(rng, 0, imgsz)}, b{uniform(rng, 0, imgsz), uniform(rng, 0, imgsz)};
    draw_line(img, a, b, imgsz / 64.0, Texture::solid(detail::random_colour(rng)));
  }
  add_noise(img, st.noise, rng);
  return img;
}

namespace detail {

LIBREYOLO_INLINE void validate_synth(const SynthOptions& o) {
  auto bad = [](const std::string& key, const std::string& v, const char* allowed) {
    throw ConfigError("synth option " + key + " = " + v + " is outside the allowed range " + allowed);
  };
  if (o.classes < 2 || o.classes > kSynthMaxClasses) bad("classes", std::to_string(o.classes), "[2, 16]");
  if (o.imgsz < 16 || o.imgsz > 4096) bad("imgsz", std::to_string(o.imgsz), "[16, 4096]");
  const int per_class = o.val_fraction > 0 ? 2 : 1;  // with a val split, one train and one val image each
  if (o.images < per_class * o.classes)
    bad("images", std::to_string(o.images),
        per_class == 2 ? "[2 * classes, inf) (one train and one val image per class)" : "[classes, inf)");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) bad("val_fraction", log::cat(o.val_fraction), "[0, 1)");
  if (o.out.empty()) throw ConfigError("synth option out is empty: give the folder to write the dataset to");
}

LIBREYOLO_INLINE void prepare_synth_out(const std::filesystem::path& out) {
  namespace fs = std::filesystem;
  const fs::path marker = out / ".libreyolo_synth";
  if (fs::exists(out) && !fs::is_empty(out)) {
    if (!fs::exists(marker))
      throw ConfigError("synth output folder '" + out.string() +
                        "' is not empty and was not written by libreyolo synth; give an empty or new folder");
    fs::remove_all(out / "train");
    fs::remove_all(out / "val");
  }
  fs::create_directories(out);
  std::ofstream(marker) << "written by libreyolo synth; the folder is regenerated on the next run\n";
}

}  // namespace detail

LIBREYOLO_INLINE void synth_classify(const SynthOptions& o) {
  detail::validate_synth(o);
  detail::prepare_synth_out(o.out);
  const int C = o.classes;
  for (int k = 0; k < C; ++k) {
    std::filesystem::create_directories(o.out / "train" / std::string(kSynthShapeNames[k]));
    if (o.val_fraction > 0) std::filesystem::create_directories(o.out / "val" / std::string(kSynthShapeNames[k]));
  }
  progress::Bar bar("synth", o.images, o.progress_interval, progress::choose_mode(o.progress_interval), "img");
  for (int i = 0; i < o.images; ++i) {
    const int k = i % C, m = i / C;                      // class, index within the class
    const int n_k = o.images / C + (k < o.images % C);  // images of class k
    int n_val = static_cast<int>(std::lround(o.val_fraction * n_k));
    if (o.val_fraction > 0 && n_k >= 2) n_val = std::clamp(n_val, 1, n_k - 1);
    std::mt19937_64 rng(sample_seed(o.seed, 0x5717, static_cast<uint64_t>(i)));
    Image img = synth_classify_image(k, o.imgsz, rng, o.style);
    char name[32];
    std::snprintf(name, sizeof name, "%05d.jpg", i);
    write_jpeg(o.out / (m < n_val ? "val" : "train") / std::string(kSynthShapeNames[k]) / name, img, 92);
    bar.update(i + 1);
  }
  bar.finish();
  log::info("synth: wrote ", o.images, " images of ", C, " classes to ", o.out.string());
}

LIBREYOLO_INLINE void synth(const SynthOptions& o) {
  if (o.task == "classify") return synth_classify(o);
  if (o.task == "detect") return synth_detect(o);
  throw ConfigError("synth task '" + o.task + "' is not supported (allowed: classify, detect)");
}

}  // namespace libreyolo::data
