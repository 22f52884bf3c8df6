#pragma once
// A small drawing surface over cairo (Debian libcairo2-dev): PNG charts with text, and text drawn on
// images. cairo is optional at build time: CMake finds it with pkg-config and defines
// LIBREYOLO_HAVE_CAIRO; without it plot::available is false, the charts are not written (one notice)
// and images get box outlines without text.
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/image_ops.hpp>

#if defined(LIBREYOLO_HAVE_CAIRO)
#include <cairo.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

namespace libreyolo::plot {

#if defined(LIBREYOLO_HAVE_CAIRO)
inline constexpr bool available = true;
#else
inline constexpr bool available = false;
#endif

// Whether plots can be drawn; without cairo, says so once.
inline bool usable() {
  if constexpr (!available)
    log::notice_once("plot.no_cairo", "plots: this build has no cairo (Debian: libcairo2-dev, then re-run cmake); "
                                      "results.png, labels.png, confusion_matrix.png and the validation images are not written");
  return available;
}

struct Color {
  double r = 0, g = 0, b = 0;
};
// The class colours (Ultralytics' palette), by class id.
inline Color class_color(int64_t cls) {
  static constexpr std::array<std::array<int, 3>, 20> p = {{{255, 56, 56},  {255, 157, 151}, {255, 112, 31}, {255, 178, 29},
                                                            {207, 210, 49}, {72, 249, 10},   {146, 204, 23}, {61, 219, 134},
                                                            {26, 147, 52},  {0, 212, 187},   {44, 153, 168}, {0, 194, 255},
                                                            {52, 69, 147},  {100, 115, 255}, {0, 24, 236},   {132, 56, 255},
                                                            {82, 0, 133},   {203, 56, 255},  {255, 149, 200}, {255, 55, 199}}};
  const auto& c = p[static_cast<size_t>((cls % 20 + 20) % 20)];
  return {c[0] / 255.0, c[1] / 255.0, c[2] / 255.0};
}

#if defined(LIBREYOLO_HAVE_CAIRO)
// A cairo image surface with a context; RAII.
class Canvas {
 public:
  Canvas(int w, int h, Color bg = {1, 1, 1}) : w_(w), h_(h) {
    s_ = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    cr_ = cairo_create(s_);
    rgb(bg);
    cairo_paint(cr_);
    cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    font(12);
  }
  // A canvas holding `img` (RGB), to draw on and read back with to_image().
  explicit Canvas(const data::Image& img) : Canvas(img.w, img.h) {
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
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;
  ~Canvas() {
    cairo_destroy(cr_);
    cairo_surface_destroy(s_);
  }
  int w() const { return w_; }
  int h() const { return h_; }
  cairo_t* cr() { return cr_; }

  void rgb(Color c, double a = 1) { cairo_set_source_rgba(cr_, c.r, c.g, c.b, a); }
  void font(double size, bool bold = false) {
    cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
  }
  void line(double x1, double y1, double x2, double y2, Color c, double width = 1) {
    rgb(c);
    cairo_set_line_width(cr_, width);
    cairo_move_to(cr_, x1, y1);
    cairo_line_to(cr_, x2, y2);
    cairo_stroke(cr_);
  }
  void rect(double x, double y, double w, double h, Color c, double alpha = 1) {
    rgb(c, alpha);
    cairo_rectangle(cr_, x, y, w, h);
    cairo_fill(cr_);
  }
  void frame(double x, double y, double w, double h, Color c, double width = 1) {
    rgb(c);
    cairo_set_line_width(cr_, width);
    cairo_rectangle(cr_, x, y, w, h);
    cairo_stroke(cr_);
  }
  void dot(double x, double y, double r, Color c, double alpha = 1) {
    rgb(c, alpha);
    cairo_arc(cr_, x, y, r, 0, 2 * M_PI);
    cairo_fill(cr_);
  }
  double text_width(const std::string& t) {
    cairo_text_extents_t e;
    cairo_text_extents(cr_, t.c_str(), &e);
    return e.x_advance;
  }
  // Text with its baseline at y; align 0 left, 0.5 centred, 1 right.
  void text(const std::string& t, double x, double y, Color c = {0.15, 0.15, 0.15}, double align = 0) {
    rgb(c);
    cairo_move_to(cr_, x - align * text_width(t), y);
    cairo_show_text(cr_, t.c_str());
  }
  void text_vertical(const std::string& t, double x, double y, Color c = {0.15, 0.15, 0.15}) {
    cairo_save(cr_);
    cairo_translate(cr_, x, y);
    cairo_rotate(cr_, -M_PI / 2);
    text(t, 0, 0, c, 0.5);
    cairo_restore(cr_);
  }
  void clip(double x, double y, double w, double h) {
    cairo_save(cr_);
    cairo_rectangle(cr_, x, y, w, h);
    cairo_clip(cr_);
  }
  void unclip() { cairo_restore(cr_); }

  void write_png(const std::filesystem::path& p) {
    cairo_surface_flush(s_);
    std::filesystem::create_directories(p.parent_path().empty() ? "." : p.parent_path());
    if (cairo_surface_write_to_png(s_, p.c_str()) != CAIRO_STATUS_SUCCESS)
      log::warn("plots: cannot write '", p.string(), "'");
  }
  data::Image to_image() {
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

 private:
  int w_, h_;
  cairo_surface_t* s_ = nullptr;
  cairo_t* cr_ = nullptr;
};
#endif

// Axis ticks: about `n` "nice" values (1, 2, 5 x 10^k steps) covering [lo, hi].
inline std::vector<double> nice_ticks(double lo, double hi, int n = 5) {
  std::vector<double> t;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, n);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}
inline std::string tick_label(double v) {
  char b[32];
  const double a = std::abs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e5)) std::snprintf(b, sizeof b, "%.0e", v);
  else std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

}  // namespace libreyolo::plot
