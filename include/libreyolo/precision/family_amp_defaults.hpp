#pragma once
// Which families train in float32 by default (SPEC §2.2), as data that family traits read, so a
// family added later takes its fact from here instead of restating it. Unlisted families default to AMP.
// D-FINE: its decoder clamps activations at 65504, the largest finite float16; DEIM and RT-DETRv4
// (which inherits DEIM's setting), YOLO-NAS (detect) and FOMO follow the original's defaults.
#include <array>
#include <string_view>

namespace libreyolo::precision {

struct FamilyAmpDefault {
  std::string_view family;  // canonical spelling: lower case, no '-' / '_' / ' '
  bool amp_default;
};

inline constexpr std::array<FamilyAmpDefault, 5> kFamilyAmpDefaults{{
    {"dfine", false},
    {"deim", false},
    {"yolonas", false},
    {"fomo", false},
    {"rtdetrv4", false},
}};

namespace detail {
// Compares a user-facing family name ("D-FINE", "yolo_nas", "RT-DETRv4") with a canonical entry,
// ignoring case and the separators '-', '_', ' '.
constexpr bool same_family_name(std::string_view name, std::string_view canonical) {
  size_t j = 0;
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (j >= canonical.size() || canonical[j] != c) return false;
    ++j;
  }
  return j == canonical.size();
}
}  // namespace detail

// The AMP default of a family by name: the table's entry, else true.
constexpr bool family_amp_default(std::string_view family) {
  for (const auto& e : kFamilyAmpDefaults)
    if (detail::same_family_name(family, e.family)) return e.amp_default;
  return true;
}

static_assert(!family_amp_default("D-FINE") && !family_amp_default("RT-DETRv4") && family_amp_default("yolo9"),
              "family AMP defaults table");

}  // namespace libreyolo::precision
