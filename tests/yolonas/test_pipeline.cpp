// YOLO-NAS's own training pipeline (families/yolonas/augment.hpp), the original's YOLONASAffineMixupDataset
// + YOLONASTrainTransform: the affine about the image's top-left corner (not centred), mixup adding one
// partner's boxes, the closed phase (the image alone, top-left, grey beyond), and the original's
// BaseTrainer optimizer groups (AdamW's default 0.01 on BatchNorm weights and biases).
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include <libreyolo/families/yolonas/augment.hpp>

#include <doctest/doctest.h>

#include "support.hpp"
#include "support_data.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ly = libreyolo;
namespace fs = std::filesystem;

namespace {

ly::data::DetectAugment nas_aug() {
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::YoloNasFamily::traits::overrides);
  cfg.imgsz = 64;
  cfg.epochs = 10;
  auto a = ly::YoloNasFamily::augment_from(cfg);
  a.hsv_h = a.hsv_s = a.hsv_v = 0;  // HSV and flips still draw, but change nothing checked below
  a.fliplr = 0;
  return a;
}

}  // namespace

TEST_CASE("yolonas pipeline: the original's affine about the top-left corner, x' = s x + t, grey beyond the image") {
  lry_test::RectImages set(3, "lry_nas_pipeline", 0);
  auto a = nas_aug();
  REQUIRE(a.pipeline);
  a.mixup = 0;
  CHECK(a.translate == doctest::Approx(0.25));
  CHECK(a.mosaic == 0);
  auto ds = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, a, {});
  int checked = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const size_t i = seed % 3;
    std::mt19937_64 probe(seed);
    const auto M = ly::families::yolox::original_affine_matrix(64, 64, 0, 0.25, 0.5, 1.5, 0, probe);
    // No rotation or shear: a scale about the origin and a shift.
    REQUIRE(M[1] == 0);
    REQUIRE(M[3] == 0);
    REQUIRE(M[0] == M[4]);
    const double s = M[0], tx = M[2], ty = M[5];
    CHECK(s >= 0.5);
    CHECK(s <= 1.5);
    CHECK(std::abs(tx) <= 16);
    CHECK(std::abs(ty) <= 16);
    const auto [x1, y1, x2, y2] = set.rects[i];
    auto clip = [](double v) { return std::clamp(v, 0.0, 64.0); };
    const double bx1 = clip(s * x1 + tx), by1 = clip(s * y1 + ty), bx2 = clip(s * x2 + tx), by2 = clip(s * y2 + ty);
    if (!(bx2 - bx1 > 1 && by2 - by1 > 1)) continue;  // pushed out of the image: the fallback's case
    std::mt19937_64 rng(seed);
    const auto smp = ds->get(i, rng, /*epoch=*/0);
    REQUIRE(smp.image.sizes() == torch::IntArrayRef({3, 64, 64}));
    REQUIRE(smp.boxes.size(0) == 1);
    CHECK(smp.boxes[0][0].item<float>() == static_cast<float>(i));
    const double want[4] = {bx1, by1, bx2, by2};
    for (int c = 0; c < 4; ++c) CHECK(std::abs(smp.boxes[0][c + 1].item<float>() - want[c]) < 1e-3);  // labels: 6 decimals
    // The rectangle's grey at its warped centre; grey 114 beyond the warped image (right of s*64 + tx or
    // below s*48 + ty), black image background just inside its top-left corner.
    const double cx = s * (x1 + x2) / 2 + tx, cy = s * (y1 + y2) / 2 + ty;
    if (cx > 1 && cx < 63 && cy > 1 && cy < 63 && bx2 - bx1 > 3 && by2 - by1 > 3) {
      CHECK(smp.image[1][static_cast<int>(cy)][static_cast<int>(cx)].item<int>() == static_cast<int>((i + 1) * 40));
      ++checked;
    }
    const double right = s * 64 + tx, bottom = s * 48 + ty;
    if (bottom < 62) CHECK(smp.image[0][63][0].item<int>() == 114);
    if (right < 62) CHECK(smp.image[0][0][63].item<int>() == 114);
    if (tx > 2 && ty > 2) CHECK(smp.image[0][static_cast<int>(ty) - 1][static_cast<int>(tx) - 1].item<int>() == 114);
    // Output (0, 0) shows source (-tx / s, -ty / s): inside the image when both shifts are negative; black
    // unless that lands on the rectangle. A centred affine would show another point.
    const double sx = (0.5 - tx) / s, sy = (0.5 - ty) / s;
    const bool on_rect = sx > x1 - 1 && sx < x2 + 1 && sy > y1 - 1 && sy < y2 + 1;
    if (sx > 1 && sy > 1 && sx < 63 && sy < 47 && !on_rect) CHECK(smp.image[0][0][0].item<int>() == 0);
  }
  CHECK(checked > 8);
}

TEST_CASE("yolonas pipeline: mixup adds one partner's boxes; closed epochs give the image alone at the top-left") {
  lry_test::RectImages set(3, "lry_nas_pipeline", 0);
  auto a = nas_aug();
  a.mixup = 1.0;
  a.no_aug_epochs = 2;
  auto no_mix = a;
  no_mix.mixup = 0;
  auto ds = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, a, {});
  auto ds0 = ly::data::DetectDataset::open_images(set.files, {"a", "b", "c"}, no_mix, {});
  int added = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    std::mt19937_64 r1(seed), r0(seed);
    const auto s = ds->get(seed % 3, r1, 0), s0 = ds0->get(seed % 3, r0, 0);
    REQUIRE(s0.boxes.size(0) == 1);
    if (!(s0.boxes[0][3].item<float>() - s0.boxes[0][1].item<float>() > 1 &&
          s0.boxes[0][4].item<float>() - s0.boxes[0][2].item<float>() > 1))
      continue;  // its own box pushed out: the fallback's case
    REQUIRE(s.boxes.size(0) >= 1);
    REQUIRE(s.boxes.size(0) <= 2);
    CHECK(torch::equal(s.boxes.narrow(0, 0, 1), s0.boxes));
    added += static_cast<int>(s.boxes.size(0) - 1);
    CHECK_FALSE(torch::equal(s.image, s0.image));  // blended 0.5 / 0.5
  }
  CHECK(added > 8);
  // Epoch 8 of 10 with no_aug_epochs 2: no affine, no mixup: the image at (0, 0), grey below its 48 rows.
  CHECK_FALSE(ly::families::yolonas::affine_open(a, 8));
  CHECK(ly::families::yolonas::affine_open(a, 7));
  for (uint64_t seed = 0; seed < 6; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t i = seed % 3;
    const auto s = ds->get(i, rng, /*epoch=*/8);
    const auto [x1, y1, x2, y2] = set.rects[i];
    REQUIRE(s.boxes.size(0) == 1);
    CHECK(s.boxes[0][1].item<float>() == doctest::Approx(x1));
    CHECK(s.boxes[0][2].item<float>() == doctest::Approx(y1));
    CHECK(s.boxes[0][3].item<float>() == doctest::Approx(x2));
    CHECK(s.boxes[0][4].item<float>() == doctest::Approx(y2));
    CHECK(s.image[0][0][0].item<int>() == 0);     // the image's black, from the top-left corner
    CHECK(s.image[0][47][63].item<int>() == 0);
    CHECK(s.image[0][48][0].item<int>() == 114);  // below the image: grey
    CHECK(s.image[1][(y1 + y2) / 2][(x1 + x2) / 2].item<int>() == static_cast<int>((i + 1) * 40));
  }
}

TEST_CASE("yolonas: the original's AdamW groups: conv weights weight_decay, BatchNorm weights and biases 0.01") {
  lry_test::TempDir td("lry_nas_groups");
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::YoloNasFamily::traits::overrides);
  cfg.data = lry_test::small_detect_set(td.path, 8, 3).string();
  REQUIRE(ly::config_detail::lower(cfg.optimizer) == "adamw");
  ly::YoloNasFamily f("s");
  f.setup(cfg);
  auto net = f.make_network();
  auto g = f.param_groups(*net, cfg.weight_decay);
  REQUIRE(g.size() == 3);
  CHECK(g[0].weight_decay == doctest::Approx(1e-5));
  CHECK(g[1].weight_decay == doctest::Approx(0.01));
  CHECK(g[2].weight_decay == doctest::Approx(0.01));
  CHECK(!g[1].params.empty());
  CHECK(!g[2].params.empty());
  cfg.optimizer = "SGD";
  ly::YoloNasFamily s("s");
  s.setup(cfg);
  auto gs = s.param_groups(*net, cfg.weight_decay);
  CHECK(gs[1].weight_decay == 0);
  CHECK(gs[2].weight_decay == 0);
  CHECK(static_cast<bool>(ly::YoloNasFamily::augment_from(cfg).pipeline));
}

TEST_CASE("family pipelines refuse the generic keys they have no use for (YOLO-NAS: mosaic, flipud; YOLOX/RTMDet: flipud)") {
  auto refused = [](auto family, const char* key, const char* expect) {
    using F = typename decltype(family)::type;
    ly::TrainConfig cfg;
    ly::apply_overrides(cfg, F::traits::overrides);
    ly::apply_overrides(cfg, std::array<std::string_view, 1>{key});
    CAPTURE(key);
    CHECK_THROWS_WITH_AS(F::augment_from(cfg), doctest::Contains(expect), ly::ConfigError);
  };
  refused(std::type_identity<ly::YoloNasFamily>{}, "mosaic=1", "mosaic=1: YOLO-NAS's training pipeline");
  refused(std::type_identity<ly::YoloNasFamily>{}, "flipud=0.5", "has no flipud; allowed: 0");
  refused(std::type_identity<ly::YoloxFamily>{}, "flipud=0.5", "flipud=0.5: the YOLOX/RTMDet training pipeline");
  refused(std::type_identity<ly::RtmdetFamily>{}, "perspective=0.001", "has no perspective");
  // Their own defaults pass.
  ly::TrainConfig ok;
  ly::apply_overrides(ok, ly::YoloxFamily::traits::overrides);
  CHECK(static_cast<bool>(ly::YoloxFamily::augment_from(ok).pipeline));
}
