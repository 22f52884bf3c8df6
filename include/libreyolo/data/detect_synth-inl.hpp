#pragma once
// Definitions of detect_synth.hpp (core/api.hpp): included by detect_synth.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/detect_synth.hpp>
#include <libreyolo/data/synth_writer.hpp>

namespace libreyolo::data {

namespace detail {

LIBREYOLO_INLINE double box_cover_fraction(const BoxF& a, const BoxF& b) {  // overlap / the smaller area
  const double iw = std::min(a.x1, b.x1) - std::max(a.x0, b.x0), ih = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
  if (iw <= 0 || ih <= 0) return 0;
  const double aa = (a.x1 - a.x0) * (a.y1 - a.y0), ab = (b.x1 - b.x0) * (b.y1 - b.y0);
  return iw * ih / std::min(aa, ab);
}

}  // namespace detail

LIBREYOLO_INLINE Image synth_detect_image(int h, int w, int classes, std::mt19937_64& rng, std::vector<SynthObject>& objects,
                                          const SynthDetectStyle& st) {
  Image img(h, w, 3);
  detail::synth_background(img, rng, st.background);
  objects.clear();
  const int n = static_cast<int>(randint(rng, st.objects_min, st.objects_max));
  const double short_side = std::min(h, w);
  std::vector<BoxF> placed;
  for (int k = 0; k < n; ++k) {
    for (int attempt = 0; attempt < 30; ++attempt) {  // a place that hides no other object much
      const double side = short_side * std::exp(uniform(rng, std::log(st.side_min), std::log(st.side_max)));
      const double aspect = std::exp(uniform(rng, -std::log(1.4), std::log(1.4)));
      const double bw = std::max(12.0, side * std::sqrt(aspect)), bh = std::max(12.0, side / std::sqrt(aspect));
      if (bw >= w || bh >= h) continue;
      const double x0 = uniform(rng, 0, w - bw), y0 = uniform(rng, 0, h - bh);
      const BoxF box{x0, y0, x0 + bw, y0 + bh};
      bool ok = true;
      for (const auto& p : placed) ok = ok && detail::box_cover_fraction(box, p) <= st.max_covered;
      if (!ok) continue;
      const int cls = static_cast<int>(randint(rng, 0, classes - 1));
      const double rotation = uniform(rng, -std::numbers::pi / 6, std::numbers::pi / 6);
      const Rgb base = detail::random_colour(rng);
      // Texture periods scale with the object, as in the classification sets (object ~ 0.75 S).
      const Texture tex = synth_class_texture(cls, base, detail::contrasting(base), {x0 + bw / 2, y0 + bh / 2},
                                              rotation, static_cast<int>(std::max(8.0, std::max(bw, bh) / 0.75)));
      const PixelBox painted = draw_class_shape(img, cls, box, rotation, tex);
      if (painted.x1 - painted.x0 >= 4 && painted.y1 - painted.y0 >= 4) {
        objects.push_back({cls, painted});
        placed.push_back(box);
      }
      break;
    }
  }
  add_noise(img, st.background.noise, rng);
  return img;
}

namespace detail {

LIBREYOLO_INLINE void validate_synth_detect(const SynthOptions& o, int long_min) {
  const std::string what = "--task detect";
  if (o.classes < 1 || o.classes > kSynthMaxClasses) synth_option_error(what, "classes", std::to_string(o.classes), "[1, 16]");
  if (o.imgsz < 64 || o.imgsz > 8192) synth_option_error(what, "imgsz", std::to_string(o.imgsz), "[64, 8192] (the long side)");
  if (long_min != 0 && (long_min < 64 || long_min > o.imgsz))
    synth_option_error(what, "long_side_min", std::to_string(long_min), "[64, imgsz]");
  validate_synth_split(o, what);
}

}  // namespace detail

LIBREYOLO_INLINE void synth_detect(const SynthOptions& o, int long_side_min) {  // default in synth.hpp
  detail::validate_synth_detect(o, long_side_min);
  SynthSizes sizes;
  sizes.long_min = long_side_min > 0 ? long_side_min : o.imgsz;
  sizes.long_max = o.imgsz;
  std::vector<std::string> names;
  for (int k = 0; k < o.classes; ++k) names.emplace_back(kSynthShapeNames[k]);
  const SynthDetectMaker make = [&](int h, int w, std::mt19937_64& rng, std::vector<SynthObject>& objs) {
    return synth_detect_image(h, w, o.classes, rng, objs);
  };
  detail::write_synth_detect_set(o, sizes, 0xDE7EC7, make, names, "--task detect --style shapes");
}

}  // namespace libreyolo::data
