#pragma once
// Capture policies: the contract, Eager, and the static resolution of a requested policy against a
// family, task and run mode (CUTLASS's "auto schedule" pattern: conditional_t plus one notice).
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/capture/region.hpp>
#include <libreyolo/train/events.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

namespace libreyolo::capture {

// @tparam C: `static constexpr bool graphs`; setup(cfg, device); forward(net, x[, region]) -> the
// network's output (region: capture/region.hpp; default the whole network); run_step(net, body,
// window_start) runs one micro-batch's forward + backward `body` (a policy that graphs the backward
// recovers from a failed replay there); invalidate(reason); report() -> json for results.json. A policy
// is also a client of the loop's phase events (train/events.hpp) for those it handles.
template <class C>
concept CapturePolicy = requires(C c, const C cc, const TrainConfig& cfg, torch::Device d) {
  { C::graphs } -> std::convertible_to<bool>;
  c.setup(cfg, d);
  c.invalidate(std::string_view{});
  { cc.report() } -> std::convertible_to<nlohmann::json>;
};

struct Eager {
  static constexpr bool graphs = false;
  void setup(const TrainConfig&, torch::Device) {}
  template <class Net, class Region = whole_network>
  auto forward(Net& net, const torch::Tensor& x, Region = {}) {
    ++eager_steps_;
    return net->forward(x);
  }
  template <class Net, class Body>
  void run_step(Net&, Body&& body, bool /*window_start*/) {
    body();
  }
  void invalidate(std::string_view) {}
  nlohmann::json report() const {
    return {{"cuda_graph", false}, {"capture_shape", nullptr}, {"replayed_steps", 0}, {"eager_steps", eager_steps_},
            {"captures", 0},       {"invalidations", 0},       {"fallback_reason", nullptr}};
  }

 private:
  int64_t eager_steps_ = 0;
};

enum class Mode { single, distributed, distillation };

// What a run asked of the graph policy, as the user wrote it: "cuda_graph=step" or "cuda_graph=true"
// (notices name it).
inline std::string_view requested_graphs(const TrainConfig& cfg) {
  return cfg.cuda_graph_step ? "cuda_graph=step" : "cuda_graph=true";
}

// resolve<F, C, M>::type is C when F's traits declare a capture region for the task F trains and the
// mode allows capture, otherwise Eager; `reason` says why it was downgraded (empty when not). Another
// task of a captured family (outside traits::captured_tasks) trains eager.
template <class F, class C, Mode M = Mode::single>
struct resolve {
  static constexpr bool wanted = C::graphs;
  static constexpr bool family_ok = family_traits<F>::capture_region != CaptureRegion::none;
  static constexpr bool task_ok = task_is_captured<F>();
  static constexpr bool mode_ok = M == Mode::single;
  static constexpr bool downgraded = wanted && !(family_ok && task_ok && mode_ok);
  using type = std::conditional_t<downgraded, Eager, C>;
  static constexpr std::string_view reason = !wanted ? ""
                                             : M == Mode::distributed  ? "distributed"
                                             : M == Mode::distillation ? "distillation"
                                             : !family_ok              ? "family not capturable"
                                             : !task_ok                ? "this task of the family is not captured"
                                                                       : "";
  // The single notice of a static downgrade (once per instantiation and request), naming what was asked
  // (`asked`: requested_graphs(cfg)).
  static void notice([[maybe_unused]] std::string_view asked = "cuda_graph=true") {
    if constexpr (downgraded)
      log::notice_once(std::string("capture.resolve.") + typeid(resolve).name() + "." + std::string(asked),
                       std::string(asked) + " ignored (" + std::string(reason) + "); training runs eager.");
  }
  static void notice(const TrainConfig& cfg) { notice(requested_graphs(cfg)); }
};
template <class F, class C, Mode M = Mode::single>
using resolve_t = typename resolve<F, C, M>::type;

}  // namespace libreyolo::capture
