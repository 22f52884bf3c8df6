#pragma once
// Definitions of charts.hpp (core/api.hpp): included by charts.hpp when header-only, compiled once otherwise.
#include <libreyolo/plot/charts.hpp>

namespace libreyolo::plot {

namespace detail {
LIBREYOLO_INLINE std::string fixed(double v, int d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", d, v);
  return b;
}
LIBREYOLO_INLINE std::string name_of(const std::vector<std::string>& names, int64_t c) {
  return c >= 0 && c < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c)] : std::to_string(c);
}

#if defined(LIBREYOLO_HAVE_CAIRO)
LIBREYOLO_INLINE Panel axes(Canvas& c, double left, double top, double width, double height, double x0, double x1, double y0,
                  double y1, const std::string& title, const std::string& xlabel, const std::string& ylabel,
                  bool xticks) {
  Panel p{left + 46, top + 24, width - 58, height - 58, x0, x1, y0, y1};
  if (!(p.y1 > p.y0)) p.y0 -= 0.5, p.y1 += 0.5;
  if (!(p.x1 > p.x0)) p.x0 -= 0.5, p.x1 += 0.5;
  c.font(13, true);
  c.text(title, left + width / 2, top + 16, {0.1, 0.1, 0.1}, 0.5);
  c.font(10);
  for (double t : nice_ticks(p.y0, p.y1, 4)) {
    c.line(p.x, p.py(t), p.x + p.w, p.py(t), {0.92, 0.92, 0.92});
    c.text(tick_label(t), p.x - 4, p.py(t) + 3.5, {0.35, 0.35, 0.35}, 1);
  }
  std::vector<double> xt = xticks ? nice_ticks(p.x0, p.x1, 5) : std::vector<double>{};
  if (xlabel == "epoch") std::erase_if(xt, [](double v) { return v != std::floor(v); });  // whole epochs only
  for (double t : xt) {
    c.line(p.px(t), p.y, p.px(t), p.y + p.h, {0.92, 0.92, 0.92});
    c.text(tick_label(t), p.px(t), p.y + p.h + 13, {0.35, 0.35, 0.35}, 0.5);
  }
  c.frame(p.x, p.y, p.w, p.h, {0.55, 0.55, 0.55});
  if (!xlabel.empty()) c.text(xlabel, p.x + p.w / 2, p.y + p.h + 27, {0.3, 0.3, 0.3}, 0.5);
  if (!ylabel.empty()) c.text_vertical(ylabel, left + 10, p.y + p.h / 2, {0.3, 0.3, 0.3});
  return p;
}
LIBREYOLO_INLINE void polyline(Canvas& c, const Panel& p, const std::vector<double>& xs, const std::vector<double>& ys, Color col,
                     double width, bool dots) {
  cairo_t* cr = c.cr();
  c.clip(p.x, p.y, p.w, p.h);
  c.rgb(col);
  cairo_set_line_width(cr, width);
  bool open = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!std::isfinite(ys[i])) continue;  // sparse series (validation every N epochs): join the measured points
    if (open) cairo_line_to(cr, p.px(xs[i]), p.py(ys[i]));
    else cairo_move_to(cr, p.px(xs[i]), p.py(ys[i])), open = true;
  }
  cairo_stroke(cr);
  if (dots)
    for (size_t i = 0; i < xs.size(); ++i)
      if (std::isfinite(ys[i])) c.dot(p.px(xs[i]), p.py(ys[i]), 2.5, col);
  c.unclip();
}
#endif
}  // namespace detail

LIBREYOLO_INLINE bool results_png(const nlohmann::json& rows, const std::filesystem::path& out) {
  if (!usable() || !rows.is_array() || rows.empty()) return false;
#if defined(LIBREYOLO_HAVE_CAIRO)
  std::vector<std::string> keys;
  for (const auto& r : rows)
    for (const auto& [k, v] : r.items())
      if (k != "epoch" && k != "time_s" && (v.is_number() || v.is_null()) &&
          std::find(keys.begin(), keys.end(), k) == keys.end())
        keys.push_back(k);
  // train/ losses first, then val/ metrics, then learning rates (one panel: the first group's).
  std::vector<std::string> shown;
  for (const char* prefix : {"train/", "val/"})
    for (const auto& k : keys)
      if (k.rfind(prefix, 0) == 0 && k.find("AP_") == std::string::npos && k != "val/AR100") shown.push_back(k);
  for (const auto& k : keys)
    if (k.rfind("lr/", 0) == 0) {
      shown.push_back(k);
      break;
    }
  if (shown.empty()) return false;
  const int cols = std::min<int>(5, static_cast<int>(shown.size()));
  const int nrows = (static_cast<int>(shown.size()) + cols - 1) / cols;
  const double pw = 300, ph = 230;
  Canvas c(static_cast<int>(cols * pw), static_cast<int>(nrows * ph));
  for (size_t i = 0; i < shown.size(); ++i) {
    std::vector<double> xs, ys;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& r : rows) {
      if (!r.contains("epoch")) continue;
      const auto v = r.contains(shown[i]) && r.at(shown[i]).is_number() ? r.at(shown[i]).get<double>()
                                                                         : std::numeric_limits<double>::quiet_NaN();
      xs.push_back(r.at("epoch").get<double>());
      ys.push_back(v);
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (!std::isfinite(lo)) lo = 0, hi = 1;
    if (hi - lo < 1e-12) {  // one value (or a flat line): a range around it that stays >= 0 for metrics
      const double a = std::max(std::abs(hi) * 0.5, 0.05);
      lo = lo >= 0 ? std::max(0.0, lo - a) : lo - a;
      hi += a;
    }
    const double pad = (hi - lo) * 0.08;
    const double x0 = xs.empty() ? 0 : xs.front(), x1 = xs.empty() ? 1 : xs.back();
    const auto panel = detail::axes(c, (i % cols) * pw, (i / cols) * ph, pw, ph, x0, std::max(x1, x0 + 1), lo - pad,
                                    hi + pad, shown[i], "epoch");
    detail::polyline(c, panel, xs, ys, {0.12, 0.47, 0.71}, 2, true);
  }
  c.write_png(out);
  return true;
#else
  (void)out;
  return false;
#endif
}

LIBREYOLO_INLINE bool labels_png(const std::vector<std::string>& names, const std::vector<std::array<float, 5>>& boxes,
                       const std::filesystem::path& out) {
  if (!usable()) return false;
#if defined(LIBREYOLO_HAVE_CAIRO)
  const double pw = 380, ph = 330;
  Canvas c(static_cast<int>(3 * pw), static_cast<int>(ph));
  std::vector<double> count(names.size(), 0);
  for (const auto& b : boxes)
    if (b[0] >= 0 && static_cast<size_t>(b[0]) < count.size()) count[static_cast<size_t>(b[0])] += 1;
  const double top = count.empty() ? 1 : *std::max_element(count.begin(), count.end());
  auto p = detail::axes(c, 0, 0, pw, ph, -0.5, std::max<double>(0.5, double(names.size()) - 0.5), 0, std::max(1.0, top * 1.1),
                        "boxes per class (" + std::to_string(boxes.size()) + ")", "", "boxes", false);
  const double bw = p.w / std::max<size_t>(1, names.size()) * 0.7;
  for (size_t k = 0; k < names.size(); ++k) {
    c.rect(p.px(double(k)) - bw / 2, p.py(count[k]), bw, p.py(0) - p.py(count[k]), class_color(int64_t(k)));
  }
  c.font(names.size() > 12 ? 8 : 10);
  for (size_t k = 0; k < names.size(); ++k) c.text(names[k], p.px(double(k)), p.y + p.h + 13, {0.2, 0.2, 0.2}, 0.5);
  auto q = detail::axes(c, pw, 0, pw, ph, 0, 1, 0, 1, "box centres", "x", "y");
  for (const auto& b : boxes) c.dot(q.px(b[1]), q.py(b[2]), 1.6, class_color(int64_t(b[0])), 0.45);
  auto r = detail::axes(c, 2 * pw, 0, pw, ph, 0, 1, 0, 1, "box sizes", "width", "height");
  for (const auto& b : boxes) c.dot(r.px(b[3]), r.py(b[4]), 1.6, class_color(int64_t(b[0])), 0.45);
  c.write_png(out);
  return true;
#else
  (void)names, (void)boxes, (void)out;
  return false;
#endif
}

LIBREYOLO_INLINE bool class_histogram_png(const std::vector<std::string>& names, const std::vector<double>& count,
                                const std::filesystem::path& out) {
  if (!usable()) return false;
#if defined(LIBREYOLO_HAVE_CAIRO)
  const double pw = std::max(420.0, 40.0 * double(names.size())), ph = 330;
  Canvas c(static_cast<int>(pw), static_cast<int>(ph));
  double total = 0, top = 1;
  for (double v : count) total += v, top = std::max(top, v);
  auto p = detail::axes(c, 0, 0, pw, ph, -0.5, std::max<double>(0.5, double(names.size()) - 0.5), 0, top * 1.1,
                        "images per class (" + detail::fixed(total, 0) + ")", "", "images", false);
  const double bw = p.w / std::max<size_t>(1, names.size()) * 0.7;
  for (size_t k = 0; k < names.size() && k < count.size(); ++k)
    c.rect(p.px(double(k)) - bw / 2, p.py(count[k]), bw, p.py(0) - p.py(count[k]), class_color(int64_t(k)));
  c.font(names.size() > 12 ? 8 : 10);
  for (size_t k = 0; k < names.size(); ++k) c.text(names[k], p.px(double(k)), p.y + p.h + 13, {0.2, 0.2, 0.2}, 0.5);
  c.write_png(out);
  return true;
#else
  (void)names, (void)count, (void)out;
  return false;
#endif
}

LIBREYOLO_INLINE bool confusion_png(const ConfusionMatrix& m, const std::vector<std::string>& names, const std::filesystem::path& out,
                          bool with_background) {
  if (!usable()) return false;
#if defined(LIBREYOLO_HAVE_CAIRO)
  const int64_t n = m.nc() + (with_background ? 1 : 0);
  const double cell = std::clamp(560.0 / double(n), 14.0, 64.0);
  const double left = 110, top = 50;
  Canvas c(std::max(460, static_cast<int>(left + n * cell + 30)), static_cast<int>(top + n * cell + 100));
  auto label = [&](int64_t k) { return k == m.nc() ? std::string("background") : detail::name_of(names, k); };
  c.font(14, true);
  c.text("Confusion matrix (columns: true class, normalised)", c.w() / 2.0, 24, {0.1, 0.1, 0.1}, 0.5);
  for (int64_t t = 0; t < n; ++t) {
    double col = 0;
    for (int64_t p = 0; p < n; ++p) col += m.get(p, t);
    for (int64_t p = 0; p < n; ++p) {
      const double v = col > 0 ? m.get(p, t) / col : 0;
      const Color fill{1 - 0.85 * v, 1 - 0.6 * v, 1 - 0.25 * v};
      c.rect(left + t * cell, top + p * cell, cell, cell, fill);
      c.frame(left + t * cell, top + p * cell, cell, cell, {0.85, 0.85, 0.85}, 0.5);
      if (cell >= 26 && m.get(p, t) > 0) {
        c.font(std::min(12.0, cell / 3.2));
        c.text(detail::fixed(v, 2), left + (t + 0.5) * cell, top + (p + 0.5) * cell + 4, v > 0.55 ? Color{1, 1, 1} : Color{0.1, 0.1, 0.1}, 0.5);
      }
    }
  }
  c.font(std::min(11.0, cell * 0.6));
  for (int64_t k = 0; k < n; ++k) {
    c.text(label(k), left - 6, top + (k + 0.5) * cell + 4, {0.2, 0.2, 0.2}, 1);
    cairo_save(c.cr());
    cairo_translate(c.cr(), left + (k + 0.5) * cell + 4, top + n * cell + 8);
    cairo_rotate(c.cr(), M_PI / 4);
    c.text(label(k), 0, 0, {0.2, 0.2, 0.2});
    cairo_restore(c.cr());
  }
  c.font(12);
  c.text_vertical("predicted", 14, top + n * cell / 2);
  c.text("true", left + n * cell / 2, c.h() - 8.0, {0.2, 0.2, 0.2}, 0.5);
  c.write_png(out);
  return true;
#else
  (void)m, (void)names, (void)out, (void)with_background;
  return false;
#endif
}

LIBREYOLO_INLINE bool pr_curve_png(const std::vector<PrCurve>& curves, const std::vector<std::string>& names,
                         const std::filesystem::path& out) {
  if (!usable() || curves.empty()) return false;
#if defined(LIBREYOLO_HAVE_CAIRO)
  Canvas c(760, 560);
  auto p = detail::axes(c, 0, 0, 560, 560, 0, 1, 0, 1, "Precision-recall (IoU 0.5)", "recall", "precision");
  std::vector<double> mean(101, 0);
  double map = 0;
  int used = 0;
  for (const auto& pc : curves) {
    if (pc.n_gt == 0) continue;
    detail::polyline(c, p, pc.recall, pc.precision, class_color(pc.cls), 1.2, false);
    for (size_t i = 0; i < mean.size() && i < pc.precision.size(); ++i) mean[i] += pc.precision[i];
    map += pc.ap50, ++used;
  }
  if (used) {
    for (auto& v : mean) v /= used;
    map /= used;
  }
  std::vector<double> xs(101);
  for (int i = 0; i <= 100; ++i) xs[static_cast<size_t>(i)] = i / 100.0;
  detail::polyline(c, p, xs, mean, {0.1, 0.2, 0.6}, 3, false);
  double y = 40;
  c.font(11);
  for (const auto& pc : curves) {
    if (pc.n_gt == 0 || y > 520) continue;
    c.rect(570, y - 9, 12, 10, class_color(pc.cls));
    c.text(detail::name_of(names, pc.cls) + " " + detail::fixed(pc.ap50, 3), 588, y);
    y += 16;
  }
  c.font(11, true);
  c.rect(570, y - 9, 12, 10, {0.1, 0.2, 0.6});
  c.text("all " + detail::fixed(map, 3) + " AP50", 588, y);
  c.write_png(out);
  return true;
#else
  (void)names, (void)out;
  return false;
#endif
}

LIBREYOLO_INLINE void annotate(data::Image& img, const std::vector<DetBox>& boxes, const std::vector<std::string>& names,
                     bool show_score) {
  const double lw = std::max(1.0, std::round(std::min(img.w, img.h) / 200.0));
#if defined(LIBREYOLO_HAVE_CAIRO)
  Canvas c(img);
  const double fs = std::clamp(std::min(img.w, img.h) / 30.0, 9.0, 22.0);
  c.font(fs, true);
  for (const auto& b : boxes) {
    const Color col = class_color(b.cls);
    c.frame(b.x1, b.y1, b.x2 - b.x1, b.y2 - b.y1, col, lw + 1);
    const std::string t = detail::name_of(names, b.cls) + (show_score ? " " + detail::fixed(b.score, 2) : "");
    const double tw = c.text_width(t) + 6, th = fs + 4;
    const double ty = b.y1 - th >= 0 ? b.y1 - th : b.y1;
    const double tx = std::max(0.0, std::min(b.x1 - lw / 2, img.w - tw));  // the label stays inside the image
    c.rect(tx, ty, tw, th, col);
    const bool light = col.r * 0.299 + col.g * 0.587 + col.b * 0.114 > 0.6;
    c.text(t, tx + 3, ty + fs, light ? Color{0, 0, 0} : Color{1, 1, 1});
  }
  img = c.to_image();
#else
  (void)names, (void)show_score;
  for (const auto& b : boxes) {
    const auto col = class_color(b.cls);
    const data::Texture tex = data::Texture::solid({static_cast<uint8_t>(col.r * 255), static_cast<uint8_t>(col.g * 255),
                                                    static_cast<uint8_t>(col.b * 255)});
    data::draw_line(img, {b.x1, b.y1}, {b.x2, b.y1}, lw + 1, tex);
    data::draw_line(img, {b.x2, b.y1}, {b.x2, b.y2}, lw + 1, tex);
    data::draw_line(img, {b.x2, b.y2}, {b.x1, b.y2}, lw + 1, tex);
    data::draw_line(img, {b.x1, b.y2}, {b.x1, b.y1}, lw + 1, tex);
  }
#endif
}

LIBREYOLO_INLINE void caption(data::Image& img, const std::string& text, int ok) {
#if defined(LIBREYOLO_HAVE_CAIRO)
  Canvas c(img);
  const double fs = std::clamp(img.w / 9.0, 9.0, 20.0);
  c.font(fs, true);
  const Color bg = ok < 0 ? Color{0.1, 0.1, 0.1} : ok ? Color{0.1, 0.55, 0.2} : Color{0.75, 0.1, 0.1};
  c.rect(0, 0, std::min<double>(img.w, c.text_width(text) + 8), fs + 6, bg, 0.85);
  c.text(text, 4, fs + 1, {1, 1, 1});
  img = c.to_image();
#else
  (void)img, (void)text, (void)ok;
#endif
}

LIBREYOLO_INLINE data::Image image_from_chw(const torch::Tensor& chw) {
  auto t = chw.to(torch::kCPU).to(torch::kUInt8).permute({1, 2, 0}).contiguous();
  data::Image img(static_cast<int>(t.size(0)), static_cast<int>(t.size(1)), 3);
  std::memcpy(img.px.data(), t.data_ptr<uint8_t>(), img.px.size());
  return img;
}

LIBREYOLO_INLINE bool grid_jpeg(const std::vector<data::Image>& imgs, const std::filesystem::path& out, int tile) {
  if (imgs.empty()) return false;
  const int n = static_cast<int>(std::min<size_t>(16, imgs.size()));
  const int cols = static_cast<int>(std::ceil(std::sqrt(double(n))));
  const int rows = (n + cols - 1) / cols;
  data::Image grid(rows * tile, cols * tile, 3, 255);
  for (int i = 0; i < n; ++i) {
    const auto& src = imgs[static_cast<size_t>(i)];
    const double s = std::min(double(tile) / src.w, double(tile) / src.h);
    const int w = std::max(1, static_cast<int>(src.w * s)), h = std::max(1, static_cast<int>(src.h * s));
    const data::Image r = (w == src.w && h == src.h) ? src : data::resize_bilinear(src, h, w);
    const int ox = (i % cols) * tile, oy = (i / cols) * tile;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < 3; ++ch) grid.at(oy + y, ox + x, ch) = r.at(y, x, std::min(ch, r.c - 1));
  }
  std::filesystem::create_directories(out.parent_path().empty() ? "." : out.parent_path());
  data::write_jpeg(out, grid, 90);
  return true;
}

}  // namespace libreyolo::plot
