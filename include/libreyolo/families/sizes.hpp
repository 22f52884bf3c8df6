#pragma once
// The one check of a family's size, from its size lists: a size outside F::sizes is refused, naming every
// model of the family (F::name + size, e.g. "model=rtmdetq: unknown size; available: rtmdett, ..."); a size
// in F::planned_sizes (where a family declares one) is "not implemented yet" instead. And a family's per-size
// rows as one table (size name -> row) with its lookups: find_size (nullptr for a size the table lacks) and
// require_row (the same refusal as require_size, naming the table's sizes).
#include <libreyolo/core/error.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace libreyolo::families {

namespace detail {
// "model=<family><size>: unknown size; available: <family><s>, ..." over the names `names` yields.
template <class Names>
[[noreturn]] void throw_unknown_size(std::string_view family, std::string_view size, const Names& names, bool planned = false) {
  const std::string name(family);
  std::string available;
  for (std::string_view s : names) available += (available.empty() ? "" : ", ") + name + std::string(s);
  throw ConfigError("model=" + name + std::string(size) + (planned ? ": not implemented yet" : ": unknown size") +
                    "; available: " + available);
}
}  // namespace detail

template <class F>
void require_size(const std::string& size) {
  for (std::string_view s : F::sizes)
    if (s == size) return;
  bool planned = false;
  if constexpr (requires { F::planned_sizes; })
    for (std::string_view s : F::planned_sizes) planned = planned || s == size;
  detail::throw_unknown_size(F::name, size, F::sizes, planned);
}

template <class Row, std::size_t N>
using SizeTable = std::array<std::pair<std::string_view, Row>, N>;

template <class Row, std::size_t N>
const Row* find_size(const SizeTable<Row, N>& table, std::string_view size) {
  for (const auto& [name, row] : table)
    if (name == size) return &row;
  return nullptr;
}

// The row of `size`; a size the table lacks is refused as require_size does, naming the table's sizes.
template <class Row, std::size_t N>
const Row& require_row(const SizeTable<Row, N>& table, std::string_view family, std::string_view size) {
  if (const Row* r = find_size(table, size)) return *r;
  std::array<std::string_view, N> names;
  for (std::size_t i = 0; i < N; ++i) names[i] = table[i].first;
  detail::throw_unknown_size(family, size, names);
}

}  // namespace libreyolo::families
