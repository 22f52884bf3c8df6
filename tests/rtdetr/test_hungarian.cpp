// assign/hungarian.hpp: the linear sum assignment against brute force (every injective row -> column
// map) on random small matrices, square and rectangular both ways, with ties and negative costs.
#include <libreyolo/assign/hungarian.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace la = libreyolo::assign;

namespace {

// The minimum total cost over all matchings of min(rows, cols) pairs.
double brute_force(const std::vector<double>& c, int64_t rows, int64_t cols) {
  const bool t = rows > cols;
  const int64_t n = t ? cols : rows, m = t ? rows : cols;
  std::vector<int64_t> perm(static_cast<size_t>(m));
  std::iota(perm.begin(), perm.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  do {  // the first n entries of each permutation of the m columns (repeats are harmless)
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = perm[static_cast<size_t>(i)];
      s += t ? c[static_cast<size_t>(j * cols + i)] : c[static_cast<size_t>(i * cols + j)];
    }
    best = std::min(best, s);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

}  // namespace

TEST_CASE("linear_sum_assignment equals brute force on random matrices up to 7 x 7") {
  std::mt19937_64 rng(20);
  std::uniform_int_distribution<int64_t> dim(1, 7);
  std::uniform_real_distribution<double> real(-3.0, 5.0);
  std::uniform_int_distribution<int> small(0, 3);  // many ties
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t r = dim(rng), c = dim(rng);
    std::vector<double> cost(static_cast<size_t>(r * c));
    const bool ties = trial % 3 == 0;
    for (auto& v : cost) v = ties ? static_cast<double>(small(rng)) : real(rng);
    CAPTURE(r);
    CAPTURE(c);
    const auto a = la::linear_sum_assignment(cost, r, c);
    REQUIRE(static_cast<int64_t>(a.rows.size()) == std::min(r, c));
    REQUIRE(a.rows.size() == a.cols.size());
    // A matching: rows ascending and distinct, columns distinct, all in range.
    std::set<int64_t> cols(a.cols.begin(), a.cols.end());
    CHECK(cols.size() == a.cols.size());
    CHECK(std::is_sorted(a.rows.begin(), a.rows.end()));
    CHECK(std::adjacent_find(a.rows.begin(), a.rows.end()) == a.rows.end());
    double s = 0;
    for (size_t k = 0; k < a.rows.size(); ++k) {
      REQUIRE(a.rows[k] >= 0);
      REQUIRE(a.rows[k] < r);
      REQUIRE(a.cols[k] >= 0);
      REQUIRE(a.cols[k] < c);
      s += cost[static_cast<size_t>(a.rows[k] * c + a.cols[k])];
    }
    CHECK(s == doctest::Approx(a.cost).epsilon(1e-12));
    CHECK(a.cost == doctest::Approx(brute_force(cost, r, c)).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked == 400);
}

TEST_CASE("linear_sum_assignment: a known 3 x 4 case, empty matrices, NaN is an error") {
  // Rows 0..2 over 4 columns: the best is 0->1 (1), 1->0 (2), 2->3 (1) = 4.
  const std::vector<double> c{4, 1, 3, 9,  //
                              2, 0.5, 5, 9,  //
                              3, 2, 2, 1};
  // 0->1 (1) + 1->0 (2) + 2->3 (1) = 4 versus 0->0 + 1->1 + 2->3 = 4 + 0.5 + 1 = 5.5.
  auto a = la::linear_sum_assignment(c, 3, 4);
  CHECK(a.cost == doctest::Approx(4.0));
  CHECK(a.rows == std::vector<int64_t>{0, 1, 2});
  CHECK(a.cols == std::vector<int64_t>{1, 0, 3});
  // Transposed (4 x 3): the same pairs, rows now the former columns, sorted.
  std::vector<double> ct(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) ct[static_cast<size_t>(j * 3 + i)] = c[static_cast<size_t>(i * 4 + j)];
  auto b = la::linear_sum_assignment(ct, 4, 3);
  CHECK(b.cost == doctest::Approx(4.0));
  CHECK(b.rows == std::vector<int64_t>{0, 1, 3});
  CHECK(b.cols == std::vector<int64_t>{1, 0, 2});
  CHECK(la::linear_sum_assignment(std::vector<double>{}, 0, 5).rows.empty());
  CHECK(la::linear_sum_assignment(std::vector<double>{}, 3, 0).rows.empty());
  std::vector<double> bad{1, std::nan(""), 2, 3};
  CHECK_THROWS_WITH_AS(la::linear_sum_assignment(bad, 2, 2), doctest::Contains("NaN at (0, 1)"), libreyolo::Error);
  CHECK_THROWS_AS(la::linear_sum_assignment(bad, 3, 2), libreyolo::Error);  // 4 costs for 3 x 2
}
