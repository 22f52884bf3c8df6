#pragma once
// The one check of a family's size, from its size lists: a size outside F::sizes is refused, naming every
// model of the family (F::name + size, e.g. "model=rtmdetq: unknown size; available: rtmdett, ..."); a size
// in F::planned_sizes (where a family declares one) is "not implemented yet" instead. And a family's per-size
// rows as one table (size name -> row) with its lookup (nullptr for a size the table lacks).
#include <libreyolo/core/error.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

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

template <class Row, std::size_t N>
using SizeTable = std::array<std::pair<std::string_view, Row>, N>;

template <class Row, std::size_t N>
const Row* find_size(const SizeTable<Row, N>& table, std::string_view size) {
  for (const auto& [name, row] : table)
    if (name == size) return &row;
  return nullptr;
}

}  // namespace libreyolo::families
