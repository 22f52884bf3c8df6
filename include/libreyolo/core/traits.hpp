#pragma once
// Family traits (mlpack TreeTraits style): what a trainer needs to know about a family at compile time.
// A family declares `struct traits : family_defaults { ... }` overriding only what differs; every
// member of family_defaults is a conservative default.
#include <array>
#include <string_view>

namespace libreyolo {

enum class Task { classify, detect, segment, point };
enum class CaptureRegion { none, network, backbone_encoder };

constexpr std::string_view to_string(Task t) {
  switch (t) {
    case Task::classify: return "classify";
    case Task::detect: return "detect";
    case Task::segment: return "segment";
    case Task::point: return "point";
  }
  return "?";
}

struct family_defaults {
  static constexpr Task task = Task::detect;
  static constexpr bool amp_default = true;                         // SPEC §2.2
  static constexpr CaptureRegion capture_region = CaptureRegion::none;  // none = never captured
  static constexpr bool multi_scale_default = false;
  // Hyperparameter overrides of SPEC §3 as key=value, applied to keys the user did not set.
  static constexpr std::array<std::string_view, 0> overrides{};
};

template <class F>
struct family_traits : F::traits {};

}  // namespace libreyolo
