#pragma once
// The one check of a family's size, from its size lists: a size outside F::sizes is refused, naming every
// model of the family (F::name + size, e.g. "model=rtmdetq: unknown size; available: rtmdett, ..."); a size
// in F::planned_sizes (where a family declares one) is "not implemented yet" instead.
#include <libreyolo/core/error.hpp>

#include <string>
#include <string_view>

namespace libreyolo::families {

template <class F>
void require_size(const std::string& size) {
  const std::string name(F::name);
  std::string available;
  for (std::string_view s : F::sizes) {
    if (s == size) return;
    available += (available.empty() ? "" : ", ") + name + std::string(s);
  }
  bool planned = false;
  if constexpr (requires { F::planned_sizes; })
    for (std::string_view s : F::planned_sizes) planned = planned || s == size;
  throw ConfigError("model=" + name + size + (planned ? ": not implemented yet" : ": unknown size") +
                    "; available: " + available);
}

}  // namespace libreyolo::families
