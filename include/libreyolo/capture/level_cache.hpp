#pragma once
// LevelCache<V>: a value that depends only on the sizes of a network's output maps and their device
// (YOLOX's anchor grids, RTMDet's priors), built once per shape and reused by later losses.
// Safe under CUDA graph capture (cuda_graph=step records the loss): a value built while the current
// stream is being captured lives in the graph's memory pool and holds its numbers only once the graph
// replays, so it is returned to that one call (its kernels recorded in the graph, as YOLOv9 builds its
// anchors in every call) and never stored; eager calls store it. The policy runs a step eager before it
// records it (capture/cuda_graph.hpp: capture_whole_step), so in a training run the entry is there by then.
#include <libreyolo/core/compat.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::capture {

template <class V>
class LevelCache {
 public:
  // The value for `feats` ([B, C, H, W] maps, levels in order): the stored one for their sizes and device,
  // else make() (stored unless a capture is recording).
  template <class Make>
  V get(const std::vector<torch::Tensor>& feats, Make&& make) {
    Key key{feats.front().device().str(), {}};
    for (const auto& f : feats) {
      key.second.push_back(f.size(2));
      key.second.push_back(f.size(3));
    }
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    V v = make();
    if (!compat::cuda_stream_capturing(feats.front().device())) cache_.emplace(std::move(key), v);
    return v;
  }
  size_t size() const { return cache_.size(); }

 private:
  using Key = std::pair<std::string, std::vector<int64_t>>;
  std::map<Key, V> cache_;
};

}  // namespace libreyolo::capture
