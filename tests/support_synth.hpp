#pragma once
// A synthetic set of policy P's task (P::synth, as `libreyolo data synth --task ...` writes it).
#include <libreyolo/data/synth.hpp>

#include <cstdint>
#include <filesystem>

namespace lry_test {

// `images` images of `imgsz` px with `classes` classes under `out`; returns the path `data=` takes.
template <class P>
std::filesystem::path task_set(const std::filesystem::path& out, int images, int imgsz, int classes, uint64_t seed) {
  libreyolo::data::SynthOptions o;
  o.out = out;
  o.images = images;
  o.imgsz = imgsz;
  o.classes = classes;
  o.seed = seed;
  P::synth(o);
  return P::synth_data(o.out);
}

}  // namespace lry_test
