#pragma once
// A tiny generated classification set (48 images, 3 classes, 32 px), made once per test process and
// shared by the test files that train on it.
#include <libreyolo/data/synth.hpp>

#include "support.hpp"

namespace lry_test {

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

}  // namespace lry_test
