#pragma once
// Family traits (mlpack TreeTraits style): what a trainer needs to know about a family at compile time.
// A family declares `struct traits : family_defaults { ... }` overriding only what differs; every
// member of family_defaults is a conservative default. The facts that differ per family (AMP default,
// recipe, capture region, the tasks it trains) live here and nowhere else: a new family states them in
// its own folder (docs/adding-a-family.md).
#include <array>
#include <concepts>
#include <optional>
#include <string_view>
#include <utility>

namespace libreyolo {

enum class Task { classify, detect, semantic, point };
// What a CUDA graph wraps (SPEC §2.3): nothing, the whole network forward, or the sub-module chain the
// network declares as its encoder boundary (backbone + encoder; the decoder, whose shapes may vary per
// batch, and the loss run eager). See capture/region.hpp.
enum class CaptureRegion { none, network, backbone_encoder };

constexpr std::string_view to_string(Task t) {
  switch (t) {
    case Task::classify: return "classify";
    case Task::detect: return "detect";
    case Task::semantic: return "semantic";
    case Task::point: return "point";
  }
  return "?";
}
constexpr std::string_view to_string(CaptureRegion r) {
  switch (r) {
    case CaptureRegion::none: return "none";
    case CaptureRegion::network: return "network";
    case CaptureRegion::backbone_encoder: return "backbone_encoder";
  }
  return "?";
}

// A list of a family's optional members (train/members.hpp names them: member::param_groups, ...).
namespace member {
template <class... M>
struct list {};
// with<list<A, B>, C> = list<A, B, C>: a template's members added to its policy's.
template <class L, class... M>
struct with_;
template <class... L, class... M>
struct with_<list<L...>, M...> {
  using type = list<L..., M...>;
};
template <class L, class... M>
using with = typename with_<L, M...>::type;
}  // namespace member

struct family_defaults {
  // The optional members the family has (train/members.hpp): the trainer calls exactly these, and a
  // declared member that is missing or mis-signed, or a member that is not declared, fails to compile.
  using members = member::list<>;
  // Precision: whether AMP is on when the user does not say (SPEC §2.2). Families whose original trains
  // in float32 say false here: D-FINE (its decoder clamps activations at 65504, the largest finite
  // float16), DEIM, RT-DETRv4 (inherits DEIM's setting), YOLO-NAS (detect), FOMO.
  static constexpr bool amp_default = true;
  // Why a family with amp_default = false trains in float32: the notice that an explicit amp=true
  // prints names it (one line, e.g. "its original trains in float32 (YOLONASConfig.amp = False)").
  static constexpr std::string_view fp32_reason = "its original trains in float32";
  // Capture: the region a CUDA graph wraps, and the tasks it applies to (empty = every task the
  // family trains). A task of the family outside captured_tasks trains eager, with one notice.
  static constexpr CaptureRegion capture_region = CaptureRegion::none;  // none = never captured
  static constexpr std::array<Task, 0> captured_tasks{};
  // Whether the loss can run inside a whole-step graph (cuda_graph=step): fixed shapes for a given batch
  // shape, no value read back to the host, no data-dependent branch. A family that knows says
  // `static constexpr bool step_capturable = true;` (or false); unset, a classification task whose capture
  // region is the whole network is, every other is not (capture/eager.hpp, step_capturable<F>()).
  static constexpr std::optional<bool> step_capturable = std::nullopt;
  // The largest |graph - eager| loss difference over 10 AMP steps that the family accepts when its eager
  // runs are not bit-reproducible (e.g. stochastic depth inside the captured region); 0 = bit for bit.
  static constexpr double graph_eager_spread = 0.0;
  static constexpr bool multi_scale_default = false;
  // The recipe: hyperparameter overrides of SPEC §3 as key=value, applied to keys the user did not set.
  static constexpr std::array<std::string_view, 0> overrides{};
  // Values of the original's trainer configuration that its trainer does not run ({key, its config value};
  // a number as JSON writes it, e.g. "0.75"): the override above then holds what it runs, and the fixture
  // check (tests/kit) accepts the difference.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 0> original_config_not_run{};
  // The original's architecture fixture folder under shared/fixtures/libreyolo/ for a size, as
  // "<prefix><size><suffix>" (e.g. "yolox-" + "s" + ""); empty prefix = the family has none.
  static constexpr std::string_view fixture_prefix = "";
  static constexpr std::string_view fixture_suffix = "";
};

namespace traits_detail {
template <class F>
constexpr Task task_of() {
  static_assert(requires { { F::task } -> std::convertible_to<Task>; },
                "a trainer policy names the task it trains: derive it from a task base (tasks/*.hpp), which "
                "declares `static constexpr Task task`, or declare that member yourself");
  return F::task;
}
}  // namespace traits_detail

// The traits of F plus the task it trains (from its task base).
template <class F>
struct family_traits : F::traits {
  static constexpr Task task = traits_detail::task_of<F>();
};

// Whether the trainer policy F (one family, one task) is inside its family's capture region.
template <class F>
constexpr bool task_is_captured() {
  using T = family_traits<F>;
  if constexpr (T::capture_region == CaptureRegion::none) {
    return false;
  } else {
    if (T::captured_tasks.size() == 0) return true;
    for (Task t : T::captured_tasks)
      if (t == family_traits<F>::task) return true;
    return false;
  }
}

}  // namespace libreyolo
