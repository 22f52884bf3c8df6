// Classification folders (scan errors/skips, transforms, batches), the raster helpers and the
// synthetic generator.
#include <doctest/doctest.h>
#include <libreyolo/data/classify.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/synth.hpp>

#include <fstream>

#include "support.hpp"

using namespace libreyolo;
using namespace libreyolo::data;
namespace fs = std::filesystem;

namespace {

// Captures log lines for the lifetime of the object.
struct LogCapture {
  std::vector<std::string> lines;
  std::mutex mu;
  LogCapture() {
    log::set_sink([this](log::Level, std::string_view m) {
      std::lock_guard<std::mutex> lk(mu);
      lines.emplace_back(m);
    });
  }
  ~LogCapture() { log::set_sink(nullptr); }
  size_t count_containing(const std::string& s) {
    std::lock_guard<std::mutex> lk(mu);
    return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(s) != std::string::npos; }));
  }
};

Image flat(int h, int w, uint8_t r, uint8_t g, uint8_t b) {
  Image img(h, w, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) img.at(y, x, 0) = r, img.at(y, x, 1) = g, img.at(y, x, 2) = b;
  return img;
}

// root/{train,val}/{cat,dog}/ with `per_class` images each; cats red PNGs, dogs blue JPEGs, each
// image a slightly different shade so substitutions are visible.
void make_tree(const fs::path& root, int per_class = 3) {
  for (const char* split : {"train", "val"}) {
    fs::create_directories(root / split / "cat");
    fs::create_directories(root / split / "dog");
    for (int i = 0; i < per_class; ++i) {
      char cat[16], dog[16];  // (snprintf: GCC 12 gives a false -Wstringop-overflow on "c" + to_string)
      std::snprintf(cat, sizeof cat, "c%d.png", i);
      std::snprintf(dog, sizeof dog, "d%d.JPG", i);
      write_png(root / split / "cat" / cat, flat(30, 40, static_cast<uint8_t>(200 + 20 * i), 10, 10));
      write_jpeg(root / split / "dog" / dog, flat(40, 30, 10, 10, static_cast<uint8_t>(200 + 20 * i)));
    }
  }
}

void truncate_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
}

template <class F>
std::string data_error(F&& f) {
  return lry_test::message_of<DataError>(std::forward<F>(f));
}

}  // namespace

TEST_CASE("classify: a valid tree gives sorted names, labels and uint8/int64 batches through the Loader") {
  lry_test::TempDir dir("cls");
  make_tree(dir.path);
  std::ofstream(dir / "train/cat/notes.txt") << "not an image, ignored by extension";
  LogCapture logs;
  ClassifyAugment aug;
  ClassifyData d = open_classify(dir.path, 16, aug);
  CHECK(d.names == std::vector<std::string>{"cat", "dog"});
  CHECK(d.train->size() == 6);
  CHECK(d.val->size() == 6);
  CHECK(d.train->skipped() == 0);
  CHECK(logs.count_containing("train: 6 images, 2 classes") == 1);
  CHECK(logs.count_containing("val: 6 images, 2 classes") == 1);

  LoaderOptions o;
  o.batch = 4, o.workers = 2;
  Loader<ClassifyFolder> loader(d.val, o);
  loader.start_epoch(0);
  auto b = loader.next();
  REQUIRE(b);
  CHECK(b->images.sizes() == torch::IntArrayRef{4, 3, 16, 16});
  CHECK(b->images.dtype() == torch::kUInt8);
  CHECK(b->labels.sizes() == torch::IntArrayRef{4});
  CHECK(b->labels.dtype() == torch::kInt64);
  // The colour tells the class: red cats are label 0, blue dogs label 1.
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t label = b->labels[i].item<int64_t>();
    const int red = b->images[i][0][8][8].item<int>(), blue = b->images[i][2][8][8].item<int>();
    CHECK((label == 0 ? red > 150 && blue < 60 : blue > 150 && red < 60));
  }
}

TEST_CASE("classify: val transform is shorter-side resize then centre crop; train transform is seeded") {
  lry_test::TempDir dir("cls");
  fs::create_directories(dir / "val/a");
  Image img(20, 40, 3);
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 40; ++x)
      for (int c = 0; c < 3; ++c) img.at(y, x, c) = static_cast<uint8_t>(x * 6 + c);
  write_png(dir / "val/a/x.png", img);
  ClassifyAugment val;
  val.train = false, val.imgsz = 10;
  auto folder = ClassifyFolder::open(dir / "val", val);
  std::mt19937_64 rng(0);
  auto s = folder.get(0, rng, 0);
  // 20x40 -> 10x20 (every output column averages source columns 2x and 2x+1), keep columns 5..14.
  auto expect = to_chw_tensor(crop(resize_bilinear(img, 10, 20), 0, 5, 10, 10));
  CHECK(s.image.equal(expect));
  CHECK(s.image[0][3][0].item<int>() == std::lround((10 * 6 + 11 * 6) / 2.0));

  ClassifyAugment train;
  train.imgsz = 12;
  auto tf = ClassifyFolder::open(dir / "val", train);
  std::mt19937_64 r1(5), r2(5), r3(6);
  auto a = tf.get(0, r1, 0).image, b = tf.get(0, r2, 0).image, c = tf.get(0, r3, 0).image;
  CHECK(a.sizes() == torch::IntArrayRef{3, 12, 12});
  CHECK(a.equal(b));
  CHECK_FALSE(a.equal(c));
}

TEST_CASE("classify: missing root / split / empty class / differing class sets are DataErrors naming the path") {
  lry_test::TempDir dir("cls");
  ClassifyAugment aug;
  std::string m = data_error([&] { open_classify(dir / "nope", 32, aug); });
  CHECK(m.find((dir / "nope").string()) != std::string::npos);

  make_tree(dir / "noval");
  fs::remove_all(dir / "noval/val");
  m = data_error([&] { open_classify(dir / "noval", 32, aug); });
  CHECK(m.find((dir / "noval/val").string()) != std::string::npos);

  make_tree(dir / "empty");
  fs::create_directories(dir / "empty/train/eel");
  fs::create_directories(dir / "empty/val/eel");
  m = data_error([&] { open_classify(dir / "empty", 32, aug); });
  CHECK(m.find((dir / "empty/train/eel").string()) != std::string::npos);
  CHECK(m.find("no images") != std::string::npos);

  make_tree(dir / "extra");
  fs::create_directories(dir / "extra/val/fox");
  write_png(dir / "extra/val/fox/f.png", flat(8, 8, 1, 2, 3));
  m = data_error([&] { open_classify(dir / "extra", 32, aug); });
  CHECK(m.find("'fox'") != std::string::npos);

  make_tree(dir / "fewer");
  fs::remove_all(dir / "fewer/val/dog");
  m = data_error([&] { open_classify(dir / "fewer", 32, aug); });
  CHECK(m.find("'dog'") != std::string::npos);

  aug.scale_min = 0;
  CHECK_THROWS_WITH_AS(ClassifyFolder::open(dir / "extra/train", aug), doctest::Contains("scale_min = 0"), ConfigError);
}

TEST_CASE("classify: a truncated image is skipped at scan time, counted, and warned about by name") {
  lry_test::TempDir dir("cls");
  make_tree(dir.path);
  truncate_file(dir / "train/dog/d1.JPG");
  {
    std::ofstream t(dir / "train/cat/fake.png");
    t << "plain text";
  }
  LogCapture logs;
  ClassifyData d = open_classify(dir.path, 16, ClassifyAugment{});
  CHECK(d.train->size() == 5);  // 7 files, 2 of them bad
  CHECK(d.train->skipped() == 2);
  CHECK(d.val->skipped() == 0);
  CHECK(logs.count_containing((dir / "train/dog/d1.JPG").string()) == 1);
  CHECK(logs.count_containing((dir / "train/cat/fake.png").string()) == 1);
  CHECK(logs.count_containing("train: 5 images, 2 classes, 2 skipped (see warnings)") == 1);
}

TEST_CASE("classify: a file that breaks after the scan is replaced by the next valid index, with one warning") {
  lry_test::TempDir dir("cls");
  make_tree(dir.path);
  ClassifyAugment aug;
  aug.train = false, aug.imgsz = 8;
  auto folder = ClassifyFolder::open(dir / "val", aug);
  REQUIRE(folder.file(1).filename() == "c1.png");
  truncate_file(folder.file(1));
  LogCapture logs;
  std::mt19937_64 rng(0);
  for (int rep = 0; rep < 3; ++rep) {
    auto s = folder.get(1, rng, 0);
    CHECK(s.image.equal(folder.get(2, rng, 0).image));  // index 2 (c2.png) stands in
    CHECK_FALSE(s.image.equal(folder.get(0, rng, 0).image));
    CHECK(s.label == 0);
  }
  CHECK(logs.count_containing(folder.file(1).string()) == 1);
}

TEST_CASE("draw: fills cover exactly the expected pixels and report tight boxes") {
  Image img(10, 10, 3);
  PixelBox r = fill_rect(img, 2, 3, 5, 7, Texture::solid({9, 8, 7}));
  CHECK((r.x0 == 2 && r.y0 == 3 && r.x1 == 5 && r.y1 == 7));
  int painted = 0;
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 10; ++x) painted += img.at(y, x, 0) == 9;
  CHECK(painted == 12);

  // Right triangle (0,0),(8,0),(0,8): pixel centres with x + y + 1 < 8 -> 7 + 6 + ... + 1 = 28 pixels.
  Image t(10, 10, 1);
  PixelBox tb = fill_polygon(t, {{0, 0}, {8, 0}, {0, 8}}, Texture::solid({1, 1, 1}));
  int n = 0;
  for (auto v : t.px) n += v;
  CHECK(n == 28);
  CHECK((tb.x0 == 0 && tb.y0 == 0 && tb.x1 == 7 && tb.y1 == 7));

  Image big(101, 101, 1);
  fill_circle(big, 50.5, 50.5, 30, Texture::solid({1, 1, 1}));
  int area = 0;
  for (auto v : big.px) area += v;
  CHECK(std::abs(area - 3.14159265 * 900) < 60);

  Texture stripes;
  stripes.kind = TextureKind::stripes, stripes.a = {0, 0, 0}, stripes.b = {255, 255, 255}, stripes.period = 4;
  CHECK(stripes.at(0.5, 0.5) == Rgb{0, 0, 0});   // u in [0,2): first half-period is colour a
  CHECK(stripes.at(2.5, 0.5) == Rgb{255, 255, 255});
  CHECK(stripes.at(4.5, 9.5) == Rgb{0, 0, 0});
  Texture rings = stripes, grid = stripes;
  rings.kind = TextureKind::rings;  // radius in [0,2) -> a, [2,4) -> b
  CHECK(rings.at(1.0, 1.0) == Rgb{0, 0, 0});
  CHECK(rings.at(3.0, 0.0) == Rgb{255, 255, 255});
  grid.kind = TextureKind::grid;  // lines of b on the first quarter of every 4-pixel cell
  CHECK(grid.at(0.5, 2.5) == Rgb{255, 255, 255});
  CHECK(grid.at(2.5, 2.5) == Rgb{0, 0, 0});
}

TEST_CASE("synth: every class shape stays inside its box and is non-trivial; bad shape index throws") {
  for (int k = 0; k < kSynthMaxClasses; ++k) {
    CAPTURE(k);
    for (double rot : {0.0, 0.7, 2.0}) {
      Image img(64, 64, 3);
      PixelBox b = draw_class_shape(img, k, {10, 12, 50, 54}, rot, Texture::solid({255, 0, 0}));
      CHECK(b.x0 >= 10);
      CHECK(b.y0 >= 12);
      CHECK(b.x1 <= 50);
      CHECK(b.y1 <= 54);
      CHECK(b.x1 - b.x0 >= 15);
      CHECK(b.y1 - b.y0 >= 15);
    }
  }
  Image img(8, 8, 3);
  CHECK_THROWS_AS(draw_class_shape(img, 16, {0, 0, 8, 8}, 0, Texture{}), ConfigError);
}

TEST_CASE("synth: writes the right files, deterministic per seed, readable as a classification set") {
  lry_test::TempDir dir("syn");
  SynthOptions o;
  o.out = dir / "a", o.images = 40, o.imgsz = 32, o.classes = 4, o.seed = 7, o.val_fraction = 0.25;
  synth_classify(o);
  ClassifyData d = open_classify(o.out, 32, ClassifyAugment{});
  CHECK(d.names == std::vector<std::string>{"circle", "square", "star", "triangle"});
  CHECK(d.train->size() == 28);  // 10 per class, round(2.5) = 3 of them to val
  CHECK(d.val->size() == 12);
  Image first = read_image(o.out / "val/circle/00000.jpg");
  CHECK((first.h == 32 && first.w == 32));

  o.out = dir / "b";
  synth_classify(o);
  o.out = dir / "c", o.seed = 8;
  synth_classify(o);
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
  };
  CHECK(bytes(dir / "a/train/star/00039.jpg") == bytes(dir / "b/train/star/00039.jpg"));
  CHECK(bytes(dir / "a/train/star/00039.jpg") != bytes(dir / "c/train/star/00039.jpg"));

  synth_classify(o);  // re-running over its own output replaces it
  CHECK(fs::exists(dir / "c/train/star/00039.jpg"));
  std::ofstream(dir / "user.txt") << "x";
  o.out = dir.path;  // a non-empty folder it did not write
  CHECK_THROWS_WITH_AS(synth_classify(o), doctest::Contains("not empty"), ConfigError);
}

TEST_CASE("synth: option errors name the value and the allowed range") {
  SynthOptions o;
  o.out = "/nonexistent/never_written";
  o.classes = 17;
  CHECK_THROWS_WITH_AS(synth_classify(o), doctest::Contains("classes = 17 is outside the allowed range [2, 16]"), ConfigError);
  o.classes = 1;
  CHECK_THROWS_WITH_AS(synth_classify(o), doctest::Contains("classes = 1"), ConfigError);
  o.classes = 10, o.images = 15;
  CHECK_THROWS_WITH_AS(synth_classify(o), doctest::Contains("images = 15"), ConfigError);
  o.images = 100, o.task = "segment";  // detect is implemented (detect_synth.hpp); segment is not
  CHECK_THROWS_WITH_AS(synth(o), doctest::Contains("allowed: classify, detect"), ConfigError);
}
