#pragma once
// The profiler policy contract used by the trainer, the run context it attaches with, and `Off`,
// the policy that compiles to nothing.
#include <libreyolo/profile/events.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <concepts>
#include <filesystem>

namespace libreyolo::profile {

struct RunContext {
  std::filesystem::path run_dir;  // artifacts are written here
  // model, device, batch, imgsz, amp, amp_dtype, workers, cuda_graph, precision, ... (copied into the report)
  nlohmann::json meta = nlohmann::json::object();
  torch::Device device = torch::kCPU;
  int accumulate = 1;  // micro-batches per optimizer step; the window rounds up to multiples of it
  bool distributed = false;
  bool graphs = false;  // training steps replay CUDA graphs (cuda_graph=true on a CUDA device)
};

// What the trainer calls: attach once, then per step step_begin() before the loader's next(), one RAII
// `phase()` scope around each of the five phases, and step_end(images) at the very end of the step.
// Before attach: set_window(warmup, active) and set_traced_steps(n) (the config's profile_* keys); after
// the run, wait() until the report is written.
template <class P>
concept ProfilerPolicy = requires(P p, const P cp, const RunContext& c, Phase ph) {
  { P::enabled } -> std::convertible_to<bool>;
  p.set_window(int{}, int{});
  p.set_traced_steps(int{});
  cp.wait();
  p.attach(c);
  p.step_begin();
  { p.phase(ph) };
  p.step_end(int{});
  { p.finished() } -> std::convertible_to<bool>;
};

// Profiling off: every member is an empty inline function, so the trainer's calls compile away.
struct Off {
  static constexpr bool enabled = false;
  struct Scope {};
  void set_window(int, int) {}
  void set_traced_steps(int) {}
  void wait() const {}
  void attach(const RunContext&) {}
  void step_begin() {}
  Scope phase(Phase) { return {}; }
  void step_end(int) {}
  bool finished() const { return true; }
};
static_assert(ProfilerPolicy<Off>);

}  // namespace libreyolo::profile
