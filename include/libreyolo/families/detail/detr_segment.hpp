#pragma once
// The DETR families' segmented step (member::segmented_step, issue 44), around the family's set criterion
// (nn/detr/criterion.hpp or dfine_criterion.hpp): part A's end runs the decoder on the batch's device-made
// target slots with its denoising part at the fixed capacity, and returns the matching costs with the host's
// solve; part B's loss reads the solve's answer. The targets of part A are kept for part B.
#include <libreyolo/capture/step_graph.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/train/family.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace libreyolo::families::detail {

class DetrSegment {
 public:
  // out: the network's training output (its run(&targets, fixed) runs the decoder once).
  template <class Criterion, class Out>
  capture::Segment match(const Criterion& c, const Out& out, nn::detr::PaddedTargets targets) {
    t_ = std::move(targets);
    const auto& res = out.run(&t_, /*fixed=*/true);
    const auto layout = c.cost_layout(res, static_cast<int64_t>(t_.counts.size()), t_.M);
    const bool pinned = t_.labels.is_cuda();
    return {c.match_costs(res, t_), [layout, pinned](const torch::Tensor& host) { return Criterion::solve(host, layout, pinned); }};
  }
  template <class Criterion, class Out>
  train::LossOutput loss(const Criterion& c, const Out& out, const torch::Tensor& given) {
    auto l = c(out.run(), t_, given);
    t_ = {};
    return {l.total, l.items};
  }

 private:
  nn::detr::PaddedTargets t_;
};

}  // namespace libreyolo::families::detail
