#pragma once
// Small generated data sets for the tests that train or validate on them.
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/synth.hpp>

#include "support.hpp"

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace lry_test {

// A tiny classification set (48 images, 3 classes, 32 px), made once per test process.
inline const std::filesystem::path& tiny_classify_set() {
  static TempDir dir("lry_tiny_classify");
  static const bool made = [] {
    libreyolo::data::SynthOptions o;
    o.out = dir.path;
    o.images = 48;
    o.imgsz = 32;
    o.classes = 3;
    o.seed = 7;
    libreyolo::data::synth_classify(o);
    return true;
  }();
  (void)made;
  return dir.path;
}

// A detection set of `images` JPEGs (128 px, 3 classes) with its data.yaml, written under `dir`/data;
// returns the YAML's path.
inline std::filesystem::path small_detect_set(const std::filesystem::path& dir, int images, uint64_t seed) {
  libreyolo::data::SynthOptions o;
  o.task = "detect";
  o.out = dir / "data";
  o.images = images;
  o.imgsz = 128;
  o.classes = 3;
  o.seed = seed;
  libreyolo::data::synth(o);
  return o.out / "data.yaml";
}

// n PNG images 48 x 64 (h x w) of grey `background`, image k with one rectangle of grey (k + 1) * 40 at
// (10 + 4k, 8 + 3k) - (30 + 4k, 22 + 3k), labelled class k (YOLO labels beside): for the family pipelines'
// geometry tests, where every pixel and box is known.
struct RectImages {
  TempDir dir;
  std::vector<std::filesystem::path> files;
  std::vector<std::array<int, 4>> rects;  // x1, y1, x2, y2
  RectImages(int n, const std::string& name, uint8_t background) : dir(name) {
    for (int k = 0; k < n; ++k) {
      const int x1 = 10 + 4 * k, y1 = 8 + 3 * k, x2 = x1 + 20, y2 = y1 + 14;
      libreyolo::data::Image img(48, 64, 3, background);
      for (int y = y1; y < y2; ++y)
        for (int x = x1; x < x2; ++x)
          for (int c = 0; c < 3; ++c) img.at(y, x, c) = static_cast<uint8_t>((k + 1) * 40);
      files.push_back(dir.path / "images" / (std::to_string(k) + ".png"));
      std::filesystem::create_directories(files.back().parent_path());
      libreyolo::data::write_png(files.back(), img);
      std::filesystem::create_directories(dir.path / "labels");
      char line[96];
      std::snprintf(line, sizeof line, "%d %f %f %f %f\n", k, (x1 + x2) / 2.0 / 64, (y1 + y2) / 2.0 / 48,
                    (x2 - x1) / 64.0, (y2 - y1) / 48.0);
      std::ofstream(dir.path / "labels" / (std::to_string(k) + ".txt")) << line;
      rects.push_back({x1, y1, x2, y2});
    }
  }
};

}  // namespace lry_test
