#pragma once
// The events the training loop raises (core/events.hpp). User callbacks passed to Trainer::fit handle
// the loop events; the profiler and the capture policy are the loop's built-in clients of the phase events.
//
//   struct PrintEpochs {
//     void operator()(libreyolo::event::epoch_end, const libreyolo::EpochInfo& e) { ... }
//   };
//   trainer.fit(PrintEpochs{});                 // checked at compile time: unknown event / wrong signature
//   trainer.events().on(libreyolo::event::step_end{}, [](const libreyolo::StepInfo& s) { ... });
#include <libreyolo/core/events.hpp>
#include <libreyolo/profile/events.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <optional>

namespace libreyolo {

// What the loop events carry.
struct EpochInfo {
  int epoch = 0;
  int epochs = 0;
  nlohmann::json row;  // the results row (empty in epoch_begin)
};
struct StepInfo {
  int epoch = 0;
  int64_t iteration = 0;        // micro-batches seen since the start of the run
  int64_t optimizer_steps = 0;
  torch::Tensor loss_items;     // the epoch's running sum of the loss parts, on the device; reading it syncs
  torch::Tensor batch_loss_items;  // this micro-batch's own loss parts (same device, same order)
};

namespace event {
// Loop events (user callbacks).
struct epoch_begin : events::event<const EpochInfo&> {
  static constexpr std::string_view name = "epoch_begin";
};
struct step_end : events::event<const StepInfo&> {
  static constexpr std::string_view name = "step_end";
};
struct epoch_end : events::event<const EpochInfo&> {
  static constexpr std::string_view name = "epoch_end";
};
// Phase events (the profiler's and the capture policy's): a step opens with step_begin, each of the five
// phases of SPEC §2.1 is bracketed by phase_begin / phase_end, and step_done carries the batch's images.
struct step_begin : events::event<> {
  static constexpr std::string_view name = "step_begin";
};
struct phase_begin : events::event<profile::Phase> {
  static constexpr std::string_view name = "phase_begin";
};
struct phase_end : events::event<profile::Phase> {
  static constexpr std::string_view name = "phase_end";
};
struct step_done : events::event<int> {
  static constexpr std::string_view name = "step_done";
};
}  // namespace event

// The events a user callback may handle, and the trainer's run-time system over them.
using LoopEvents = events::System<event::epoch_begin, event::step_end, event::epoch_end>;

template <class Callback>
constexpr bool check_callback() {
  return events::check_subscriber<Callback, event::epoch_begin, event::step_end, event::epoch_end>();
}

// Calls cb for E when it handles E (after check_callback has vetted it).
template <class E, class Sub, class... A>
void deliver(Sub& cb, A&&... a) {
  if constexpr (events::handles<Sub, E>) cb(E{}, std::forward<A>(a)...);
}

// The profiler as a client of the phase events: step_begin / a scope per phase / step_done.
template <class Prof>
class ProfilerClient {
 public:
  void bind(Prof* p) { p_ = p; }  // the owner's profiler (re-bound by the owner, so moves stay safe)
  void operator()(event::step_begin) { p_->step_begin(); }
  void operator()(event::phase_begin, profile::Phase ph) { open_.emplace(p_->phase(ph)); }
  void operator()(event::phase_end, profile::Phase) { open_.reset(); }
  void operator()(event::step_done, int images) { p_->step_end(images); }

 private:
  Prof* p_ = nullptr;
  std::optional<decltype(std::declval<Prof&>().phase(profile::Phase{}))> open_;
};

}  // namespace libreyolo
