// Detection datasets: YAML variants and errors, the label index (each bad input, its cache),
// validation letterbox mapping, padded collate, mosaic closing, the end-to-end training pipeline
// (boxes on their pixels). Loader-level behaviour is in test_detect_loader.cpp.
#include <doctest/doctest.h>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/draw.hpp>
#include <libreyolo/data/loader.hpp>

#include <fstream>
#include <set>

#include "support.hpp"
#include "support_data.hpp"

using namespace libreyolo;
using namespace libreyolo::data;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

Image rect_image(int h, int w, int x1, int y1, int x2, int y2, Rgb c) {
  Image img(h, w, 3, 0);
  for (int y = y1; y < y2; ++y)
    for (int x = x1; x < x2; ++x) img.at(y, x, 0) = c.r, img.at(y, x, 1) = c.g, img.at(y, x, 2) = c.b;
  return img;
}

void write_png_image(const fs::path& p, const Image& img) {
  fs::create_directories(p.parent_path());
  write_png(p, img);
}

// Collects log lines while alive.
struct LogCapture {
  std::vector<std::string> lines;
  std::function<void(log::Level, std::string_view)> previous;
  LogCapture() {
    previous = log::set_sink([this](log::Level, std::string_view m) { lines.emplace_back(m); });
  }
  ~LogCapture() { log::set_sink(previous); }
  bool has(const std::string& a, const std::string& b = "") const {
    for (const auto& l : lines)
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
    return false;
  }
};

template <class F>
std::string error_of(F&& f) {
  return lry_test::message_of<Error>(std::forward<F>(f));
}

DetectAugment val_aug(int imgsz) {
  DetectAugment a;
  a.imgsz = imgsz;
  a.train = false;
  return a;
}

}  // namespace

TEST_CASE("dataset YAML: names as list, map or nc; root relative to the YAML; folders, list files, lists") {
  lry_test::TempDir td("lry_yaml");
  write_png_image(td / "ds/images/a/1.png", Image(8, 8, 3, 9));
  write_png_image(td / "ds/images/b/2.png", Image(8, 8, 3, 9));
  write_text(td / "ds/extra.txt", "# comment\n\nimages/b/2.png\n  ./images/a/1.png  \n");
  write_text(td / "cfg/d1.yaml", "path: ../ds\ntrain: images/a\nval: [images/b, extra.txt]\nnames: [cat, dog]\n");
  DatasetYaml d = load_dataset_yaml(td / "cfg/d1.yaml");
  CHECK(d.root == (td.path / "ds").lexically_normal());
  REQUIRE(d.train.size() == 1);
  CHECK(d.train[0] == (td.path / "ds/images/a").lexically_normal());
  REQUIRE(d.val.size() == 2);
  CHECK(d.test.empty());
  CHECK(d.names == std::vector<std::string>{"cat", "dog"});
  const auto val_images = split_image_files(d.val);
  REQUIRE(val_images.size() == 3);  // folder b, then the list file's two lines in order
  CHECK(val_images[0].filename() == "2.png");
  CHECK(val_images[1] == (td.path / "ds/images/b/2.png").lexically_normal());
  CHECK(val_images[2] == (td.path / "ds/images/a/1.png").lexically_normal());

  write_text(td / "ds/d2.yaml", "train: images/a\nval: images/b\ntest: images/b\nnames:\n  1: dog\n  0: cat\n  2: bird\nnc: 3\n");
  d = load_dataset_yaml(td / "ds/d2.yaml");  // no path: the YAML's folder
  CHECK(d.names == std::vector<std::string>{"cat", "dog", "bird"});
  CHECK(d.test.size() == 1);

  write_text(td / "ds/d3.yaml", "train: images/a\nval: images/b\nnc: 2\ndownload: https://example.invalid\n");
  CHECK(load_dataset_yaml(td / "ds/d3.yaml").names == std::vector<std::string>{"class0", "class1"});
}

TEST_CASE("dataset YAML errors name the file, line and key") {
  lry_test::TempDir td("lry_yaml_err");
  fs::create_directories(td / "images/a");
  auto err = [&](const std::string& text) {
    write_text(td / "d.yaml", text);
    return error_of([&] { load_dataset_yaml(td / "d.yaml"); });
  };
  std::string e = err("val: images/a\nnames: [a]\n");
  CHECK(e.find("d.yaml") != std::string::npos);
  CHECK(e.find("'train' is missing") != std::string::npos);
  e = err("train: images/a\nval: images/nope\nnames: [a]\n");
  CHECK(e.find("d.yaml':2, key 'val'") != std::string::npos);
  CHECK(e.find("images/nope") != std::string::npos);
  e = err("train: images/a\nval: images/a\nnames:\n  0: a\n  2: c\n");
  CHECK(e.find("key 'names'") != std::string::npos);
  CHECK(e.find("id 1 is missing") != std::string::npos);
  e = err("train: images/a\nval: images/a\nnames: [a, b]\nnc: 3\n");
  CHECK(e.find(":4, key 'nc'") != std::string::npos);
  CHECK(e.find("nc = 3 but 'names' has 2") != std::string::npos);
  e = err("path: nowhere\ntrain: images/a\nval: images/a\nnames: [a]\n");
  CHECK(e.find(":1, key 'path'") != std::string::npos);
  e = err("train: images/a\nval: images/a\nnames: [a\n");
  CHECK(e.find("not valid YAML") != std::string::npos);
  e = err("train: images/a\nval: images/a\n");
  CHECK(e.find("neither 'names' nor 'nc'") != std::string::npos);
  e = err("train: images/a\nval: images/a\nnames: [a]\nnc: two\n");
  CHECK(e.find("key 'nc': value 'two'") != std::string::npos);
  CHECK(error_of([&] { load_dataset_yaml(td / "missing.yaml"); }).find("does not exist") != std::string::npos);
}

TEST_CASE("label_path_for: the last images/ becomes labels/, the extension .txt") {
  CHECK(label_path_for("/d/images/train/a.jpg") == fs::path("/d/labels/train/a.txt"));
  CHECK(label_path_for("/images/x/images/y.PNG") == fs::path("/images/x/labels/y.txt"));
  CHECK(label_path_for("/d/pics/a.b.jpeg") == fs::path("/d/pics/a.b.txt"));
}

TEST_CASE("label index: every bad input is a counted, logged skip or removal, never a wrong label") {
  lry_test::TempDir td("lry_labels");
  const fs::path im = td / "images", lb = td / "labels";
  Image ok(16, 16, 3, 50);
  for (const char* n : {"a", "b", "c", "d", "e", "f", "i"}) write_png_image(im / (std::string(n) + ".png"), ok);
  write_text(lb / "a.txt", "0 0.5 0.5 0.2 0.2\n");
  write_text(lb / "c.txt", "0 0.5 0.5 0.2\n");
  write_text(lb / "d.txt", "0 0.5 0.5 0.2 0.2\n5 0.5 0.5 0.1 0.1\n");
  write_text(lb / "e.txt", "1 1.2 0.5 0.1 0.1\n");
  write_text(lb / "f.txt", "0 0.5 0.5 0.2 0.2\n\n0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n");
  write_text(lb / "i.txt", "0 abc 0.5 0.1 0.1\n");
  write_jpeg(im / "g.jpg", ok);
  const auto full = fs::file_size(im / "g.jpg");
  fs::resize_file(im / "g.jpg", full / 2);  // truncated download
  write_text(im / "j.jpg", "this is not an image");
  std::string list;
  for (const char* n : {"a.png", "b.png", "c.png", "d.png", "e.png", "f.png", "g.jpg", "h.png", "i.png", "j.jpg"})
    list += std::string("images/") + n + "\n";
  write_text(td / "split.txt", list);
  const auto images = split_image_files({td / "split.txt"});
  REQUIRE(images.size() == 10);

  LogCapture logs;
  const LabelIndex idx = build_label_index(images, 2, td / "labels.cache");
  log_label_summary("val", idx);
  CHECK(idx.stats.images == 3);  // a, b (background), f
  CHECK(idx.stats.backgrounds == 1);
  CHECK(idx.stats.boxes == 3);
  CHECK(idx.stats.bad_images == 3);  // g truncated, h missing, j not an image
  CHECK(idx.stats.bad_labels == 4);  // c, d, e, i
  CHECK(idx.stats.duplicates == 1);
  REQUIRE(idx.entries.size() == 3);
  CHECK(idx.entries[0].h == 16);
  CHECK(idx.entries[2].boxes.size() == 2);
  CHECK(logs.has("c.txt':1", "has 4 fields, expected 5"));
  CHECK(logs.has("d.txt':2", "class id '5' is outside [0, 1]"));
  CHECK(logs.has("e.txt':1", "cx = 1.2 is outside [0, 1]"));
  CHECK(logs.has("i.txt':1", "field cx = 'abc' is not a number"));
  CHECK(logs.has("f.txt'", "1 duplicate box(es) removed"));
  CHECK(logs.has("g.jpg", "truncated JPEG"));
  CHECK(logs.has("h.png", "does not exist"));
  CHECK(logs.has("j.jpg", "not a JPEG or PNG"));
  CHECK(logs.has("val: 3 images, 3 boxes, 1 backgrounds, 7 skipped (3 bad images, 4 bad label files), 1 duplicate"));

  // Nothing usable: an error, not an empty dataset.
  auto bad_only = std::vector<fs::path>{im / "c.png", im / "j.jpg"};
  CHECK(error_of([&] { DetectDataset::open_images(bad_only, {"a", "b"}, val_aug(32), {}); }).find("no usable image") !=
        std::string::npos);
}

TEST_CASE("label index cache: written once, reused, rebuilt when a label file changes") {
  lry_test::TempDir td("lry_lcache");
  for (int k = 0; k < 3; ++k) {
    write_png_image(td / "images" / (std::to_string(k) + ".png"), Image(10, 20, 3, 7));
    write_text(td / "labels" / (std::to_string(k) + ".txt"), "1 0.5 0.5 0.5 0.5\n");
  }
  const auto images = split_image_files({td / "images"});
  const fs::path cache = label_cache_path({td / "images"}, images);
  CHECK(cache.parent_path() == td.path);  // next to the labels folder
  CHECK(cache.filename().string().rfind("labels.", 0) == 0);
  LabelIndex a = build_label_index(images, 2, cache);
  CHECK_FALSE(a.from_cache);
  REQUIRE(fs::exists(cache));
  LabelIndex b = build_label_index(images, 2, cache);
  CHECK(b.from_cache);
  REQUIRE(b.entries.size() == 3);
  CHECK(b.entries[1].image == a.entries[1].image);
  CHECK(b.entries[1].w == 20);
  CHECK((b.entries[1].boxes == a.entries[1].boxes));
  CHECK(b.stats.boxes == 3);
  write_text(td / "labels/1.txt", "0 0.25 0.5 0.5 0.5\n0 0.75 0.5 0.5 0.5\n");
  fs::last_write_time(td / "labels/1.txt", fs::last_write_time(td / "labels/1.txt") + std::chrono::seconds(5));
  LabelIndex c = build_label_index(images, 2, cache);
  CHECK_FALSE(c.from_cache);
  CHECK(c.entries[1].boxes.size() == 2);
  CHECK(build_label_index(images, 3, cache).from_cache == false);  // class count is part of the key
}

TEST_CASE("validation samples: letterbox to imgsz with the inverse mapping kept") {
  lry_test::TempDir td("lry_val");
  write_png_image(td / "images/a.png", rect_image(100, 200, 40, 20, 80, 60, {255, 0, 0}));
  write_text(td / "labels/a.txt", "0 0.3 0.4 0.2 0.4\n");  // the rectangle [40,80) x [20,60)
  auto ds = DetectDataset::open_images({td / "images/a.png"}, {"box"}, val_aug(64), {});
  std::mt19937_64 rng(0);
  const DetectSample s = ds->get(0, rng, 0);
  REQUIRE(s.image.sizes() == torch::IntArrayRef({3, 64, 64}));
  // Loaded at 64 x 32 (r = 64/200 = 0.32), padded by 16 rows on top.
  CHECK(s.orig_h == 100);
  CHECK(s.orig_w == 200);
  CHECK(s.ratio_x == doctest::Approx(0.32));
  CHECK(s.ratio_y == s.ratio_x);
  CHECK(s.pad_x == 0);
  CHECK(s.pad_y == 16);
  REQUIRE(s.boxes.size(0) == 1);
  const auto b = s.boxes[0];
  CHECK(b[1].item<float>() == doctest::Approx(12.8));
  CHECK(b[2].item<float>() == doctest::Approx(22.4));
  CHECK(b[3].item<float>() == doctest::Approx(25.6));
  CHECK(b[4].item<float>() == doctest::Approx(35.2));
  // Inverse mapping recovers the drawn rectangle.
  CHECK((b[1].item<float>() - s.pad_x) / s.ratio_x == doctest::Approx(40));
  CHECK((b[4].item<float>() - s.pad_y) / s.ratio_y == doctest::Approx(60));
  CHECK(s.image[0][30][20].item<int>() == 255);  // inside the box: red
  CHECK(s.image[0][5][20].item<int>() == kLetterboxFill);
}

TEST_CASE("validation samples with letterbox_place top_left: no padding above, the inverse mapping kept") {
  lry_test::TempDir td("lry_val_tl");
  write_png_image(td / "images/a.png", rect_image(100, 200, 40, 20, 80, 60, {255, 0, 0}));
  write_text(td / "labels/a.txt", "0 0.3 0.4 0.2 0.4\n");  // the rectangle [40,80) x [20,60)
  auto aug = val_aug(64);
  aug.letterbox_place = LetterboxPlace::top_left;
  auto ds = DetectDataset::open_images({td / "images/a.png"}, {"box"}, aug, {});
  std::mt19937_64 rng(0);
  const DetectSample s = ds->get(0, rng, 0);
  CHECK(s.pad_x == 0);
  CHECK(s.pad_y == 0);
  CHECK(s.ratio_x == doctest::Approx(0.32));
  REQUIRE(s.boxes.size(0) == 1);
  CHECK(s.boxes[0][2].item<float>() == doctest::Approx(6.4));   // 20 * 0.32
  CHECK(s.boxes[0][4].item<float>() == doctest::Approx(19.2));  // 60 * 0.32
  CHECK(s.image[0][14][20].item<int>() == 255);                 // inside the box: red
  CHECK(s.image[0][40][20].item<int>() == kLetterboxFill);      // below the 32 image rows
}

TEST_CASE("validation samples with val_stretch: a stretch to imgsz x imgsz, a ratio per axis, no padding") {
  lry_test::TempDir td("lry_val_stretch");
  write_png_image(td / "images/a.png", rect_image(100, 200, 40, 20, 80, 60, {255, 0, 0}));
  write_text(td / "labels/a.txt", "0 0.3 0.4 0.2 0.4\n");  // the rectangle [40,80) x [20,60)
  auto aug = val_aug(64);
  aug.val_stretch = true;
  auto ds = DetectDataset::open_images({td / "images/a.png"}, {"box"}, aug, {});
  std::mt19937_64 rng(0);
  const DetectSample s = ds->get(0, rng, 0);
  REQUIRE(s.image.sizes() == torch::IntArrayRef({3, 64, 64}));
  CHECK(s.ratio_x == doctest::Approx(0.32));  // 64 / 200
  CHECK(s.ratio_y == doctest::Approx(0.64));  // 64 / 100
  CHECK(s.pad_x == 0);
  CHECK(s.pad_y == 0);
  REQUIRE(s.boxes.size(0) == 1);
  const auto b = s.boxes[0];
  CHECK(b[1].item<float>() == doctest::Approx(12.8));
  CHECK(b[2].item<float>() == doctest::Approx(12.8));
  CHECK(b[3].item<float>() == doctest::Approx(25.6));
  CHECK(b[4].item<float>() == doctest::Approx(38.4));
  // The batch's record and unletterbox's per-axis form take the boxes back to the drawn rectangle.
  const auto batch = DetectDataset::collate({s});
  REQUIRE(batch.letterbox.size() == 1);
  const auto& lb = batch.letterbox[0];
  CHECK(lb == std::array<double, 6>{100, 200, s.ratio_x, s.ratio_y, 0, 0});
  const auto back = unletterbox(s.boxes.narrow(1, 1, 4), {64, 64}, {100, 200}, std::array<double, 2>{lb[2], lb[3]}, {lb[4], lb[5]});
  CHECK(back[0][0].item<float>() == doctest::Approx(40));
  CHECK(back[0][1].item<float>() == doctest::Approx(20));
  CHECK(back[0][2].item<float>() == doctest::Approx(80));
  CHECK(back[0][3].item<float>() == doctest::Approx(60));
  // The image is stretched, not padded: the red rectangle lands at rows [12.8, 38.4), columns [12.8, 25.6).
  CHECK(s.image[0][25][19].item<int>() == 255);
  CHECK(s.image[1][25][19].item<int>() == 0);
  CHECK(s.image[0][2][2].item<int>() != kLetterboxFill);  // no grey border: the image's own background
}

TEST_CASE("collate: padded [B, M, 5] targets (batch max or fixed max_boxes), per-image boxes kept") {
  auto sample = [](std::vector<std::array<float, 5>> rows, int max_boxes) {
    DetectSample s;
    s.image = torch::zeros({3, 8, 8}, torch::kUInt8);
    s.boxes = torch::zeros({static_cast<int64_t>(rows.size()), 5});
    for (size_t i = 0; i < rows.size(); ++i)
      for (int k = 0; k < 5; ++k) s.boxes[i][k] = rows[i][k];
    s.path = "img" + std::to_string(rows.size());
    s.max_boxes = max_boxes;
    return s;
  };
  const std::vector<std::array<float, 5>> two = {{1, 0, 0, 2, 2}, {2, 1, 1, 5, 5}};
  const std::vector<std::array<float, 5>> three = {{0, 0, 0, 1, 1}, {3, 0, 0, 4, 4}, {4, 0, 0, 3, 3}};
  std::vector<DetectSample> v;
  v.push_back(sample({}, 0));
  v.push_back(sample(two, 0));
  v.push_back(sample(three, 0));
  DetectBatch b = DetectDataset::collate(std::move(v));
  CHECK(b.images.sizes() == torch::IntArrayRef({3, 3, 8, 8}));
  REQUIRE(b.targets.sizes() == torch::IntArrayRef({3, 3, 5}));
  CHECK(b.targets[0].select(1, 0).eq(-1).all().item<bool>());  // background: all padding
  CHECK(b.targets[1][1][0].item<float>() == 2);
  CHECK(b.targets[1][1][3].item<float>() == 5);
  CHECK(b.targets[1][2][0].item<float>() == -1);
  CHECK(b.targets[1][2].slice(0, 1).abs().sum().item<float>() == 0);
  CHECK(b.boxes[2].size(0) == 3);
  CHECK(b.paths[1] == "img2");

  std::vector<DetectSample> w;
  w.push_back(sample(two, 2));
  w.push_back(sample(three, 2));
  LogCapture logs;
  DetectBatch f = DetectDataset::collate(std::move(w));
  REQUIRE(f.targets.sizes() == torch::IntArrayRef({2, 2, 5}));
  // Three boxes, M = 2: the two largest (areas 16 and 9; not 1) stay, in their original order.
  CHECK(f.targets[1][0][0].item<float>() == 3);
  CHECK(f.targets[1][1][0].item<float>() == 4);
  CHECK(f.boxes[1].size(0) == 3);
  CHECK(logs.has("max_boxes = 2", "keep the largest 2"));
}

TEST_CASE("mosaic closes for the last no_aug_epochs epochs, and listeners hear it once") {
  lry_test::TempDir td("lry_mosaic_close");
  write_png_image(td / "images/a.png", Image(32, 32, 3, 1));
  DetectAugment a;
  a.imgsz = 32, a.epochs = 10, a.no_aug_epochs = 3;
  auto ds = DetectDataset::open_images({td / "images/a.png"}, {"x"}, a, {});
  std::vector<std::pair<bool, int>> heard;
  ds->on_mosaic_change([&](bool on, int epoch) { heard.emplace_back(on, epoch); });
  CHECK(ds->mosaic_active());
  for (int e = 0; e < 10; ++e) ds->set_epoch(e);
  CHECK_FALSE(ds->mosaic_active());
  CHECK(ds->mosaic_on(6));
  CHECK_FALSE(ds->mosaic_on(7));
  REQUIRE(heard.size() == 1);
  CHECK(heard[0] == std::make_pair(false, 7));
  ds->set_epoch(2);  // resuming earlier reopens it
  REQUIRE(heard.size() == 2);
  CHECK(heard[1] == std::make_pair(true, 2));
}

TEST_CASE("training pipeline end to end: mosaic, affine and flips keep every box on its pixels") {
  // Seven images, each a black field with one rectangle in its own pure colour (class = colour).
  const Rgb colours[7] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 0}, {255, 0, 255}, {0, 255, 255}, {255, 255, 255}};
  lry_test::TempDir td("lry_e2e");
  std::vector<fs::path> files;
  std::vector<double> area;  // rectangle area in the loaded (long side 64) image
  for (int k = 0; k < 7; ++k) {
    const int x1 = 6 + 4 * k, y1 = 4 + 2 * k, x2 = x1 + 20 + 2 * k, y2 = y1 + 14 + k;  // in a 96 x 72 image
    files.push_back(td / "images" / (std::to_string(k) + ".png"));
    write_png_image(files.back(), rect_image(72, 96, x1, y1, x2, y2, colours[k]));
    char line[96];
    std::snprintf(line, sizeof line, "%d %f %f %f %f\n", k, (x1 + x2) / 192.0, (y1 + y2) / 144.0, (x2 - x1) / 96.0,
                  (y2 - y1) / 72.0);
    write_text(td / "labels" / (std::to_string(k) + ".txt"), line);
    area.push_back((x2 - x1) * (y2 - y1) * (64.0 / 96) * (64.0 / 96));
  }
  DetectAugment a;
  a.imgsz = 64, a.translate = 0.1, a.scale = 0.3, a.hsv_h = a.hsv_s = a.hsv_v = 0, a.fliplr = 0.5, a.flipud = 0.5;
  std::vector<std::string> names(7, "c");
  auto ds = DetectDataset::open_images(files, names, a, {});
  int checked = 0, boxes_seen = 0;
  for (uint64_t seed = 0; checked < 12 && seed < 200; ++seed) {
    std::mt19937_64 probe(seed);  // replay the mosaic's draws: which images are the 4 tiles
    bernoulli(probe, 1.0);
    std::set<int64_t> tiles{static_cast<int64_t>(seed % 7)};
    for (int k = 0; k < 3; ++k) tiles.insert(randint(probe, 0, 6));
    if (tiles.size() < 4) continue;  // a repeated image would make colours ambiguous
    std::mt19937_64 rng(seed);
    const DetectSample s = ds->get(seed % 7, rng, 0);
    Image img(64, 64, 3);
    std::memcpy(img.px.data(), s.image.permute({1, 2, 0}).contiguous().data_ptr<uint8_t>(), img.px.size());
    for (int c = 0; c < 7; ++c) {
      std::vector<DetBox> mine;
      for (int64_t r = 0; r < s.boxes.size(0); ++r)
        if (s.boxes[r][0].item<float>() == c)
          mine.push_back({float(c), s.boxes[r][1].item<float>(), s.boxes[r][2].item<float>(), s.boxes[r][3].item<float>(),
                          s.boxes[r][4].item<float>()});
      REQUIRE(mine.size() <= 1);
      int coloured = 0, outside = 0, holes = 0;
      for (int y = 0; y < 64; ++y)
        for (int x = 0; x < 64; ++x) {
          const bool is_c = std::abs(img.at(y, x, 0) - colours[c].r) <= 40 && std::abs(img.at(y, x, 1) - colours[c].g) <= 40 &&
                            std::abs(img.at(y, x, 2) - colours[c].b) <= 40;
          coloured += is_c;
          if (mine.empty()) continue;
          const auto& b = mine[0];
          const double cx = x + 0.5, cy = y + 0.5;
          if (is_c && !(cx > b.x1 - 1 && cx < b.x2 + 1 && cy > b.y1 - 1 && cy < b.y2 + 1)) ++outside;
          if (!is_c && cx > b.x1 + 1 && cx < b.x2 - 1 && cy > b.y1 + 1 && cy < b.y2 - 1) ++holes;
        }
      if (!tiles.count(c)) CHECK(coloured == 0);
      if (!mine.empty()) {
        ++boxes_seen;
        CHECK(outside == 0);  // the box covers every pixel of its rectangle
        CHECK(holes == 0);    // and nothing else
      } else {
        // Dropped by the box filter: what is left is a sliver (<= 2 px wide, or <= 10% of the area
        // at the largest scale 1.3, plus its blended rim).
        CHECK(coloured <= 0.1 * area[c] * 1.69 + 2 * 64 + 8);
      }
    }
    ++checked;
  }
  CHECK(checked == 12);
  CHECK(boxes_seen > 12);  // 20 of the 48 tiles keep a box with these seeds
}

TEST_CASE("distributed loader: a rank's samples equal one process's at the same epoch positions (mosaic partners too)") {
  // Regression: the dataset was handed the rank's share as if it were the whole epoch's order, and
  // wrote image positions past its table (heap corruption in two-rank YOLOv9 runs).
  lry_test::TempDir td("lry_det_ranks");
  const auto yaml = load_dataset_yaml(lry_test::small_detect_set(td.path, 20, 4));
  DetectAugment a;
  a.imgsz = 64, a.mosaic = 1.0;
  auto ds = DetectDataset::open(yaml, "train", a);
  REQUIRE(ds->size() >= 8);
  auto samples = [&](int rank, int world) {
    LoaderOptions o;
    o.batch = 2, o.workers = 0, o.seed = 7, o.rank = rank, o.world = world;
    Loader<DetectDataset> loader(ds, o);
    loader.start_epoch(2);
    std::vector<torch::Tensor> out;
    while (auto b = loader.next())
      for (int64_t i = 0; i < b->images.size(0); ++i) out.push_back(b->images[i]);
    return out;
  };
  const auto one = samples(0, 1);
  REQUIRE(one.size() == ds->size());
  size_t compared = 0;
  for (int r = 0; r < 2; ++r) {
    const auto mine = samples(r, 2);
    CHECK(mine.size() == (ds->size() + 1) / 2);
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t pos = k * 2 + static_cast<size_t>(r);
      if (pos >= one.size()) break;  // the share's padding (wrapped around to the epoch's start)
      CHECK_MESSAGE(torch::equal(mine[k], one[pos]), "rank " << r << ", epoch position " << pos);
      ++compared;
    }
  }
  CHECK(compared == ds->size());
  std::vector<size_t> share(ds->size() / 2);
  std::iota(share.begin(), share.end(), size_t{0});
  CHECK_THROWS_WITH_AS(ds->set_epoch_order(0, share, LoaderOptions{}), doctest::Contains("before sharding over ranks"), Error);
}

namespace {
// The plain (affine = false) pipeline's options: the original's YOLOv9 transform with YOLOX's additive HSV.
DetectAugment plain_aug(int imgsz) {
  DetectAugment a;
  a.imgsz = imgsz, a.affine = false, a.mosaic = 0, a.mixup = 0, a.fliplr = 0, a.flipud = 0;
  a.hsv_mode = "add", a.hsv_h = 5, a.hsv_s = 30, a.hsv_v = 30, a.hsv_prob = 1;
  a.letterbox_place = LetterboxPlace::top_left;
  return a;
}
std::vector<std::array<float, 5>> box_rows(const DetectSample& s) {
  std::vector<std::array<float, 5>> r;
  for (int64_t i = 0; i < s.boxes.size(0); ++i)
    r.push_back({s.boxes[i][0].item<float>(), s.boxes[i][1].item<float>(), s.boxes[i][2].item<float>(),
                 s.boxes[i][3].item<float>(), s.boxes[i][4].item<float>()});
  return r;
}
}  // namespace

TEST_CASE("plain pipeline, an image alone in the corner: it flips within itself and stays there; HSV spares the padding") {
  // A 96 x 48 (h x w) image, shown 64 x 32 at imgsz 64: the padding is the right half. Its red rectangle
  // [6, 18) x [12, 36) is [4, 12) x [8, 24) once shown.
  lry_test::TempDir td("lry_plain_corner");
  write_png_image(td / "images/a.png", rect_image(96, 48, 6, 12, 18, 36, {200, 40, 40}));
  write_text(td / "labels/a.txt", "0 0.25 0.25 0.25 0.25\n");
  auto a = plain_aug(64);
  a.fliplr = 1;
  auto flipped = DetectDataset::open_images({td / "images/a.png"}, {"box"}, a, {});
  a.fliplr = 0;
  auto kept = DetectDataset::open_images({td / "images/a.png"}, {"box"}, a, {});
  a.hsv_prob = 0;
  auto bare = DetectDataset::open_images({td / "images/a.png"}, {"box"}, a, {});
  int jittered = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    std::mt19937_64 r1(seed), r2(seed), r3(seed);
    const DetectSample f = flipped->get(0, r1, 0), k = kept->get(0, r2, 0), b = bare->get(0, r3, 0);
    REQUIRE(box_rows(f).size() == 1);
    REQUIRE(box_rows(k).size() == 1);
    // Mirrored about the image's 32 columns (the original flips before its letterbox), not the canvas's 64.
    CHECK(box_rows(k)[0][1] == doctest::Approx(4.f));
    CHECK(box_rows(k)[0][3] == doctest::Approx(12.f));
    CHECK(box_rows(f)[0][1] == doctest::Approx(20.f));
    CHECK(box_rows(f)[0][3] == doctest::Approx(28.f));
    CHECK(box_rows(f)[0][2] == doctest::Approx(8.f));
    CHECK(box_rows(f)[0][4] == doctest::Approx(24.f));
    // The flipped image is the kept one mirrored within its columns 0..31.
    CHECK(torch::equal(f.image.narrow(2, 0, 32), k.image.narrow(2, 0, 32).flip({2})));
    for (const auto* s : {&f, &k, &b}) {
      CHECK(s->image.narrow(2, 32, 32).eq(kLetterboxFill).all().item<bool>());  // the padding: the fill colour
      CHECK(s->pad_x == 0);
    }
    // The rectangle's pixels in the unjittered sample are its colour; HSV moves them.
    CHECK(b.image[0][16][8].item<int>() == 200);
    jittered += !torch::equal(k.image.narrow(2, 0, 32), b.image.narrow(2, 0, 32));
  }
  CHECK(jittered >= 6);  // HSV acts on the image (each channel's offset kept with p 0.5)
}

TEST_CASE("plain pipeline's mixup follows a mosaic only; its partner is an image alone") {
  // Seven images of one rectangle each (one class each): a mosaic holds up to four boxes, an image alone one.
  lry_test::TempDir td("lry_plain_mixup");
  std::vector<fs::path> files;
  for (int k = 0; k < 7; ++k) {
    files.push_back(td / "images" / (std::to_string(k) + ".png"));
    write_png_image(files.back(), rect_image(64, 64, 8 + 2 * k, 8, 40 + 2 * k, 40, {uint8_t(30 * k), 200, 90}));
    char line[64];
    std::snprintf(line, sizeof line, "%d %f 0.375 0.5 0.5\n", k, (24.0 + 2 * k) / 64);
    write_text(td / "labels" / (std::to_string(k) + ".txt"), line);
  }
  std::vector<std::string> names(7, "c");
  auto a = plain_aug(64);
  a.mosaic = 1, a.epochs = 10, a.no_aug_epochs = 2, a.fliplr = 0.5;
  auto plain = DetectDataset::open_images(files, names, a, {});
  a.mixup = 1;
  auto mixed = DetectDataset::open_images(files, names, a, {});
  int blended = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    {  // epoch 9: mosaic has closed, so no mixup: the same sample, draw for draw
      std::mt19937_64 r1(seed), r2(seed);
      const DetectSample p = plain->get(seed % 7, r1, 9), m = mixed->get(seed % 7, r2, 9);
      CHECK(torch::equal(p.image, m.image));
      CHECK((box_rows(p) == box_rows(m)));
      REQUIRE(box_rows(m).size() == 1);
    }
    // Epoch 0: a mosaic, then the partner's one box after the mosaic's boxes and the two images blended.
    std::mt19937_64 r1(seed), r2(seed);
    const DetectSample p = plain->get(seed % 7, r1, 0), m = mixed->get(seed % 7, r2, 0);
    const auto pb = box_rows(p), mb = box_rows(m);
    if (pb.empty()) continue;  // a mosaic that kept no box is not mixed
    REQUIRE(mb.size() == pb.size() + 1);
    CHECK(std::equal(pb.begin(), pb.end(), mb.begin()));
    const auto& extra = mb.back();  // the partner alone, in the top-left corner: its box within [0, 64)
    CHECK(extra[1] >= 0.f);
    CHECK(extra[3] <= 64.f);
    CHECK(extra[3] - extra[1] == doctest::Approx(32.f));
    blended += !torch::equal(p.image, m.image);
  }
  CHECK(blended >= 8);
}

TEST_CASE("plain pipeline: a canvas without a box is left bare (no flip, no HSV); an image of sub-pixel boxes keeps them") {
  lry_test::TempDir td("lry_plain_bare");
  const Image img = rect_image(96, 48, 6, 12, 18, 36, {200, 40, 40});
  write_png_image(td / "images/empty.png", img);
  write_text(td / "labels/empty.txt", "");
  write_png_image(td / "images/tiny.png", img);
  write_text(td / "labels/tiny.txt", "0 0.25 0.25 0.01 0.25\n");  // 0.48 px wide in the file, 0.32 px once shown
  auto a = plain_aug(64);
  a.fliplr = 1;
  auto ds = DetectDataset::open_images({td / "images/empty.png", td / "images/tiny.png"}, {"box"}, a, {});
  a.fliplr = 0, a.hsv_prob = 0;
  auto bare = DetectDataset::open_images({td / "images/empty.png", td / "images/tiny.png"}, {"box"}, a, {});
  for (uint64_t seed = 0; seed < 4; ++seed)
    for (size_t i = 0; i < 2; ++i) {
      std::mt19937_64 r1(seed), r2(seed);
      const DetectSample s = ds->get(i, r1, 0), b = bare->get(i, r2, 0);
      CHECK(torch::equal(s.image, b.image));  // neither flipped nor jittered
      CHECK(s.image[0][16][8].item<int>() == 200);
      CHECK(s.boxes.size(0) == static_cast<int64_t>(i));  // the tiny box kept, unflipped, where it was
      if (i == 1) CHECK(s.boxes[0][1].item<float>() == doctest::Approx((12 - 0.24) * 2 / 3.0).epsilon(1e-3));
    }
}
