// YOLOX's (and RTMDet's) training pipeline, the original's MosaicMixupDataset + TrainTransform
// (families/yolox/augment.hpp): its affine (about the canvas origin, no centring) and box warp against the
// original's get_affine_matrix / apply_affine_to_bboxes, its mixup boxes against its _mixup, mosaic
// geometry, and the no-aug epochs (no affine, no mixup: the image alone, letterboxed).
#include <libreyolo/data/detect.hpp>
#include <libreyolo/families/rtmdet/family.hpp>
#include <libreyolo/families/yolox/augment.hpp>
#include <libreyolo/families/yolox/family.hpp>

#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace fs = std::filesystem;
using ly::data::DetBox;
using ly::data::DetBoxes;
using ly::data::Image;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// n images of h x w (long side 64 = imgsz), each black with one rectangle of its own grey level k + 1
// ... (k + 1) * 20, labelled class k % 3.
struct RectSet {
  lry_test::TempDir dir{"lry_yolox_pipeline"};
  std::vector<fs::path> files;
  std::vector<std::array<int, 4>> rects;
  RectSet(int n, int h, int w) {
    for (int k = 0; k < n; ++k) {
      const int x1 = 4 + 3 * k, y1 = 3 + 2 * k, x2 = x1 + 16 + k, y2 = y1 + 12 + k;
      Image img(h, w, 3, 0);
      for (int y = y1; y < y2; ++y)
        for (int x = x1; x < x2; ++x)
          for (int c = 0; c < 3; ++c) img.at(y, x, c) = static_cast<uint8_t>((k + 1) * 20);
      files.push_back(dir.path / "images" / (std::to_string(k) + ".png"));
      fs::create_directories(files.back().parent_path());
      ly::data::write_png(files.back(), img);
      char line[96];
      std::snprintf(line, sizeof line, "%d %f %f %f %f\n", k % 3, (x1 + x2) / 2.0 / w, (y1 + y2) / 2.0 / h,
                    double(x2 - x1) / w, double(y2 - y1) / h);
      write_text(dir.path / "labels" / (std::to_string(k) + ".txt"), line);
      rects.push_back({x1, y1, x2, y2});
    }
  }
};

ly::data::DetectAugment base_aug() {
  ly::data::DetectAugment a;
  a.imgsz = 64, a.epochs = 10, a.no_aug_epochs = 2;
  a.mosaic = 1.0, a.mixup = 1.0, a.degrees = 10, a.shear = 2, a.translate = 0.1;
  a.hsv_mode = "add", a.hsv_h = a.hsv_s = a.hsv_v = 0, a.fliplr = 0;
  return a;
}

}  // namespace

TEST_CASE("yolox pipeline: the affine equals the original's get_affine_matrix and apply_affine_to_bboxes") {
  // python3 (numpy), libreyolo/training/augment.py of snapshot c41461e, draws fixed to angle 7.5, scale 1.4,
  // shear_x 1.5, shear_y -0.75, translation 0.05 / -0.08 of 640 (cv2.getRotationMatrix2D by its formula):
  //   M = [[1.3904149599596534, 0.16456645524843086, 32.0], [-0.14639001277592098, 1.3928079340084127, -51.2]]
  const auto M = ly::families::yolox::original_affine(7.5, 1.4, 1.5, -0.75, 0.05 * 640, -0.08 * 640);
  const double want[6] = {1.3904149599596534, 0.16456645524843086, 32.0, -0.14639001277592098, 1.3928079340084127, -51.2};
  for (int k = 0; k < 6; ++k) CHECK(M[k] == doctest::Approx(want[k]).epsilon(1e-12));
  CHECK(M[6] == 0);
  CHECK(M[7] == 0);
  CHECK(M[8] == 1);
  // Boxes: corners through M, bounding box, clipped to 640 x 640, nothing dropped (the second collapses
  // onto the right edge and stays until TrainTransform's 1-pixel filter).
  //   [[179.2698187583869, 0.0, 482.0377790375822, 212.72258552409045], [640.0, 0.0, 640.0, 374.1721621050362]]
  const DetBoxes in{{3, 100, 50, 300, 200}, {1, 900, 10, 1200, 400}};
  const auto out = ly::families::yolox::affine_boxes_clipped(in, M, 640, 640);
  REQUIRE(out.size() == 2);
  CHECK(out[0].cls == 3);
  CHECK(out[0].x1 == doctest::Approx(179.2698187583869));
  CHECK(out[0].y1 == doctest::Approx(0.0));
  CHECK(out[0].x2 == doctest::Approx(482.0377790375822));
  CHECK(out[0].y2 == doctest::Approx(212.72258552409045));
  CHECK(out[1].x1 == 640.f);
  CHECK(out[1].x2 == 640.f);
  CHECK(out[1].y2 == doctest::Approx(374.1721621050362));
  CHECK(ly::families::yolox::keep_boxes_over_1px(out).size() == 1);
  // No centring: scale 1 without rotation, shear or translation is the identity (Ultralytics' affine
  // would move the 2S canvas centre to the output centre).
  const auto I = ly::families::yolox::original_affine(0, 1, 0, 0, 0, 0);
  for (int k = 0; k < 9; ++k) CHECK(I[k] == doctest::Approx(ly::data::kIdentity3[k]));
}

TEST_CASE("yolox pipeline: mixup boxes equal the original's _mixup (jitter, mirror, crop offset)") {
  // python3, MosaicMixupDataset._mixup of snapshot c41461e on a 640 x 480 partner with boxes
  // (100, 50, 300, 200, class 2), (500, 300, 640, 480, class 5):
  //   jit 1.3, mirrored, offsets y 37, x 101 -> [[341, 28, 601, 223], [0, 353, 81, 587]]
  //   jit 0.75, not mirrored                 -> [[75, 37.5, 225, 150], [375, 225, 480, 360]]
  const DetBoxes cp{{2, 100, 50, 300, 200}, {5, 500, 300, 640, 480}};
  auto a = ly::families::yolox::mixup_boxes(cp, 1.3, 832, 832, true, 101, 37, 640);
  REQUIRE(a.size() == 2);
  const float wa[2][4] = {{341, 28, 601, 223}, {0, 353, 81, 587}};
  for (int i = 0; i < 2; ++i) {
    CHECK(a[i].x1 == doctest::Approx(wa[i][0]));
    CHECK(a[i].y1 == doctest::Approx(wa[i][1]));
    CHECK(a[i].x2 == doctest::Approx(wa[i][2]));
    CHECK(a[i].y2 == doctest::Approx(wa[i][3]));
  }
  CHECK(a[0].cls == 2);
  CHECK(a[1].cls == 5);
  auto b = ly::families::yolox::mixup_boxes(cp, 0.75, 480, 480, false, 0, 0, 640);
  const float wb[2][4] = {{75, 37.5, 225, 150}, {375, 225, 480, 360}};
  for (int i = 0; i < 2; ++i) {
    CHECK(b[i].x1 == doctest::Approx(wb[i][0]));
    CHECK(b[i].y1 == doctest::Approx(wb[i][1]));
    CHECK(b[i].x2 == doctest::Approx(wb[i][2]));
    CHECK(b[i].y2 == doctest::Approx(wb[i][3]));
  }
}

TEST_CASE("yolox pipeline: once mosaic closes, no affine and no mixup: the image alone, letterboxed top-left") {
  RectSet set(5, 48, 64);
  auto a = base_aug();
  a.letterbox_place = ly::YoloxFamily::letterbox_place;  // augment_from sets it so
  REQUIRE(a.letterbox_place == ly::data::LetterboxPlace::top_left);
  ly::TrainConfig cfg;
  ly::YoloxFamily::adjust_augment(a, cfg);
  REQUIRE(a.pipeline);
  auto ds = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, a, {});
  CHECK_FALSE(ds->mosaic_on(8));
  for (uint64_t seed = 0; seed < 6; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t i = seed % 5;
    const auto s = ds->get(i, rng, /*epoch=*/8);
    REQUIRE(s.image.sizes() == torch::IntArrayRef({3, 64, 64}));
    // The 64 x 48 image in the top-left corner of the grey 64 x 64 canvas (16 rows below, as the original's
    // preproc), its one box where it was.
    const auto [x1, y1, x2, y2] = set.rects[i];
    REQUIRE(s.boxes.size(0) == 1);
    CHECK(s.boxes[0][0].item<float>() == static_cast<float>(i % 3));
    CHECK(s.boxes[0][1].item<float>() == doctest::Approx(x1));
    CHECK(s.boxes[0][2].item<float>() == doctest::Approx(y1));
    CHECK(s.boxes[0][3].item<float>() == doctest::Approx(x2));
    CHECK(s.boxes[0][4].item<float>() == doctest::Approx(y2));
    CHECK(s.image[0][63][0].item<int>() == 114);  // padding below
    CHECK(s.image[0][48][0].item<int>() == 114);
    CHECK(s.image[0][0][0].item<int>() == 0);     // the image's black background: no mixup blended in
    CHECK(s.image[1][(y1 + y2) / 2][(x1 + x2) / 2].item<int>() == static_cast<int>((i + 1) * 20));
  }
}

TEST_CASE("yolox pipeline: the mosaic canvas is shown from its top-left corner; boxes over 1 px, inside") {
  RectSet set(5, 64, 64);
  auto a = base_aug();
  a.mixup = 0, a.degrees = 0, a.shear = 0, a.translate = 0;
  ly::TrainConfig cfg;
  cfg.scale = 0;  // scale= given: 1 ± scale, here exactly 1: the affine is the identity
  cfg.explicit_keys.insert("scale");
  ly::YoloxFamily::adjust_augment(a, cfg);
  auto ds = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, a, {});
  int checked = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    // Replay the draws: mosaic on, the centre (yc, xc), the three partners (no epoch order: any image).
    std::mt19937_64 probe(seed);
    REQUIRE(ly::data::bernoulli(probe, 1.0));
    const int yc = static_cast<int>(ly::data::uniform(probe, 32, 96)), xc = static_cast<int>(ly::data::uniform(probe, 32, 96));
    std::vector<size_t> idx{seed % 5};
    for (int k = 0; k < 3; ++k) idx.push_back(static_cast<size_t>(ly::data::randint(probe, 0, 4)));
    // Expected: each tile's box on the 128 x 128 canvas, seen through the identity into [0, 64)².
    std::vector<std::array<float, 5>> want;
    for (int q = 0; q < 4; ++q) {
      const int x = (q == 0 || q == 2) ? xc - 64 : xc, y = q < 2 ? yc - 64 : yc;
      const auto r = set.rects[idx[q]];
      auto clip = [](float v) { return std::clamp(v, 0.f, 64.f); };
      const float bx1 = clip(float(r[0] + x)), by1 = clip(float(r[1] + y)), bx2 = clip(float(r[2] + x)), by2 = clip(float(r[3] + y));
      if (std::min(bx2 - bx1, by2 - by1) > 1) want.push_back({float(idx[q] % 3), bx1, by1, bx2, by2});
    }
    std::mt19937_64 rng(seed);
    const auto s = ds->get(seed % 5, rng, /*epoch=*/0);
    REQUIRE(s.boxes.size(0) == static_cast<int64_t>(want.size()));
    for (size_t m = 0; m < want.size(); ++m)
      for (int c = 0; c < 5; ++c) CHECK(std::abs(s.boxes[m][c].item<float>() - want[m][c]) < 1e-3);  // labels: 6 decimals
    checked += static_cast<int>(want.size());
  }
  CHECK(checked > 10);
}

TEST_CASE("yolox pipeline: mixup adds one partner image's boxes to the mosaic's; RTMDet uses it too") {
  RectSet set(5, 64, 64);
  auto a = base_aug();
  a.degrees = 0, a.shear = 0, a.translate = 0;
  ly::TrainConfig cfg;
  cfg.scale = 0;
  cfg.explicit_keys.insert("scale");
  ly::RtmdetFamily::adjust_augment(a, cfg);
  REQUIRE(a.pipeline);
  auto no_mix = a;
  no_mix.mixup = 0;
  auto ds = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, a, {});
  auto ds0 = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, no_mix, {});
  int added = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    // The mosaic's draws come first, so both see the same mosaic; the mixup partner (one box) follows.
    std::mt19937_64 r1(seed), r0(seed);
    const auto s = ds->get(seed % 5, r1, 0), s0 = ds0->get(seed % 5, r0, 0);
    REQUIRE(s.boxes.size(0) >= s0.boxes.size(0));
    REQUIRE(s.boxes.size(0) <= s0.boxes.size(0) + 1);
    if (s0.boxes.size(0) > 0) CHECK(torch::equal(s.boxes.narrow(0, 0, s0.boxes.size(0)), s0.boxes));
    added += static_cast<int>(s.boxes.size(0) - s0.boxes.size(0));
    for (int64_t m = 0; m < s.boxes.size(0); ++m) {
      CHECK(s.boxes[m][3].item<float>() - s.boxes[m][1].item<float>() > 1);
      CHECK(s.boxes[m][4].item<float>() - s.boxes[m][2].item<float>() > 1);
      CHECK(s.boxes[m][1].item<float>() >= 0);
      CHECK(s.boxes[m][3].item<float>() <= 64);
    }
    if (s0.boxes.size(0) > 0) CHECK_FALSE(torch::equal(s.image, s0.image));  // blended 0.5 / 0.5
  }
  CHECK(added > 10);
}

TEST_CASE("yolox validates as the original: the best class per box, conf 0.001, NMS 0.65, 300") {
  const auto o = ly::YoloxFamily::val_decode();
  CHECK_FALSE(o.multi_label);
  CHECK(o.conf == doctest::Approx(0.001));
  CHECK(o.iou == doctest::Approx(0.65));
  CHECK(o.max_det == 300);
  CHECK(ly::RtmdetFamily::val_decode().multi_label);  // RTMDet's original keeps every (box, class) pair
}
