#pragma once
// Small generated data sets for the tests that train or validate on them.
#include <libreyolo/data/synth.hpp>

#include "support.hpp"

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

}  // namespace lry_test
