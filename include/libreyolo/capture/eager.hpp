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
// `whole_step`: the policy records whole training steps (capture scope step) and has run_whole_step,
// step_mode(), step_graphs_enabled() and step_summary(); `network_only` is the same policy with the
// network scope (what a step request resolves to for a family whose loss is not fixed-shape);
// enabled() says whether capture can still happen in this run.
template <class C>
concept CapturePolicy = requires(C c, const C cc, const TrainConfig& cfg, torch::Device d) {
  { C::graphs } -> std::convertible_to<bool>;
  { C::whole_step } -> std::convertible_to<bool>;
  typename C::network_only;
  c.setup(cfg, d);
  c.invalidate(std::string_view{});
  { cc.enabled() } -> std::convertible_to<bool>;
  { cc.report() } -> std::convertible_to<nlohmann::json>;
};

// What a CudaGraph policy captures: its type's scope (GraphMode network / step).
namespace scope {
struct network {
  static constexpr GraphMode mode = GraphMode::network;
};
struct step {
  static constexpr GraphMode mode = GraphMode::step;
};
}  // namespace scope

struct Eager {
  static constexpr bool graphs = false;
  static constexpr bool whole_step = false;
  using network_only = Eager;
  void setup(const TrainConfig&, torch::Device) {}
  bool enabled() const { return false; }
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
  return cfg.cuda_graph == GraphMode::step ? "cuda_graph=step" : "cuda_graph=true";
}

// Whether F's loss can run inside a step graph: fixed shapes for a given batch shape, no value read
// back to the host, no data-dependent branch. A family declares it in its traits
// (`static constexpr bool step_capturable = true;`, over family_defaults' unset value); unset,
// classification tasks whose whole network is the capture region (cross-entropy on fixed-size logits) are,
// every other family is not (a step request then captures the network region only).
template <class F>
constexpr bool step_capturable() {
  constexpr std::optional<bool> declared = F::traits::step_capturable;  // family_defaults: unset
  if constexpr (declared.has_value()) return *declared;
  else return family_traits<F>::task == Task::classify && family_traits<F>::capture_region == CaptureRegion::network;
}

// resolve<F, C, M>::type, statically, step -> network -> eager: C when F's traits declare a capture
// region for the task F trains, the mode allows capture and (for a step-scope C) F's loss is
// fixed-shape; C::network_only when only the last fails; otherwise Eager. `reason` says why it was
// downgraded to eager (empty when not). Another task of a captured family (outside
// traits::captured_tasks) trains eager.
template <class F, class C, Mode M = Mode::single>
struct resolve {
  static constexpr bool wanted = C::graphs;
  static constexpr bool family_ok = family_traits<F>::capture_region != CaptureRegion::none;
  static constexpr bool task_ok = task_is_captured<F>();
  static constexpr bool mode_ok = M == Mode::single;
  static constexpr bool downgraded = wanted && !(family_ok && task_ok && mode_ok);
  // A step-scope policy for a family whose loss is not fixed-shape: the network scope.
  static constexpr bool narrowed = wanted && !downgraded && C::whole_step && !step_capturable<F>();
  using type = std::conditional_t<downgraded, Eager, std::conditional_t<narrowed, typename C::network_only, C>>;
  static constexpr std::string_view reason = !wanted ? ""
                                             : M == Mode::distributed  ? "distributed"
                                             : M == Mode::distillation ? "distillation"
                                             : !family_ok              ? "family not capturable"
                                             : !task_ok                ? "this task of the family is not captured"
                                                                       : "";
  // The single notice of a static downgrade or narrowing (once per instantiation and request), naming
  // what was asked (`asked`: requested_graphs(cfg)).
  static void notice([[maybe_unused]] std::string_view asked = "cuda_graph=true") {
    if constexpr (downgraded) {
      log::notice_once(std::string("capture.resolve.") + typeid(resolve).name() + "." + std::string(asked),
                       std::string(asked) + " ignored (" + std::string(reason) + "); training runs eager.");
    } else if constexpr (narrowed) {
      not_fixed_shape_notice();
    }
  }
  // With the run's configuration: also a step key given to a trainer composed with the network scope
  // (the facade's resolved step trainer of a family whose loss is not fixed-shape is one: same notice).
  static void notice(const TrainConfig& cfg) {
    notice(requested_graphs(cfg));
    if constexpr (!downgraded && !narrowed && C::graphs && !type::whole_step) {
      if (cfg.cuda_graph != GraphMode::step) return;
      if constexpr (!step_capturable<F>())
        not_fixed_shape_notice();
      else
        log::notice_once("capture.step.network_scope", "cuda_graph=step: this trainer's capture policy has the network "
                         "scope (capture::CudaGraph<capture::scope::network>); capturing the network only");
    }
  }

 private:
  static void not_fixed_shape_notice() {
    log::notice_once(std::string("capture.step.not_fixed_shape.") + std::string(F::name),
                     "cuda_graph=step: the " + std::string(F::name) + " loss is not declared fixed-shape (traits "
                     "step_capturable); capturing the network only, as cuda_graph=true");
  }
};
template <class F, class C, Mode M = Mode::single>
using resolve_t = typename resolve<F, C, M>::type;

}  // namespace libreyolo::capture
