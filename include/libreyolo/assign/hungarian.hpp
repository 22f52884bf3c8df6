#pragma once
// Linear sum assignment (scipy.optimize.linear_sum_assignment's contract) for a rows x cols cost matrix:
// the minimum-cost matching of min(rows, cols) pairs, each row and column used at most once. The
// solver is the shortest-augmenting-path (Jonker-Volgenant style) Hungarian method with row and column
// potentials, O(n^2 m) for n = min(rows, cols) <= m = max(rows, cols), in double precision. Used by
// the DETR families' Hungarian matcher (nn/detr/criterion.hpp).
//
// Costs must be finite; NaN is an error and +-inf entries are clamped to +-1e300 (scipy raises on
// infeasible matrices; a DETR cost is always finite unless a box is NaN).
#include <libreyolo/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::assign {

struct Assignment {
  std::vector<int64_t> rows, cols;  // pair k: row rows[k] -> column cols[k]; rows ascending (as scipy's)
  double cost = 0;
};

// cost: row-major rows x cols.
inline Assignment linear_sum_assignment(const double* cost, int64_t rows, int64_t cols) {
  Assignment out;
  if (rows < 0 || cols < 0) throw Error("linear_sum_assignment: negative matrix size");
  if (rows == 0 || cols == 0) return out;
  const bool transpose = rows > cols;  // solve with n <= m: rows of the work matrix are the smaller side
  const int64_t n = transpose ? cols : rows, m = transpose ? rows : cols;
  auto at = [&](int64_t i, int64_t j) {  // work-matrix entry (i < n, j < m)
    double v = transpose ? cost[j * cols + i] : cost[i * cols + j];
    if (std::isnan(v))
      throw Error("linear_sum_assignment: the cost matrix holds NaN at (" + std::to_string(transpose ? j : i) + ", " +
                  std::to_string(transpose ? i : j) + ")");
    return std::clamp(v, -1e300, 1e300);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // 1-based potentials and matching (index 0 = the virtual start column).
  std::vector<double> u(static_cast<size_t>(n + 1), 0.0), v(static_cast<size_t>(m + 1), 0.0);
  std::vector<int64_t> p(static_cast<size_t>(m + 1), 0), way(static_cast<size_t>(m + 1), 0);
  std::vector<double> minv(static_cast<size_t>(m + 1));
  std::vector<char> used(static_cast<size_t>(m + 1));
  for (int64_t i = 1; i <= n; ++i) {
    p[0] = i;
    int64_t j0 = 0;
    std::fill(minv.begin(), minv.end(), inf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[static_cast<size_t>(j0)] = 1;
      const int64_t i0 = p[static_cast<size_t>(j0)];
      double delta = inf;
      int64_t j1 = -1;
      for (int64_t j = 1; j <= m; ++j) {
        if (used[static_cast<size_t>(j)]) continue;
        const double cur = at(i0 - 1, j - 1) - u[static_cast<size_t>(i0)] - v[static_cast<size_t>(j)];
        if (cur < minv[static_cast<size_t>(j)]) {
          minv[static_cast<size_t>(j)] = cur;
          way[static_cast<size_t>(j)] = j0;
        }
        if (minv[static_cast<size_t>(j)] < delta || j1 < 0) {
          delta = minv[static_cast<size_t>(j)];
          j1 = j;
        }
      }
      for (int64_t j = 0; j <= m; ++j) {
        if (used[static_cast<size_t>(j)]) {
          u[static_cast<size_t>(p[static_cast<size_t>(j)])] += delta;
          v[static_cast<size_t>(j)] -= delta;
        } else {
          minv[static_cast<size_t>(j)] -= delta;
        }
      }
      j0 = j1;
    } while (p[static_cast<size_t>(j0)] != 0);
    do {  // augment along the path
      const int64_t j1 = way[static_cast<size_t>(j0)];
      p[static_cast<size_t>(j0)] = p[static_cast<size_t>(j1)];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<std::pair<int64_t, int64_t>> pairs;  // (row, col) of the original matrix
  for (int64_t j = 1; j <= m; ++j) {
    const int64_t i = p[static_cast<size_t>(j)];
    if (i == 0) continue;
    pairs.emplace_back(transpose ? j - 1 : i - 1, transpose ? i - 1 : j - 1);
  }
  std::sort(pairs.begin(), pairs.end());
  for (auto& [r, c] : pairs) {
    out.rows.push_back(r);
    out.cols.push_back(c);
    out.cost += cost[r * cols + c];
  }
  return out;
}

inline Assignment linear_sum_assignment(const std::vector<double>& cost, int64_t rows, int64_t cols) {
  if (static_cast<int64_t>(cost.size()) != rows * cols)
    throw Error("linear_sum_assignment: " + std::to_string(cost.size()) + " costs for a " + std::to_string(rows) + " x " +
                std::to_string(cols) + " matrix");
  return linear_sum_assignment(cost.data(), rows, cols);
}

}  // namespace libreyolo::assign
