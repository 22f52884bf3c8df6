#pragma once
// One training step on device state, the body of cuda_graph=step: the forward under autocast, the family's
// loss, backward, unscale + clip, the optimizer, the scaler and the EMA, all on device tensors (the
// optimizer's device lr, the scaler's device scale, the EMA's device ramp), handed to the capture policy,
// which records it in CUDA graphs or runs it eager. A family that declares member::segmented_step (the DETR
// line: its loss needs the host's matching between the forward and the backward) runs as two parts with
// that host decision between them (capture::run_segments). The trainer (train_whole_step) and
// graph_speedup's step arm both call this, so the step they measure is the step that trains.
//
// The caller owns what happens once per run or before each step: Optimizer::enable_device_state(), the
// family's step padding, ModelEMA::begin_device_update() (when it keeps an EMA).
#include <libreyolo/capture/step_graph.hpp>
#include <libreyolo/core/memory_format.hpp>
#include <libreyolo/train/accumulation.hpp>
#include <libreyolo/train/clip.hpp>
#include <libreyolo/train/ema.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/train/optimizer.hpp>

#include <torch/torch.h>

#include <optional>

namespace libreyolo::train {

// Gradient accumulation (train/accumulation.hpp): `acc` enabled, each micro-batch's loss is multiplied by the
// accumulator's device factor (1 / the window's length); an accumulating micro-batch (`optimizer_step` false) ends after its backward
// with the gradients stashed in the accumulator, the window's last one adds them back before the optimizer.
// Each kind is its own graph (StepKey::accumulating).
struct Accumulation {
  GradAccumulator* acc = nullptr;  // null or not enabled: one optimizer step per batch
  bool optimizer_step = true;      // false: an accumulating micro-batch
  bool on() const { return acc && acc->enabled(); }
};

// net: the family's network holder; ema: null without an EMA; clip: the gradient-norm bound (0: none);
// channels_last: the input goes in channels-last. Returns the step's loss items (a recorded graph's
// output: valid until the next replay).
template <class F, class Net, class Prec, class Capture, class Batch>
torch::Tensor device_step(F& family, Net& net, Prec& precision, Optimizer& opt, ModelEMA* ema, Capture& capture,
                          Batch& b, double clip, bool channels_last, Accumulation accumulation = {}) {
  auto* scaler = precision.device_scaler();
  // From the loss on: backward, unscale + clip, the optimizer, the scaler and the EMA on device state.
  auto finish = [&](const LossOutput& lo) -> torch::Tensor {
    if (accumulation.on()) {
      precision.scale(lo.total * accumulation.acc->factor()).backward();
      if (!accumulation.optimizer_step) {
        accumulation.acc->stash();
        return lo.items;
      }
      accumulation.acc->restore();
    } else {
      precision.scale(lo.total).backward();
    }
    const torch::Tensor found = scaler ? scaler->device_unscale_(opt.params()) : torch::Tensor();
    if (clip > 0) clip_grad_norm(opt.params(), clip);
    opt.device_step(found);
    if (scaler) scaler->device_update(found);
    if (ema) ema->device_update(*net);
    return lo.items;
  };
  auto forward = [&](const Batch& sb) { return net->forward(channels_last ? as_channels_last(F::input(sb)) : F::input(sb)); };
  auto reset_grads = [&] { opt.zero_grad(); };
  if constexpr (member::declares<F, member::segmented_step>) {
    // Part A: the forward and the family's segment (its matching costs); the host's solve; part B: the
    // family's loss from the host's answer, then finish.
    std::optional<decltype(forward(b))> out;  // part A's output, read by part B (the recording's too)
    auto part_a = [&](const Batch& sb) -> capture::Segment {
      [[maybe_unused]] auto guard = precision.autocast();
      out.emplace(forward(sb));
      return family.match_segment(*out, sb);
    };
    auto part_b = [&](const Batch& sb, const torch::Tensor& given) -> torch::Tensor {
      LossOutput lo;
      {
        [[maybe_unused]] auto guard = precision.autocast();
        lo = family.loss_given(*out, sb, given);
      }
      auto items = finish(lo);
      lo = {};
      out.reset();
      return items;
    };
    return capture.run_segmented_step(b, part_a, part_b, reset_grads, !accumulation.optimizer_step);
  } else {
    auto body = [&](const Batch& sb) -> torch::Tensor {
      LossOutput lo;
      {
        [[maybe_unused]] auto guard = precision.autocast();
        lo = family.loss(forward(sb), sb);
      }
      return finish(lo);
    };
    return capture.run_whole_step(b, body, reset_grads, !accumulation.optimizer_step);
  }
}

}  // namespace libreyolo::train
