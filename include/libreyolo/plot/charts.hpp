#pragma once
// The pictures of a run directory: results.png (each results.csv column per epoch), labels.png (class
// histogram, box centres and sizes), confusion_matrix.png, PR_curve.png, and annotated images (boxes with
// class names and scores; val_batch0_labels.jpg / val_batch0_pred.jpg are grids of them). Every function
// returns false without writing when this build has no cairo (plot::usable() says so once).
#include <libreyolo/core/api.hpp>
#include <libreyolo/data/draw.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/image_ops.hpp>
#include <libreyolo/plot/canvas.hpp>
#include <libreyolo/plot/curves.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace libreyolo::plot {

namespace detail {
LIBREYOLO_INLINE std::string fixed(double v, int d);
LIBREYOLO_INLINE std::string name_of(const std::vector<std::string>& names, int64_t c);

#if defined(LIBREYOLO_HAVE_CAIRO)
// One x-y panel: frame, nice ticks, title; returns the mapping of data to pixels.
struct Panel {
  double x, y, w, h;  // plot area in pixels
  double x0, x1, y0, y1;
  double px(double v) const { return x + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * w; }
  double py(double v) const { return y + h - (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5) * h; }
};
LIBREYOLO_INLINE Panel axes(Canvas& c, double left, double top, double width, double height, double x0, double x1, double y0,
                  double y1, const std::string& title, const std::string& xlabel = "", const std::string& ylabel = "",
                  bool xticks = true);
LIBREYOLO_INLINE void polyline(Canvas& c, const Panel& p, const std::vector<double>& xs, const std::vector<double>& ys, Color col,
                     double width, bool dots);
#endif
}  // namespace detail

// results.png: one panel per numeric column of the results rows (train/…, val/…, lr/…) against epoch.
LIBREYOLO_INLINE bool results_png(const nlohmann::json& rows, const std::filesystem::path& out);

// labels.png: boxes per class, box centres (x, y) and box sizes (w, h), normalised to the image.
// boxes: class, cx, cy, w, h (normalised).
LIBREYOLO_INLINE bool labels_png(const std::vector<std::string>& names, const std::vector<std::array<float, 5>>& boxes,
                       const std::filesystem::path& out);

// labels.png of a classification set: images per class.
LIBREYOLO_INLINE bool class_histogram_png(const std::vector<std::string>& names, const std::vector<double>& count,
                                const std::filesystem::path& out);

// confusion_matrix.png: columns true class, rows predicted class, each column normalised to 1 (counts
// in brackets when there is room); detection adds a "background" row and column.
LIBREYOLO_INLINE bool confusion_png(const ConfusionMatrix& m, const std::vector<std::string>& names, const std::filesystem::path& out,
                          bool with_background = true);

// PR_curve.png: precision against recall at IoU 0.5, one thin line per class and the mean in bold.
LIBREYOLO_INLINE bool pr_curve_png(const std::vector<PrCurve>& curves, const std::vector<std::string>& names,
                         const std::filesystem::path& out);

// Boxes (pixel xyxy) drawn on `img` with "name score" labels (score < 0: ground truth, name only). Without
// cairo: outlines only.
LIBREYOLO_INLINE void annotate(data::Image& img, const std::vector<DetBox>& boxes, const std::vector<std::string>& names,
                     bool show_score);

// A caption drawn along the top of `img` (classification: "name 0.93"); green or red background when
// `ok` is given. Without cairo nothing is drawn.
LIBREYOLO_INLINE void caption(data::Image& img, const std::string& text, int ok = -1);

// The uint8 [3, H, W] tensor of a batch as an Image.
LIBREYOLO_INLINE data::Image image_from_chw(const torch::Tensor& chw);

// Tiles up to 16 images (each fitted into a `tile` square, in order) into one JPEG.
LIBREYOLO_INLINE bool grid_jpeg(const std::vector<data::Image>& imgs, const std::filesystem::path& out, int tile = 320);

}  // namespace libreyolo::plot

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/plot/charts-inl.hpp>
#endif
