#pragma once
// A small drawing surface over cairo (Debian libcairo2-dev): PNG charts with text, and text drawn on
// images. cairo is optional at build time: CMake finds it with pkg-config and defines
// LIBREYOLO_HAVE_CAIRO; without it plot::available is false, the charts are not written (one notice)
// and images get box outlines without text.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
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
LIBREYOLO_INLINE bool usable();

struct Color {
  double r = 0, g = 0, b = 0;
};
// The class colours (Ultralytics' palette), by class id.
LIBREYOLO_INLINE Color class_color(int64_t cls);

#if defined(LIBREYOLO_HAVE_CAIRO)
// A cairo image surface with a context; RAII.
class Canvas {
 public:
  Canvas(int w, int h, Color bg = {1, 1, 1});
  // A canvas holding `img` (RGB), to draw on and read back with to_image().
  explicit Canvas(const data::Image& img);
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;
  ~Canvas();
  int w() const { return w_; }
  int h() const { return h_; }
  cairo_t* cr() { return cr_; }

  void rgb(Color c, double a = 1) { cairo_set_source_rgba(cr_, c.r, c.g, c.b, a); }
  void font(double size, bool bold = false);
  void line(double x1, double y1, double x2, double y2, Color c, double width = 1);
  void rect(double x, double y, double w, double h, Color c, double alpha = 1);
  void frame(double x, double y, double w, double h, Color c, double width = 1);
  void dot(double x, double y, double r, Color c, double alpha = 1);
  double text_width(const std::string& t);
  // Text with its baseline at y; align 0 left, 0.5 centred, 1 right.
  void text(const std::string& t, double x, double y, Color c = {0.15, 0.15, 0.15}, double align = 0);
  void text_vertical(const std::string& t, double x, double y, Color c = {0.15, 0.15, 0.15});
  void clip(double x, double y, double w, double h);
  void unclip() { cairo_restore(cr_); }

  void write_png(const std::filesystem::path& p);
  data::Image to_image();

 private:
  int w_, h_;
  cairo_surface_t* s_ = nullptr;
  cairo_t* cr_ = nullptr;
};
#endif

// Axis ticks: about `n` "nice" values (1, 2, 5 x 10^k steps) covering [lo, hi].
LIBREYOLO_INLINE std::vector<double> nice_ticks(double lo, double hi, int n = 5);
LIBREYOLO_INLINE std::string tick_label(double v);

}  // namespace libreyolo::plot

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/plot/canvas-inl.hpp>
#endif
