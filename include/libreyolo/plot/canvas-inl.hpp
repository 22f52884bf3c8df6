#pragma once
// Definitions of canvas.hpp (core/api.hpp): included by canvas.hpp when header-only, compiled once otherwise.
#include <libreyolo/plot/canvas.hpp>

namespace libreyolo::plot {

LIBREYOLO_INLINE bool usable() {
  if constexpr (!available)
    log::notice_once("plot.no_cairo", "plots: this build has no cairo (Debian: libcairo2-dev, then re-run cmake); "
                                      "results.png, labels.png, confusion_matrix.png and the validation images are not written");
  return available;
}

LIBREYOLO_INLINE Color class_color(int64_t cls) {
  static constexpr std::array<std::array<int, 3>, 20> p = {{{255, 56, 56},  {255, 157, 151}, {255, 112, 31}, {255, 178, 29},
                                                            {207, 210, 49}, {72, 249, 10},   {146, 204, 23}, {61, 219, 134},
                                                            {26, 147, 52},  {0, 212, 187},   {44, 153, 168}, {0, 194, 255},
                                                            {52, 69, 147},  {100, 115, 255}, {0, 24, 236},   {132, 56, 255},
                                                            {82, 0, 133},   {203, 56, 255},  {255, 149, 200}, {255, 55, 199}}};
  const auto& c = p[static_cast<size_t>((cls % 20 + 20) % 20)];
  return {c[0] / 255.0, c[1] / 255.0, c[2] / 255.0};
}

#if defined(LIBREYOLO_HAVE_CAIRO)
LIBREYOLO_INLINE Canvas::Canvas(int w, int h, Color bg) : w_(w), h_(h) {
  s_ = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  cr_ = cairo_create(s_);
  rgb(bg);
  cairo_paint(cr_);
  cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  font(12);
}

LIBREYOLO_INLINE Canvas::Canvas(const data::Image& img) : Canvas(img.w, img.h) {
  cairo_surface_flush(s_);
  auto* d = cairo_image_surface_get_data(s_);
  const int stride = cairo_image_surface_get_stride(s_);
  for (int y = 0; y < img.h; ++y) {
    auto* row = reinterpret_cast<uint32_t*>(d + static_cast<ptrdiff_t>(y) * stride);
    for (int x = 0; x < img.w; ++x) {
      const uint32_t r = img.at(y, x, 0), g = img.at(y, x, img.c > 1 ? 1 : 0), b = img.at(y, x, img.c > 2 ? 2 : 0);
      row[x] = 0xFF000000u | (r << 16) | (g << 8) | b;
    }
  }
  cairo_surface_mark_dirty(s_);
}

LIBREYOLO_INLINE Canvas::~Canvas() {
  cairo_destroy(cr_);
  cairo_surface_destroy(s_);
}

LIBREYOLO_INLINE void Canvas::font(double size, bool bold) {
  cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr_, size);
}

LIBREYOLO_INLINE void Canvas::line(double x1, double y1, double x2, double y2, Color c, double width) {
  rgb(c);
  cairo_set_line_width(cr_, width);
  cairo_move_to(cr_, x1, y1);
  cairo_line_to(cr_, x2, y2);
  cairo_stroke(cr_);
}

LIBREYOLO_INLINE void Canvas::rect(double x, double y, double w, double h, Color c, double alpha) {
  rgb(c, alpha);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_fill(cr_);
}

LIBREYOLO_INLINE void Canvas::frame(double x, double y, double w, double h, Color c, double width) {
  rgb(c);
  cairo_set_line_width(cr_, width);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_stroke(cr_);
}

LIBREYOLO_INLINE void Canvas::dot(double x, double y, double r, Color c, double alpha) {
  rgb(c, alpha);
  cairo_arc(cr_, x, y, r, 0, 2 * M_PI);
  cairo_fill(cr_);
}

LIBREYOLO_INLINE double Canvas::text_width(const std::string& t) {
  cairo_text_extents_t e;
  cairo_text_extents(cr_, t.c_str(), &e);
  return e.x_advance;
}

LIBREYOLO_INLINE void Canvas::text(const std::string& t, double x, double y, Color c, double align) {
  rgb(c);
  cairo_move_to(cr_, x - align * text_width(t), y);
  cairo_show_text(cr_, t.c_str());
}

LIBREYOLO_INLINE void Canvas::text_vertical(const std::string& t, double x, double y, Color c) {
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  cairo_rotate(cr_, -M_PI / 2);
  text(t, 0, 0, c, 0.5);
  cairo_restore(cr_);
}

LIBREYOLO_INLINE void Canvas::clip(double x, double y, double w, double h) {
  cairo_save(cr_);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_clip(cr_);
}

LIBREYOLO_INLINE void Canvas::write_png(const std::filesystem::path& p) {
  cairo_surface_flush(s_);
  std::filesystem::create_directories(p.parent_path().empty() ? "." : p.parent_path());
  // Encoded in memory, then written atomically (core/atomic_file.hpp): a plot never replaces what is
  // not a regular file, and a failure only costs the plot.
  std::string png;
  const auto append = [](void* out, const unsigned char* data, unsigned int n) {
    static_cast<std::string*>(out)->append(reinterpret_cast<const char*>(data), n);
    return CAIRO_STATUS_SUCCESS;
  };
  std::string why = cairo_surface_write_to_png_stream(s_, append, &png) == CAIRO_STATUS_SUCCESS ? "" : "PNG encoding failed";
  if (why.empty()) {
    try {
      why = atomic_file::write(p, "plot", png);
    } catch (const OutputPathError& e) {
      why = e.what();
    }
  }
  if (!why.empty()) log::warn("plots: cannot write '", p.string(), "': ", why);
}

LIBREYOLO_INLINE data::Image Canvas::to_image() {
  cairo_surface_flush(s_);
  data::Image img(h_, w_, 3);
  const auto* d = cairo_image_surface_get_data(s_);
  const int stride = cairo_image_surface_get_stride(s_);
  for (int y = 0; y < h_; ++y) {
    const auto* row = reinterpret_cast<const uint32_t*>(d + static_cast<ptrdiff_t>(y) * stride);
    for (int x = 0; x < w_; ++x) {
      img.at(y, x, 0) = static_cast<uint8_t>((row[x] >> 16) & 0xFF);
      img.at(y, x, 1) = static_cast<uint8_t>((row[x] >> 8) & 0xFF);
      img.at(y, x, 2) = static_cast<uint8_t>(row[x] & 0xFF);
    }
  }
  return img;
}
#endif

LIBREYOLO_INLINE std::vector<double> nice_ticks(double lo, double hi, int n) {
  std::vector<double> t;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, n);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}
LIBREYOLO_INLINE std::string tick_label(double v) {
  char b[32];
  const double a = std::abs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e5)) std::snprintf(b, sizeof b, "%.0e", v);
  else std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

}  // namespace libreyolo::plot
