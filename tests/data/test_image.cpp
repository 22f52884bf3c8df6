// Image decode/encode, probe, and pixel operations (golden values by hand or from torch itself).
#include <doctest/doctest.h>
#include <libreyolo/data/image.hpp>
#include <png.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "support.hpp"

using namespace libreyolo;
using namespace libreyolo::data;

namespace {

Image noisy_rgb(int h, int w, uint64_t seed) {
  // Smooth gradient plus mild noise: realistic for JPEG (pure noise would compress badly).
  Image img(h, w, 3);
  std::mt19937_64 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        img.at(y, x, c) = static_cast<uint8_t>((x * 255 / std::max(1, w - 1) * (c == 0) + y * 255 / std::max(1, h - 1) * (c == 1) +
                                                128 * (c == 2) + static_cast<int>(rng() % 3)) % 256);
  return img;
}

std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::filesystem::path& p, const std::vector<char>& bytes, size_t n) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(n));
}

// A palette (color type 3) or 16-bit RGB PNG written straight through libpng, independent of write_png.
void write_special_png(const std::filesystem::path& p, bool palette) {
  FILE* f = std::fopen(p.string().c_str(), "wb");
  REQUIRE(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  const int w = 4, h = 2;
  png_set_IHDR(png, info, w, h, palette ? 8 : 16, palette ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_color pal[3] = {{255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
  if (palette) png_set_PLTE(png, info, pal, 3);
  png_write_info(png, info);
  std::vector<uint8_t> row(static_cast<size_t>(w) * (palette ? 1 : 6));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      if (palette) {
        row[x] = static_cast<uint8_t>((x + y) % 3);
      } else {  // 16-bit big-endian: value v*257 scales back to exactly v
        for (int c = 0; c < 3; ++c) {
          int v = (x * 60 + y * 7 + c * 30) * 257;
          row[x * 6 + c * 2] = static_cast<uint8_t>(v >> 8);
          row[x * 6 + c * 2 + 1] = static_cast<uint8_t>(v & 0xFF);
        }
      }
    }
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

template <class F>
std::string error_of(F&& f) {
  return lry_test::message_of<DataError>(std::forward<F>(f));
}

}  // namespace

TEST_CASE("PNG round trip is exact, JPEG round trip is close") {
  lry_test::TempDir dir("img");
  Image img = noisy_rgb(37, 53, 1);
  write_png(dir / "a.png", img);
  Image back = read_image(dir / "a.png");
  CHECK(back.h == 37);
  CHECK(back.w == 53);
  CHECK(back.c == 3);
  CHECK(back.px == img.px);

  write_jpeg(dir / "a.jpg", img, 95);
  Image j = read_image(dir / "a.jpg");
  REQUIRE(j.h == 37);
  REQUIRE(j.w == 53);
  double err = 0;
  for (size_t i = 0; i < img.px.size(); ++i) err += std::abs(int(img.px[i]) - int(j.px[i]));
  CHECK(err / img.px.size() < 4.0);
  std::string why;
  CHECK(probe_image(dir / "a.jpg", &why));
  CHECK(probe_image(dir / "a.png", &why));
}

TEST_CASE("format is chosen by content, not by extension") {
  lry_test::TempDir dir("img");
  Image img = noisy_rgb(8, 8, 2);
  write_png(dir / "really_png.jpg", img);
  CHECK(read_image(dir / "really_png.jpg").px == img.px);
}

TEST_CASE("grey, palette and 16-bit PNGs decode to 8-bit RGB") {
  lry_test::TempDir dir("img");
  Image grey(3, 2, 1);
  for (size_t i = 0; i < grey.px.size(); ++i) grey.px[i] = static_cast<uint8_t>(40 * i + 5);
  write_png(dir / "g.png", grey);
  Image g = read_image(dir / "g.png");
  REQUIRE(g.c == 3);
  REQUIRE(g.h == 3);
  REQUIRE(g.w == 2);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c) CHECK(g.at(y, x, c) == grey.at(y, x, 0));

  write_special_png(dir / "p.png", true);
  Image p = read_image(dir / "p.png");
  REQUIRE(p.h == 2);
  REQUIRE(p.w == 4);
  const uint8_t pal[3][3] = {{255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) CHECK(p.at(y, x, c) == pal[(x + y) % 3][c]);

  write_special_png(dir / "d.png", false);
  Image d = read_image(dir / "d.png");
  REQUIRE(d.h == 2);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) CHECK(d.at(y, x, c) == x * 60 + y * 7 + c * 30);
}

TEST_CASE("DCT-scaled JPEG decode picks the smallest scale keeping the shorter side >= hint") {
  lry_test::TempDir dir("img");
  write_jpeg(dir / "big.jpg", noisy_rgb(300, 400, 3));
  Image full = read_image(dir / "big.jpg");
  CHECK(full.h == 300);
  CHECK(full.w == 400);
  // 1/8 -> 38x50 and 1/4 -> 75x100 are below 100 on the short side; 1/2 -> 150x200 is not.
  Image half = read_image(dir / "big.jpg", 100);
  CHECK(half.h == 150);
  CHECK(half.w == 200);
  Image eighth = read_image(dir / "big.jpg", 30);
  CHECK(eighth.h == 38);
  CHECK(eighth.w == 50);
  Image none = read_image(dir / "big.jpg", 299);  // no scale keeps 299: full size
  CHECK(none.h == 300);
}

TEST_CASE("grey JPEG decodes to RGB with equal channels") {
  lry_test::TempDir dir("img");
  Image grey(16, 16, 1, 90);
  write_jpeg(dir / "g.jpg", grey);
  Image g = read_image(dir / "g.jpg");
  REQUIRE(g.c == 3);
  CHECK(g.at(5, 5, 0) == g.at(5, 5, 1));
  CHECK(g.at(5, 5, 1) == g.at(5, 5, 2));
  CHECK(std::abs(int(g.at(5, 5, 0)) - 90) <= 2);
}

TEST_CASE("bad image files raise DataError naming the file and the reason; probe agrees") {
  lry_test::TempDir dir("img");
  write_jpeg(dir / "ok.jpg", noisy_rgb(64, 64, 4));
  write_png(dir / "ok.png", noisy_rgb(64, 64, 5));
  auto jpg = slurp(dir / "ok.jpg");
  auto png = slurp(dir / "ok.png");
  spit(dir / "half.jpg", jpg, jpg.size() / 2);
  spit(dir / "no_eoi.jpg", jpg, jpg.size() - 2);
  spit(dir / "half.png", png, png.size() / 2);
  {
    std::ofstream t(dir / "text.jpg");
    t << "this is not an image\n";
  }
  std::ofstream(dir / "empty.png").close();

  struct Case {
    const char* file;
    const char* reason;
  } cases[] = {{"half.jpg", "truncated"},  {"no_eoi.jpg", "truncated"},     {"half.png", "truncated"},
               {"text.jpg", "not a JPEG or PNG"}, {"empty.png", "empty"}, {"missing.jpg", "does not exist"}};
  for (const auto& c : cases) {
    CAPTURE(c.file);
    auto path = dir / c.file;
    std::string msg = error_of([&] { read_image(path); });
    CHECK(msg.find(path.string()) != std::string::npos);
    CHECK(msg.find(c.reason) != std::string::npos);
    std::string why;
    CHECK_FALSE(probe_image(path, &why));
    CHECK(why.find(c.reason) != std::string::npos);
  }
  std::string msg = error_of([&] { read_image(dir.path); });
  CHECK(msg.find("directory") != std::string::npos);
}

TEST_CASE("resize_bilinear: hand-worked values and agreement with torch's bilinear interpolate") {
  Image row(1, 2, 1);
  row.px = {0, 100};
  // Half-pixel centres: output x maps to source (x + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 (clamped).
  Image up = resize_bilinear(row, 1, 4);
  CHECK(up.px == std::vector<uint8_t>{0, 25, 75, 100});

  Image img = noisy_rgb(13, 9, 6);
  for (auto [h, w] : {std::pair{7, 5}, std::pair{26, 31}, std::pair{3, 11}}) {
    CAPTURE(h);
    CAPTURE(w);
    Image r = resize_bilinear(img, h, w);
    auto src = to_chw_tensor(img).to(torch::kFloat).unsqueeze(0);
    auto ref = torch::nn::functional::interpolate(
        src, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear).align_corners(false));
    auto ours = to_chw_tensor(r).to(torch::kFloat).unsqueeze(0);
    CHECK((ours - ref.round()).abs().max().item<float>() <= 1.0f);
  }
  CHECK_THROWS_AS(resize_bilinear(img, 0, 4), Error);
}

TEST_CASE("resample_aa: torch's antialiased bilinear interpolate per element, on an image and on a zero-filled canvas") {
  namespace F = torch::nn::functional;
  const auto aa = [](const torch::Tensor& x, int64_t h, int64_t w) {
    return F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear).align_corners(false).antialias(true));
  };
  const auto as_nchw = [](const std::vector<float>& v, int h, int w, int c) {
    return torch::from_blob(const_cast<float*>(v.data()), {h, w, c}, torch::kFloat).permute({2, 0, 1}).unsqueeze(0).clone();
  };
  // A hand-worked row: 4 pixels onto 2 (step 2, the triangle 2 source pixels wide each side). Output 0 is
  // centred at 1.0: source centres 0.5, 1.5, 2.5 weigh 0.75, 0.75, 0.25 (3.5 lies outside the triangle);
  // output 1, at 3.0: centres 1.5, 2.5, 3.5 weigh 0.25, 0.75, 0.75. Each sum is divided by its weights' 1.75.
  Image row(1, 4, 1);
  row.px = {0, 100, 200, 40};
  const auto r = resample_aa_float(row, resize_axis(4, 2), resize_axis(1, 1));
  REQUIRE(r.size() == 2);
  CHECK(r[0] == doctest::Approx((0.75 * 0 + 0.75 * 100 + 0.25 * 200) / 1.75).epsilon(1e-6));
  CHECK(r[1] == doctest::Approx((0.25 * 100 + 0.75 * 200 + 0.75 * 40) / 1.75).epsilon(1e-6));

  const Image img = noisy_rgb(37, 29, 8);
  const auto src = to_chw_tensor(img).to(torch::kFloat).unsqueeze(0);
  // Shrinking (2.3x, 1.5x, 4.1x), enlarging and mixed: every element within float rounding of torch's.
  for (auto [h, w] : {std::pair{16, 19}, std::pair{9, 13}, std::pair{7, 7}, std::pair{60, 51}, std::pair{61, 11}}) {
    CAPTURE(h);
    CAPTURE(w);
    const auto ours = as_nchw(resample_aa_float(img, resize_axis(img.w, w), resize_axis(img.h, h)), h, w, 3);
    CHECK((ours - aa(src, h, w)).abs().max().item<float>() <= 1e-3f);
    // The 8-bit form rounds those values.
    const auto rounded = to_chw_tensor(resample_aa(img, resize_axis(img.w, w), resize_axis(img.h, h))).to(torch::kFloat).unsqueeze(0);
    CHECK(rounded.equal(ours.add(0.5).clamp(0, 255).floor()));
  }

  // The image placed at (5, 3) on a 60 x 45 canvas of zeros (RandomZoomOut), the canvas resized to 23 x 17:
  // the same as torch's on the materialised canvas, computed from the image alone.
  const int cw = 60, ch = 45, ox = 5, oy = 3, ow = 23, oh = 17;
  auto canvas = torch::zeros({1, 3, ch, cw});
  canvas.index_put_({0, torch::indexing::Slice(), torch::indexing::Slice(oy, oy + img.h), torch::indexing::Slice(ox, ox + img.w)}, src[0]);
  const ResampleAxis ax{ow, -ox, static_cast<double>(cw) / ow, -ox, static_cast<double>(cw - ox)};
  const ResampleAxis ay{oh, -oy, static_cast<double>(ch) / oh, -oy, static_cast<double>(ch - oy)};
  const auto placed = as_nchw(resample_aa_float(img, ax, ay), oh, ow, 3);
  CHECK((placed - aa(canvas, oh, ow)).abs().max().item<float>() <= 1e-3f);
  // ... and a crop of the image (a canvas smaller than the image: pixels outside it do not exist).
  const auto cut = src.index({0, torch::indexing::Slice(), torch::indexing::Slice(4, 30), torch::indexing::Slice(2, 27)}).unsqueeze(0);
  const ResampleAxis cx{11, 2, 25.0 / 11, 2, 27}, cy{10, 4, 26.0 / 10, 4, 30};
  CHECK((as_nchw(resample_aa_float(img, cx, cy), 10, 11, 3) - aa(cut, 10, 11)).abs().max().item<float>() <= 1e-3f);

  // An output pixel over no canvas pixel reads 0; a bad axis names itself.
  const ResampleAxis off{2, 100, 1, 0, 29};
  CHECK(resample_aa_float(img, off, resize_axis(img.h, 2)) == std::vector<float>(12, 0.f));
  CHECK_THROWS_WITH_AS(resample_aa(img, ResampleAxis{0, 0, 1, 0, 29}, resize_axis(img.h, 2)), doctest::Contains("n_out > 0"), Error);
  CHECK_THROWS_WITH_AS(resample_aa(img, ResampleAxis{3, 0, 0, 0, 29}, resize_axis(img.h, 2)), doctest::Contains("step > 0"), Error);
}

TEST_CASE("crop and flips move exactly the expected pixels") {
  Image img(3, 3, 1);
  for (int i = 0; i < 9; ++i) img.px[i] = static_cast<uint8_t>(i);  // value = 3y + x
  CHECK(crop(img, 1, 1, 2, 2).px == std::vector<uint8_t>{4, 5, 7, 8});
  CHECK(crop(img, 0, 2, 3, 1).px == std::vector<uint8_t>{2, 5, 8});
  CHECK_THROWS_AS(crop(img, 2, 0, 2, 1), Error);

  Image lr = img;
  flip_lr(lr);
  CHECK(lr.px == std::vector<uint8_t>{2, 1, 0, 5, 4, 3, 8, 7, 6});
  Image ud = img;
  flip_ud(ud);
  CHECK(ud.px == std::vector<uint8_t>{6, 7, 8, 3, 4, 5, 0, 1, 2});

  Image rgb(1, 2, 3);
  rgb.px = {1, 2, 3, 4, 5, 6};
  flip_lr(rgb);  // whole pixels move, channel order inside a pixel is kept
  CHECK(rgb.px == std::vector<uint8_t>{4, 5, 6, 1, 2, 3});
}

TEST_CASE("8-bit HSV follows OpenCV's ranges and hsv_jitter applies one gain per image") {
  using libreyolo::data::detail::rgb_to_hsv8;
  CHECK(rgb_to_hsv8(255, 0, 0) == std::array<uint8_t, 3>{0, 255, 255});
  CHECK(rgb_to_hsv8(255, 255, 0) == std::array<uint8_t, 3>{30, 255, 255});
  CHECK(rgb_to_hsv8(0, 255, 0) == std::array<uint8_t, 3>{60, 255, 255});
  CHECK(rgb_to_hsv8(0, 0, 255) == std::array<uint8_t, 3>{120, 255, 255});
  CHECK(rgb_to_hsv8(100, 50, 50) == std::array<uint8_t, 3>{0, 128, 100});
  CHECK(data::detail::hsv8_to_rgb(60, 255, 255) == std::array<uint8_t, 3>{0, 255, 0});
  CHECK(data::detail::hsv8_to_rgb(0, 0, 77) == std::array<uint8_t, 3>{77, 77, 77});

  std::mt19937_64 rng(3);
  Image img = noisy_rgb(8, 8, 7);
  Image same = img;
  hsv_jitter(same, 0, 0, 0, rng);
  CHECK(same.px == img.px);

  // Value gain only, on grey pixels (S = 0): each grey level v maps to trunc(v * r) clamped to 255,
  // with the same r for the whole image, r in [0.5, 1.5].
  Image grey(1, 3, 3);
  grey.px = {40, 40, 40, 100, 100, 100, 200, 200, 200};
  bool changed = false;
  for (int trial = 0; trial < 5; ++trial) {
    Image g = grey;
    hsv_jitter(g, 0, 0, 0.5, rng);
    for (int x = 0; x < 3; ++x) CHECK((g.at(0, x, 0) == g.at(0, x, 1) && g.at(0, x, 1) == g.at(0, x, 2)));
    double r = g.at(0, 1, 0) / 100.0;  // r to within 0.01
    CHECK(r >= 0.49);
    CHECK(r <= 1.51);
    CHECK(std::abs(g.at(0, 0, 0) - 40 * r) <= 1.0);
    CHECK(std::abs(g.at(0, 2, 0) - std::min(255.0, 200 * r)) <= 2.0);
    changed |= g.px != grey.px;
  }
  CHECK(changed);
}

TEST_CASE("to_chw_tensor: uint8 [3,H,W] with channel-major layout") {
  Image img(2, 3, 3);
  for (size_t i = 0; i < img.px.size(); ++i) img.px[i] = static_cast<uint8_t>(i);
  auto t = to_chw_tensor(img);
  CHECK(t.dtype() == torch::kUInt8);
  CHECK(t.sizes() == torch::IntArrayRef{3, 2, 3});
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) CHECK(t[c][y][x].item<int>() == img.at(y, x, c));
}
