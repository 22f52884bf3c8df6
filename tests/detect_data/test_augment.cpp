// Detection augmentations: boxes follow the pixels (letterbox, mosaic, warps, flips) with
// hand-worked golden values; HSV against the reference hsv_jitter; the box filter; Beta draws.
#include <doctest/doctest.h>
#include <libreyolo/data/augment.hpp>

#include <array>
#include <cmath>
#include <numbers>

using namespace libreyolo;
using namespace libreyolo::data;

namespace {

// An h x w black image with a filled rectangle [x1, x2) x [y1, y2) of colour (r, g, b).
Image with_rect(int h, int w, int x1, int y1, int x2, int y2, uint8_t r = 255, uint8_t g = 0, uint8_t b = 0) {
  Image img(h, w, 3, 0);
  for (int y = y1; y < y2; ++y)
    for (int x = x1; x < x2; ++x) img.at(y, x, 0) = r, img.at(y, x, 1) = g, img.at(y, x, 2) = b;
  return img;
}

bool is_colour(const Image& img, int y, int x, uint8_t r, uint8_t g, uint8_t b, int tol = 40) {
  return std::abs(img.at(y, x, 0) - r) <= tol && std::abs(img.at(y, x, 1) - g) <= tol && std::abs(img.at(y, x, 2) - b) <= tol;
}

// The box covers every pixel of the colour (its centre inside the box grown by `slack`) and every
// pixel whose centre lies inside the box shrunk by `slack` has the colour: nothing else is boxed.
void check_box_matches_colour(const Image& img, const DetBox& box, uint8_t r, uint8_t g, uint8_t b, double slack = 1.0) {
  int outside = 0, holes = 0;
  for (int y = 0; y < img.h; ++y)
    for (int x = 0; x < img.w; ++x) {
      const double cx = x + 0.5, cy = y + 0.5;
      const bool colour = is_colour(img, y, x, r, g, b);
      const bool in_grown = cx > box.x1 - slack && cx < box.x2 + slack && cy > box.y1 - slack && cy < box.y2 + slack;
      const bool in_shrunk = cx > box.x1 + slack && cx < box.x2 - slack && cy > box.y1 + slack && cy < box.y2 - slack;
      if (colour && !in_grown) ++outside;
      if (!colour && in_shrunk) ++holes;
    }
  CHECK(outside == 0);
  CHECK(holes == 0);
}

}  // namespace

TEST_CASE("letterbox: hand-worked placement of pixels and boxes") {
  // 100 wide x 50 high into 64 x 64: r = min(64/50, 64/100) = 0.64 -> 64 x 32, top pad (64-32)/2 = 16.
  Image img = with_rect(50, 100, 10, 5, 30, 20);
  DetBoxes boxes{{3, 10, 5, 30, 20}};
  LetterboxInfo info;
  Image out = letterbox(img, 64, 64, boxes, &info);
  REQUIRE(out.h == 64);
  REQUIRE(out.w == 64);
  CHECK(info.pad_x == 0);
  CHECK(info.pad_y == 16);
  CHECK(info.scale_x == doctest::Approx(0.64));
  CHECK(info.scale_y == doctest::Approx(0.64));
  REQUIRE(boxes.size() == 1);
  CHECK(boxes[0].cls == 3);
  CHECK(boxes[0].x1 == doctest::Approx(6.4));   // 10 * 0.64
  CHECK(boxes[0].x2 == doctest::Approx(19.2));  // 30 * 0.64
  CHECK(boxes[0].y1 == doctest::Approx(19.2));  // 5 * 0.64 + 16
  CHECK(boxes[0].y2 == doctest::Approx(28.8));  // 20 * 0.64 + 16
  CHECK(out.at(0, 0, 0) == kLetterboxFill);     // padding rows are grey
  CHECK(out.at(63, 63, 1) == kLetterboxFill);
  CHECK(out.at(16, 0, 0) == 0);                  // first image row, black
  check_box_matches_colour(out, boxes[0], 255, 0, 0);

  // No resize needed: the image is pasted unchanged, centred.
  Image small = with_rect(64, 32, 4, 4, 8, 8);
  DetBoxes b2{{0, 4, 4, 8, 8}};
  Image o2 = letterbox(small, 64, 64, b2, &info);
  CHECK(info.pad_x == 16);
  CHECK(b2[0].x1 == doctest::Approx(20));
  CHECK(o2.at(5, 21, 0) == 255);
  CHECK(o2.at(5, 19, 0) == 0);
}

TEST_CASE("letterbox top_left: the originals' preproc, padding right and below, the resized size truncated") {
  // 100 wide x 50 high into 64 x 64: 64 x 32 in the top-left corner; rows 32..63 grey.
  Image img = with_rect(50, 100, 10, 5, 30, 20);
  DetBoxes boxes{{3, 10, 5, 30, 20}};
  LetterboxInfo info;
  Image out = letterbox(img, 64, 64, boxes, &info, /*scaleup=*/true, LetterboxPlace::top_left);
  CHECK(info.pad_x == 0);
  CHECK(info.pad_y == 0);
  CHECK(info.scale_y == doctest::Approx(0.64));
  REQUIRE(boxes.size() == 1);
  CHECK(boxes[0].x1 == doctest::Approx(6.4));
  CHECK(boxes[0].y1 == doctest::Approx(3.2));   // 5 * 0.64, no offset
  CHECK(boxes[0].y2 == doctest::Approx(12.8));  // 20 * 0.64
  CHECK(out.at(0, 0, 0) == 0);                   // the image's first row, black
  CHECK(out.at(31, 63, 0) == 0);
  CHECK(out.at(32, 0, 0) == kLetterboxFill);     // padding below
  CHECK(out.at(63, 63, 1) == kLetterboxFill);
  check_box_matches_colour(out, boxes[0], 255, 0, 0);

  // 37 wide x 70 high: r = 64/70, width 33.83 -> 33 pixels (int(), as the originals), where the centred one rounds to 34.
  Image tall = with_rect(70, 37, 2, 2, 6, 6);
  DetBoxes none;
  Image o1 = letterbox(tall, 64, 64, none, &info, true, LetterboxPlace::top_left);
  CHECK(info.scale_x == doctest::Approx(64.0 / 70));  // boxes move (and map back) by r itself, as the originals'
  CHECK(o1.at(10, 32, 0) == 0);
  CHECK(o1.at(10, 33, 0) == kLetterboxFill);
  letterbox(tall, 64, 64, none, &info);
  CHECK(info.scale_x == doctest::Approx(34.0 / 37));
  CHECK(info.pad_x == 15);  // (64 - 34) / 2
}

TEST_CASE("letterbox fit: resized into a smaller square, centred on the canvas (YOLO-NAS's 636 in 640)") {
  // 100 wide x 50 high, fit 60 on 64 x 64: r = 0.6 -> 60 x 30, left (64-60)/2 = 2, top (64-30)/2 = 17.
  Image img = with_rect(50, 100, 10, 5, 30, 20);
  DetBoxes boxes{{3, 10, 5, 30, 20}};
  LetterboxInfo info;
  Image out = letterbox(img, 64, 64, boxes, &info, /*scaleup=*/true, LetterboxPlace::centre, /*fit=*/60);
  CHECK(info.scale_x == doctest::Approx(0.6));
  CHECK(info.pad_x == 2);
  CHECK(info.pad_y == 17);
  CHECK(boxes[0].x1 == doctest::Approx(8));   // 10 * 0.6 + 2
  CHECK(boxes[0].y2 == doctest::Approx(29));  // 20 * 0.6 + 17
  CHECK(out.at(30, 1, 0) == kLetterboxFill);  // left of the image
  CHECK(out.at(30, 2, 0) == 0);               // its first column, black
  CHECK(out.at(30, 62, 0) == kLetterboxFill);
  check_box_matches_colour(out, boxes[0], 255, 0, 0);
  CHECK_THROWS_AS(letterbox(img, 64, 64, boxes, &info, true, LetterboxPlace::centre, 65), ConfigError);
}

TEST_CASE("mosaic4: tiles meet at the centre, boxes move with them and are clipped to the canvas") {
  const int S = 32;
  // Four 32 x 16 (w x h) tiles with one rectangle each, in four colours.
  Image t0 = with_rect(16, 32, 2, 2, 10, 10, 255, 0, 0), t1 = with_rect(16, 32, 20, 4, 30, 12, 0, 255, 0);
  Image t2 = with_rect(16, 32, 0, 0, 6, 6, 0, 0, 255), t3 = with_rect(16, 32, 28, 10, 32, 16, 255, 255, 255);
  DetBoxes b0{{0, 2, 2, 10, 10}}, b1{{1, 20, 4, 30, 12}}, b2{{2, 0, 0, 6, 6}}, b3{{3, 28, 10, 32, 16}};
  DetBoxes out;
  // Centre (xc, yc) = (40, 20): tile 0 at x = 40-32 = 8, y = 20-16 = 4; tile 1 at (40, 4);
  // tile 2 at (8, 20); tile 3 at (40, 20) -> its box x 68..72 is clipped to 64 (the canvas).
  Image canvas = mosaic4({&t0, &t1, &t2, &t3}, {&b0, &b1, &b2, &b3}, S, 40, 20, out);
  REQUIRE(canvas.h == 64);
  REQUIRE(canvas.w == 64);
  REQUIRE(out.size() == 3);  // tile 3's box lies entirely beyond x = 64
  CHECK(out[0].x1 == 10);
  CHECK(out[0].y1 == 6);
  CHECK(out[0].x2 == 18);
  CHECK(out[0].y2 == 14);
  CHECK(out[1].x1 == 60);
  CHECK(out[1].x2 == 64);  // 40 + 30 = 70, clipped
  CHECK(out[1].y1 == 8);
  CHECK(out[2].cls == 2);
  CHECK(out[2].x1 == 8);
  CHECK(out[2].y1 == 20);
  CHECK(canvas.at(0, 0, 0) == kLetterboxFill);  // outside every tile
  check_box_matches_colour(canvas, out[0], 255, 0, 0, 0.5);
  check_box_matches_colour(canvas, out[1], 0, 255, 0, 0.5);
  check_box_matches_colour(canvas, out[2], 0, 0, 255, 0.5);
}

TEST_CASE("warp: scale + translate, and an exact 90-degree turn with half-pixel centres") {
  // x' = 2x + 3, y' = 2y - 1: the box [4,8) x [2,6) becomes [11,19) x [3,11).
  Image img = with_rect(16, 16, 4, 2, 8, 6);
  const Mat3 M = {2, 0, 3, 0, 2, -1, 0, 0, 1};
  DetBoxes boxes = warp_boxes({{1, 4, 2, 8, 6}}, M, 32, 32, 2.0);
  REQUIRE(boxes.size() == 1);
  CHECK(boxes[0].x1 == doctest::Approx(11));
  CHECK(boxes[0].x2 == doctest::Approx(19));
  CHECK(boxes[0].y1 == doctest::Approx(3));
  CHECK(boxes[0].y2 == doctest::Approx(11));
  Image out = warp_image(img, M, 32, 32);
  check_box_matches_colour(out, boxes[0], 255, 0, 0);
  CHECK(out.at(31, 0, 0) == kLetterboxFill);  // maps outside the source: grey

  // (x, y) -> (H - y, x) for a 10 wide x 6 high source into 6 wide x 10 high: every pixel centre
  // lands on a pixel centre, so the warp is an exact permutation of the pixels.
  Image src(6, 10, 3);
  for (size_t i = 0; i < src.px.size(); ++i) src.px[i] = static_cast<uint8_t>(i * 7 % 251);
  const Mat3 R = {0, -1, 6, 1, 0, 0, 0, 0, 1};
  Image rot = warp_image(src, R, 10, 6);
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 6; ++x)
      for (int ch = 0; ch < 3; ++ch) REQUIRE(rot.at(y, x, ch) == src.at(5 - x, y, ch));
  DetBoxes rb = warp_boxes({{0, 1, 2, 4, 5}}, R, 10, 6, 1.0);  // x 1..4, y 2..5 -> x 1..4, y 1..4
  REQUIRE(rb.size() == 1);
  CHECK(rb[0].x1 == doctest::Approx(1));
  CHECK(rb[0].x2 == doctest::Approx(4));
  CHECK(rb[0].y1 == doctest::Approx(1));
  CHECK(rb[0].y2 == doctest::Approx(4));
}

TEST_CASE("rotation: the box encloses the turned rectangle (corners mapped by hand)") {
  // 30 degrees about the centre of a 64 x 64 image: corners of [24,40) x [28,36) relative to
  // (32,32) are (+-8, +-4); turned: x' = x cos + y sin, y' = -x sin + y cos.
  const double a = std::numbers::pi / 6, c = std::cos(a), s = std::sin(a);
  const Mat3 M = {c, s, 32 - 32 * c - 32 * s, -s, c, 32 + 32 * s - 32 * c, 0, 0, 1};
  Image img = with_rect(64, 64, 24, 28, 40, 36);
  DetBoxes out = warp_boxes({{0, 24, 28, 40, 36}}, M, 64, 64, 1.0);
  REQUIRE(out.size() == 1);
  const double hw = 8 * c + 4 * s, hh = 8 * s + 4 * c;  // half extents of the turned rectangle
  CHECK(out[0].x1 == doctest::Approx(32 - hw).epsilon(1e-4));
  CHECK(out[0].x2 == doctest::Approx(32 + hw).epsilon(1e-4));
  CHECK(out[0].y1 == doctest::Approx(32 - hh).epsilon(1e-4));
  CHECK(out[0].y2 == doctest::Approx(32 + hh).epsilon(1e-4));
  Image w = warp_image(img, M, 64, 64);
  int red = 0, red_outside = 0;
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x)
      if (is_colour(w, y, x, 255, 0, 0)) {
        ++red;
        red_outside += !(x + 0.5 > out[0].x1 && x + 0.5 < out[0].x2 && y + 0.5 > out[0].y1 && y + 0.5 < out[0].y2);
      }
  CHECK(red > 100);  // 16 x 8 = 128 pixels, area kept by a rotation
  CHECK(red < 150);
  CHECK(red_outside == 0);
}

TEST_CASE("random_affine_matrix: no-op parameters give a pure centring shift; drawn scale is reported") {
  std::mt19937_64 rng(1);
  AffineParams none{0, 0, 0, 0, 0};
  double s = 0;
  // Mosaic case: a 128 x 128 canvas into 64 x 64 moves by -32 (Ultralytics' border = -S/2).
  Mat3 M = random_affine_matrix(128, 128, 64, 64, none, 1.0, rng, &s);
  CHECK(s == 1.0);
  const Mat3 expect = {1, 0, -32, 0, 1, -32, 0, 0, 1};
  for (int k = 0; k < 9; ++k) CHECK(M[k] == doctest::Approx(expect[k]));
  // Same size: the identity, which random_perspective passes through untouched.
  Image img = with_rect(20, 30, 3, 3, 9, 9);
  DetBoxes boxes{{0, 3, 3, 9, 9}};
  Image same = random_perspective(img, boxes, 20, 30, none, 1.0, rng);
  CHECK(same.px == img.px);
  CHECK(boxes[0].x2 == 9);
  // Scale only, 0.5 gain, output twice as large via extra_scale = 2: s in [1, 3].
  AffineParams sc{0, 0, 0.5, 0, 0};
  for (int t = 0; t < 20; ++t) {
    Mat3 m = random_affine_matrix(64, 64, 128, 128, sc, 2.0, rng, &s);
    CHECK(s >= 1.0);
    CHECK(s <= 3.0);
    CHECK(m[0] == doctest::Approx(s));
    CHECK(m[2] == doctest::Approx(64 - 32 * s));  // the centre (32, 32) maps to (64, 64)
  }
}

TEST_CASE("random_perspective with translate + scale keeps axis-aligned boxes exact") {
  AffineParams p{0, 0.2, 0.4, 0, 0};
  for (uint64_t seed = 0; seed < 8; ++seed) {
    std::mt19937_64 rng(seed);
    Image img = with_rect(64, 64, 20, 24, 44, 40, 0, 255, 0);
    DetBoxes boxes{{5, 20, 24, 44, 40}};
    Image out = random_perspective(img, boxes, 64, 64, p, 1.0, rng);
    REQUIRE(boxes.size() == 1);  // at most 20% shift of a central box: never filtered
    check_box_matches_colour(out, boxes[0], 0, 255, 0);
  }
}

TEST_CASE("flips move boxes with the pixels") {
  Image img = with_rect(20, 30, 2, 3, 7, 11);
  DetBoxes boxes{{0, 2, 3, 7, 11}};
  flip_lr(img);
  flip_boxes_lr(boxes, img.w);
  CHECK(boxes[0].x1 == 23);  // 30 - 7
  CHECK(boxes[0].x2 == 28);
  check_box_matches_colour(img, boxes[0], 255, 0, 0, 0.5);
  flip_ud(img);
  flip_boxes_ud(boxes, img.h);
  CHECK(boxes[0].y1 == 9);  // 20 - 11
  CHECK(boxes[0].y2 == 17);
  check_box_matches_colour(img, boxes[0], 255, 0, 0, 0.5);
}

TEST_CASE("box_candidate: Ultralytics' thresholds") {
  const DetBox before{0, 0, 0, 10, 10};
  CHECK(box_candidate(before, 1.0, {0, 0, 0, 10, 10}));
  CHECK_FALSE(box_candidate(before, 1.0, {0, 0, 0, 2, 10}));   // width not > 2 px
  CHECK_FALSE(box_candidate(before, 1.0, {0, 0, 0, 3, 3}));    // 9 / 100 of the area <= 0.1
  CHECK(box_candidate(before, 1.0, {0, 0, 0, 3, 4}));          // 12 / 100 > 0.1
  CHECK_FALSE(box_candidate(before, 2.0, {0, 0, 0, 5, 7}));    // 35 / 400 (scaled area) <= 0.1
  CHECK_FALSE(box_candidate({0, 0, 0, 500, 10}, 1.0, {0, 0, 0, 303, 3}));  // aspect 101 >= 100
}

TEST_CASE("hsv_augment agrees with the reference hsv_jitter within one level") {
  Image a(16, 64, 3);
  std::mt19937_64 fill(3);
  for (auto& v : a.px) v = static_cast<uint8_t>(fill() % 256);
  for (int k = 0; k < 16; ++k) a.at(0, k, 0) = a.at(0, k, 1) = a.at(0, k, 2) = static_cast<uint8_t>(k * 17);  // greys
  Image b = a;
  std::mt19937_64 r1(42), r2(42);
  hsv_jitter(a, 0.015, 0.7, 0.4, r1);
  hsv_augment(b, 0.015, 0.7, 0.4, r2);
  // Hue is rounded half-up here and half-away-from-zero there: a hue one level off moves a
  // saturated channel by up to v * 6/180 (~8 levels), so bound the rare ones, and most are exact.
  int worst = 0, off = 0;
  for (size_t i = 0; i < a.px.size(); ++i) {
    worst = std::max(worst, std::abs(a.px[i] - b.px[i]));
    off += std::abs(a.px[i] - b.px[i]) > 1;
  }
  CHECK(worst <= 9);
  CHECK(off * 100 < static_cast<int>(a.px.size()));
  CHECK(r1() == r2());  // same number of draws
  Image c = b;
  std::mt19937_64 r3(1);
  hsv_augment(c, 0, 0, 0, r3);
  CHECK(c.px == b.px);
}

TEST_CASE("beta_draw(32, 32): mean 1/2 and variance ab / ((a+b)^2 (a+b+1)) = 1/260") {
  std::mt19937_64 rng(7);
  const int n = 20000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = beta_draw(32, 32, rng);
    REQUIRE(x > 0);
    REQUIRE(x < 1);
    sum += x, sq += x * x;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  CHECK(mean == doctest::Approx(0.5).epsilon(0.01));
  CHECK(var == doctest::Approx(1.0 / 260).epsilon(0.05));
  double g = 0;
  for (int i = 0; i < n; ++i) g += gamma_draw(3.0, rng);
  CHECK(g / n == doctest::Approx(3.0).epsilon(0.02));  // Gamma(k, 1) has mean k
}

TEST_CASE("warp_tiles: a canvas of unscaled tiles renders as mosaic4 + warp_image (away from the seams)") {
  const int S = 32;
  std::mt19937_64 fill(9);
  Image t[4] = {Image(16, 32, 3), Image(32, 20, 3), Image(24, 32, 3), Image(32, 32, 3)};
  for (auto& im : t)
    for (auto& v : im.px) v = static_cast<uint8_t>(fill() % 256);
  const int xc = 37, yc = 29;
  DetBoxes none[4], out;
  Image canvas = mosaic4({&t[0], &t[1], &t[2], &t[3]}, {&none[0], &none[1], &none[2], &none[3]}, S, xc, yc, out);
  std::vector<WarpTile> tiles;
  for (int k = 0; k < 4; ++k) {
    const int x = (k == 0 || k == 2) ? xc - t[k].w : xc, y = k < 2 ? yc - t[k].h : yc;
    WarpTile w;
    w.img = &t[k], w.ox = x, w.oy = y;
    w.rx0 = std::max(x, 0), w.ry0 = std::max(y, 0), w.rx1 = std::min(x + t[k].w, 2 * S), w.ry1 = std::min(y + t[k].h, 2 * S);
    tiles.push_back(w);
  }
  std::mt19937_64 rng(4);
  const Mat3 M = random_affine_matrix(64, 64, 32, 32, {5, 0.1, 0.3, 2, 0}, 1.0, rng);
  const Image a = warp_image(canvas, M, 32, 32), b = warp_tiles(tiles, M, 32, 32);
  const Mat3 inv = mat_inverse(M);
  int compared = 0;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x) {
      const double u = inv[0] * (x + 0.5) + inv[1] * (y + 0.5) + inv[2], v = inv[3] * (x + 0.5) + inv[4] * (y + 0.5) + inv[5];
      // Skip pixels within 1.5 canvas pixels of a tile border: there the canvas blends across it.
      bool near_seam = std::abs(u - xc) < 1.5 || std::abs(v - yc) < 1.5;
      for (const auto& w : tiles)
        near_seam = near_seam || std::abs(u - (w.ox + w.img->w)) < 1.5 || std::abs(v - (w.oy + w.img->h)) < 1.5 ||
                    std::abs(u - w.ox) < 1.5 || std::abs(v - w.oy) < 1.5;
      if (near_seam || u < 1.5 || v < 1.5 || u > 62.5 || v > 62.5) continue;
      for (int ch = 0; ch < 3; ++ch) REQUIRE(std::abs(a.at(y, x, ch) - b.at(y, x, ch)) <= 1);
      ++compared;
    }
  CHECK(compared > 300);
}

TEST_CASE("warp_tiles: a tile drawn from a 2x larger image lands where its resized copy would") {
  // 80 x 40 image shown as 40 x 20 (sx = sy = 2) at (12, 22) of a 64 x 64 letterbox canvas.
  Image big(40, 80, 3, 0);
  for (int y = 10; y < 30; ++y)
    for (int x = 20; x < 60; ++x) big.at(y, x, 1) = 255;  // green block [20,60) x [10,30) -> [10,30) x [5,15)
  WarpTile w;
  w.img = &big, w.ox = 12, w.oy = 22, w.sx = 2, w.sy = 2, w.rx0 = 12, w.ry0 = 22, w.rx1 = 52, w.ry1 = 42;
  const Image out = warp_tiles({w}, kIdentity3, 64, 64);
  CHECK(out.at(0, 0, 0) == kLetterboxFill);           // outside the tile
  CHECK(out.at(21, 30, 1) == kLetterboxFill);         // the row above the tile
  CHECK(out.at(22, 12, 0) == 0);                      // tile's first pixel, black
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x) {
      const bool inside = x >= 22 && x < 42 && y >= 27 && y < 37;  // block at canvas [22,42) x [27,37)
      if (inside) REQUIRE(out.at(y, x, 1) == 255);
      const bool near = x >= 21 && x < 43 && y >= 26 && y < 38;
      if (!near && x >= 12 && x < 52 && y >= 22 && y < 42) REQUIRE(out.at(y, x, 1) == 0);
    }
}

TEST_CASE("hsv_augment_chw equals hsv_augment followed by to_chw_tensor") {
  Image a(9, 13, 3);
  std::mt19937_64 fill(5);
  for (auto& v : a.px) v = static_cast<uint8_t>(fill() % 256);
  Image b = a;
  std::mt19937_64 r1(8), r2(8);
  const torch::Tensor fused = hsv_augment_chw(a, 0.015, 0.7, 0.4, r1);
  hsv_augment(b, 0.015, 0.7, 0.4, r2);
  CHECK(fused.equal(to_chw_tensor(b)));
}

TEST_CASE("warp_tiles: the affine fast path matches the per-pixel reference") {
  std::mt19937_64 fill(21);
  Image t[4] = {Image(30, 40, 3), Image(41, 23, 3), Image(17, 40, 3), Image(40, 33, 3)};
  for (auto& im : t)
    for (auto& v : im.px) v = static_cast<uint8_t>(fill() % 256);
  const int S = 40, xc = 43, yc = 35;
  std::vector<WarpTile> tiles;
  for (int k = 0; k < 4; ++k) {
    const int x = (k == 0 || k == 2) ? xc - 40 : xc, y = k < 2 ? yc - 30 : yc;  // nominal 40 x 30 tiles
    WarpTile w;
    w.img = &t[k], w.ox = x, w.oy = y, w.sx = t[k].w / 40.f, w.sy = t[k].h / 30.f;
    w.rx0 = std::max(x, 0), w.ry0 = std::max(y, 0), w.rx1 = std::min(x + 40, 2 * S), w.ry1 = std::min(y + 30, 2 * S);
    tiles.push_back(w);
  }
  for (uint64_t seed = 0; seed < 6; ++seed) {
    std::mt19937_64 rng(seed);
    const Mat3 M = random_affine_matrix(80, 80, 48, 48, {30, 0.2, 0.5, 5, 0}, 48.0 / 40, rng);
    const Image fast = warp_tiles(tiles, M, 48, 48);
    Image ref(48, 48, 3);
    libreyolo::data::detail::warp_tiles_generic(tiles, mat_inverse(M), ref, kLetterboxFill);
    int off = 0;
    for (size_t i = 0; i < fast.px.size(); ++i) off += std::abs(fast.px[i] - ref.px[i]) > 1;
    CHECK(off * 200 < static_cast<int>(fast.px.size()));  // < 0.5%: pixels exactly on a tile border
  }
}

TEST_CASE("YOLOX's additive HSV (the original's YOLOv9): hue wraps modulo 180, S and V clip, zero offsets keep the image") {
  // Pure red (255, 0, 0) is H 0, S 255, V 255 in OpenCV's units.
  Image red(2, 2, 3, 0);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) red.at(y, x, 0) = 255;
  const auto& tb = libreyolo::data::detail::hsv_tables();
  auto apply = [&](const Image& img, int dh, int ds, int dv) {
    const auto L = libreyolo::data::detail::hsv_add_lut(dh, ds, dv);
    uint8_t r, g, b;
    libreyolo::data::detail::hsv_jitter_pixel(L, tb, img.at(0, 0, 0), img.at(0, 0, 1), img.at(0, 0, 2), r, g, b);
    return std::array<int, 3>{r, g, b};
  };
  CHECK(apply(red, 0, 0, 0) == std::array<int, 3>{255, 0, 0});
  CHECK(apply(red, 60, 0, 0) == std::array<int, 3>{0, 255, 0});    // H 0 + 60 = 60: green
  CHECK(apply(red, -60, 0, 0) == std::array<int, 3>{0, 0, 255});   // H 0 - 60 wraps to 120: blue
  CHECK(apply(red, 0, -300, 0) == std::array<int, 3>{255, 255, 255});  // S clipped to 0: grey at V 255
  CHECK(apply(red, 0, 0, -300) == std::array<int, 3>{0, 0, 0});    // V clipped to 0: black
  CHECK(apply(red, 0, 0, 40) == std::array<int, 3>{255, 0, 0});    // V clipped at 255
  // Drawn offsets: integers (truncated toward zero) within +-gain, each channel zero with probability 1/2.
  std::mt19937_64 rng(3);
  int zero_h = 0, n = 4000;
  Image grey(1, 1, 3, 128);
  for (int i = 0; i < n; ++i) {
    const auto L = libreyolo::data::detail::draw_hsv_add(5, 30, 30, rng);
    // grey has S 0: only V moves it; its V table entry tells the drawn V offset.
    const int dv = L.v[128] - 128;
    CHECK(std::abs(dv) <= 30);
    zero_h += L.sector[0] == 0 && L.f30[0] == 0;  // hue offset 0 keeps H 0 at sector 0, position 0
  }
  CHECK(zero_h > n * 0.5);  // p = 1/2 (dropped) + 1/2 * 1/5 (kept, but |u| < 1/5 truncates to 0) = 0.6
  CHECK(zero_h < n * 0.65);
  // hsv_add_chw with gains 0 is off: the image unchanged (no lossy HSV round trip).
  std::mt19937_64 r2(9);
  Image a(3, 5, 3);
  for (auto& v : a.px) v = static_cast<uint8_t>(r2() % 256);
  CHECK(hsv_add_chw(a, 0, 0, 0, r2).equal(to_chw_tensor(a)));
}
