// The run directory's pictures (plot/): what they are computed from, and that the PNGs hold a drawing.
#include <doctest/doctest.h>

#include "support.hpp"

#include <libreyolo/plot/charts.hpp>

namespace fs = std::filesystem;
namespace pl = libreyolo::plot;

namespace {
// Fraction of pixels of a PNG that are not (near) white: a drawn chart has lines, bars, text.
double ink(const fs::path& p) {
  auto img = libreyolo::data::read_image(p);
  size_t dark = 0;
  for (size_t i = 0; i + 2 < img.px.size(); i += 3)
    if (img.px[i] < 200 || img.px[i + 1] < 200 || img.px[i + 2] < 200) ++dark;
  return double(dark) / double(img.px.size() / 3);
}
}  // namespace

TEST_CASE("plot: confusion matrix follows the matching rules (conf, IoU, one to one, background)") {
  pl::ConfusionMatrix m(2);
  std::vector<pl::DetBox> gt{{0, 0, 10, 10, 0}, {20, 20, 30, 30, 1}, {50, 50, 60, 60, 1}};
  std::vector<pl::DetBox> det{{0, 0, 10, 10, 0, 0.9},     // matches gt 0, right class
                              {1, 1, 10, 10, 0, 0.8},     // second one on gt 0: unmatched -> background true
                              {20, 20, 30, 30, 0, 0.7},   // on gt 1 with the wrong class
                              {50, 50, 60, 60, 1, 0.1},   // below conf 0.25: ignored, so gt 2 is missed
                              {80, 80, 90, 90, 1, 0.5}};  // nothing there
  m.add_detections(det, gt);
  CHECK(m.get(0, 0) == 1);
  CHECK(m.get(0, 1) == 1);  // predicted 0, true 1
  CHECK(m.get(2, 1) == 1);  // gt 2 missed: background predicted
  CHECK(m.get(0, 2) == 1);  // duplicate
  CHECK(m.get(1, 2) == 1);  // false positive
  CHECK(m.total() == 5);
}

TEST_CASE("plot: PR curve and AP50 of a ranked list") {
  pl::PrCollector pr;
  std::vector<pl::DetBox> gt{{0, 0, 10, 10, 0}, {20, 20, 30, 30, 0}};
  // best-scored detection wrong, then both right: precision 0, 1/2, 2/3 at recall 0, 1/2, 1
  pr.add({{50, 50, 60, 60, 0, 0.9}, {0, 0, 10, 10, 0, 0.8}, {20, 20, 30, 30, 0, 0.7}}, gt);
  auto c = pr.curves();
  REQUIRE(c.size() == 1);
  CHECK(c[0].n_gt == 2);
  CHECK(c[0].precision[0] == doctest::Approx(2.0 / 3));   // envelope: max precision at recall >= 0
  CHECK(c[0].precision[100] == doctest::Approx(2.0 / 3));
  CHECK(c[0].ap50 == doctest::Approx(2.0 / 3));
  pl::PrCollector perfect;
  perfect.add({{0, 0, 10, 10, 0, 0.9}, {20, 20, 30, 30, 0, 0.8}}, gt);
  CHECK(perfect.curves()[0].ap50 == doctest::Approx(1.0));
}

TEST_CASE("plot: nice ticks fit their range") {
  auto t = pl::nice_ticks(0, 1, 5);
  REQUIRE(t.size() >= 3);
  CHECK(t.front() == doctest::Approx(0));
  CHECK(t.back() == doctest::Approx(1));
  auto u = pl::nice_ticks(0.0123, 0.0987, 4);
  for (double v : u) CHECK((v >= 0.0123 - 1e-12 && v <= 0.0987 + 1e-12));
  CHECK(u.size() <= 9);
}

TEST_CASE("plot: results, labels, confusion, PR and annotated images are drawn (with cairo)") {
  lry_test::TempDir td("lry_plot");
  nlohmann::json rows = nlohmann::json::array();
  for (int e = 1; e <= 6; ++e)
    rows.push_back({{"epoch", e}, {"time_s", 1.0}, {"train/box", 2.0 / e}, {"train/cls", 3.0 / e},
                    {"val/mAP50", e % 2 ? nlohmann::json() : nlohmann::json(0.1 * e)}, {"lr/pg0", 0.01 / e}});
  const bool drawn = pl::results_png(rows, td / "results.png");
  CHECK(drawn == pl::available);
  std::vector<std::array<float, 5>> boxes;
  for (int i = 0; i < 200; ++i) boxes.push_back({float(i % 3), (i % 17) / 17.f, (i % 11) / 11.f, 0.1f + (i % 5) / 10.f, 0.2f});
  CHECK(pl::labels_png({"circle", "square", "star"}, boxes, td / "labels.png") == pl::available);
  pl::ConfusionMatrix m(3);
  m.add_detections({{0, 0, 10, 10, 1, 0.9}}, {{0, 0, 10, 10, 1}, {20, 20, 30, 30, 2}});
  CHECK(pl::confusion_png(m, {"a", "b", "c"}, td / "confusion_matrix.png") == pl::available);
  pl::PrCollector pr;
  pr.add({{0, 0, 10, 10, 0, 0.9}}, {{0, 0, 10, 10, 0}, {20, 20, 30, 30, 1}});
  CHECK(pl::pr_curve_png(pr.curves(), {"a", "b"}, td / "PR_curve.png") == pl::available);
  libreyolo::data::Image img(120, 160, 3, 255);
  pl::annotate(img, {{10, 10, 80, 70, 0, 0.87}}, {"circle"}, true);
  size_t coloured = 0;
  for (size_t i = 0; i + 2 < img.px.size(); i += 3) coloured += img.px[i] != 255 || img.px[i + 1] != 255;
  CHECK(coloured > 200);  // the outline (and, with cairo, the label box) is drawn
  CHECK(pl::grid_jpeg({img, img, img}, td / "grid.jpg", 100));
  auto grid = libreyolo::data::read_image(td / "grid.jpg");
  CHECK(grid.w == 200);
  CHECK(grid.h == 200);
  if constexpr (pl::available) {
    for (const char* f : {"results.png", "labels.png", "confusion_matrix.png", "PR_curve.png"}) {
      REQUIRE_MESSAGE(fs::exists(td / f), f);
      const double k = ink(td / f);
      CHECK_MESSAGE(k > 0.01, f, " ink ", k);
      CHECK_MESSAGE(k < 0.6, f, " ink ", k);
    }
    if (const char* keep = std::getenv("LIBREYOLO_PLOT_KEEP")) fs::copy(td.path, keep, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  } else {
    CHECK_FALSE(fs::exists(td / "results.png"));
  }
}
