#pragma once
// A synthetic set of policy P's task (P::synth, as `libreyolo data synth --task ...` writes it).
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/synth.hpp>

#include <torch/torch.h>

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

// One 128 px grey image with two boxes, a bright red one (class 0) and a dark one without blue (class 1), as a
// detection batch in input pixels: the DETR families' overfit tests train on it.
inline libreyolo::data::DetectBatch two_box_batch() {
  using torch::indexing::Slice;
  libreyolo::data::DetectBatch b;
  b.images = torch::full({1, 3, 128, 128}, 128, torch::kUInt8);
  b.images.index_put_({0, 0, Slice(16, 64), Slice(20, 76)}, 255);
  b.images.index_put_({0, 2, Slice(72, 120), Slice(64, 112)}, 0);
  b.boxes = {torch::tensor({0.f, 20.f, 16.f, 76.f, 64.f, 1.f, 64.f, 72.f, 112.f, 120.f}).view({2, 5})};
  b.targets = b.boxes[0].unsqueeze(0);
  return b;
}

}  // namespace lry_test
