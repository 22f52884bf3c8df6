#pragma once
// Initial weights against the original's (scripts/fixtures/make_init_stats.py's statistics of its own network over
// five builds, generator seeded 0..4; medians over the builds). Training from scratch starts from these draws, and no
// fixture sees them: the deterministic fill replaces every entry. check_model<F> builds the family's network as its
// trainer does (restore with the reference's class names, make_network) under seed 0, and every entry of the
// original's must be there and be drawn from the same distribution:
//   - an entry the same in every build of the original (a fixed value, a computed buffer): equal, per element
//     where it is one value throughout or has at most 64 elements, else its sum and sum of squares to 1e-5 (with
//     non-finite values, as the DETR decoders' anchors have outside the valid cells: their counts, and the sums
//     over the finite ones);
//   - a drawn entry: its mean and standard deviation within six standard errors of the original's (the error of
//     both sides' estimates, from the element count and the original's kurtosis); with at least 4096 elements its
//     kurtosis within eight standard errors (uniform 1.8 against normal 3 tells kaiming-uniform from a normal draw);
//     a uniform-like one (kurtosis < 2.2) of at least 256 elements its largest |x| within [0.9, 1.02] of the
//     original's (the bound of the uniform).
// An entry the original lists under a second name (a shared tensor) and ours registers once passes as an alias; a
// documented difference is declared by the caller (Deviation) and must hold.
// Six standard errors: with a few thousand drawn entries the chance of a spurious failure is below 1e-5; the test is
// deterministic (seed 0).
#include "support_fixture.hpp"

#include <libreyolo/families/list.hpp>
#include <libreyolo/nn/detr/decoder_core.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace lry_test::init_stats {

struct Tally {
  int entries = 0, checked_const = 0, checked_drawn = 0, kurt = 0, bound = 0, wrong = 0;
  std::string report;
  void fail(const std::string& name, const std::string& what) {
    if (wrong++ < 40) report += "  " + name + ": " + what + "\n";
  }
};

inline std::string fmt(double a, double b) {
  std::ostringstream s;
  s.precision(6);
  s << "ours " << a << ", the original's " << b;
  return s.str();
}

inline void check_entry(const nlohmann::json& e, const torch::Tensor& ours_t, int seeds, Tally& t) {
  const auto name = e.at("name").get<std::string>();
  const int64_t n = e.at("n").get<int64_t>();
  if (ours_t.numel() != n) return t.fail(name, "element count " + std::to_string(ours_t.numel()) + " vs " + std::to_string(n));
  if (n == 0) return;
  auto x = ours_t.detach().to(torch::kDouble).flatten();
  if (e.contains("posinf")) {  // non-finite values at fixed places (the decoder's anchors): their counts, then the rest.
    // Our stored anchors hold 1e4 where the original's hold +inf (nn/detr/decoder_core.hpp register_eval_anchors:
    // a checkpoint holds no non-finite values; sigmoid(1e4 + x) is 1 as sigmoid(inf) is): counted as +inf.
    const auto invalid = (x == INFINITY) | (x == static_cast<double>(libreyolo::nn::detr::kInvalidAnchor));
    const int64_t pinf = invalid.sum().item<int64_t>(), ninf = (x == -INFINITY).sum().item<int64_t>(),
                  nan = x.isnan().sum().item<int64_t>();
    if (pinf != e.at("posinf").get<int64_t>() || ninf != e.at("neginf").get<int64_t>() || nan != e.at("nan").get<int64_t>())
      return t.fail(name, "+inf/-inf/nan counts " + std::to_string(pinf) + "/" + std::to_string(ninf) + "/" + std::to_string(nan) +
                              ", the original's " + e.at("posinf").dump() + "/" + e.at("neginf").dump() + "/" + e.at("nan").dump());
    x = x.masked_select(x.isfinite() & ~invalid);
  }
  if (e.at("const").get<bool>()) {
    ++t.checked_const;
    if (e.contains("fill")) {
      const double v = e.at("fill").get<double>();
      const double lo = x.min().item<double>(), hi = x.max().item<double>();
      const double tol = 1e-6 + 1e-5 * std::abs(v);
      if (!(std::abs(lo - v) <= tol && std::abs(hi - v) <= tol))
        return t.fail(name, "every element " + std::to_string(v) + " in the original; ours from " + std::to_string(lo) + " to " +
                                std::to_string(hi));
    } else if (e.contains("values")) {
      const auto ref = e.at("values").get<std::vector<double>>();
      for (int64_t i = 0; i < n; ++i) {
        const double a = x[i].item<double>(), b = ref[static_cast<size_t>(i)];
        if (!(std::abs(a - b) <= 1e-6 + 1e-5 * std::abs(b)))
          return t.fail(name, "the same in every build of the original; element " + std::to_string(i) + ": " + fmt(a, b));
      }
    } else {
      const double sum = x.sum().item<double>(), sumsq = (x * x).sum().item<double>();
      const double rsum = e.at("sum").get<double>(), rsumsq = e.at("sumsq").get<double>();
      const double scale = std::sqrt(static_cast<double>(n) * rsumsq);
      if (!(std::abs(sum - rsum) <= 1e-5 * scale + 1e-6)) return t.fail(name, "fixed values, sum: " + fmt(sum, rsum));
      if (!(std::abs(sumsq - rsumsq) <= 1e-5 * rsumsq + 1e-9)) return t.fail(name, "fixed values, sum of squares: " + fmt(sumsq, rsumsq));
    }
    return;
  }
  ++t.checked_drawn;
  const double mean = x.mean().item<double>(), sd = x.std(/*unbiased=*/false).item<double>();
  const double rmean = e.at("mean").get<double>(), rsd = e.at("std").get<double>();
  // The variance of our one estimate and of the original's median of `seeds` builds (a median's ~1.5 times a mean's).
  const double both = 1.0 + 1.5 / seeds;
  const double nn = static_cast<double>(n);
  if (!(std::abs(mean - rmean) <= 6.0 * rsd * std::sqrt(both / nn) + 1e-7)) return t.fail(name, "mean: " + fmt(mean, rmean));
  const double rk = e.contains("kurt") ? e.at("kurt").get<double>() : 3.0;
  // Var(sample std) ~ sigma^2 (kurtosis - 1) / (4 n).
  if (!(std::abs(sd - rsd) <= 6.0 * rsd * std::sqrt(std::max(rk - 1.0, 0.2) * both / (4.0 * nn)) + 1e-7))
    return t.fail(name, "standard deviation: " + fmt(sd, rsd));
  if (n >= 4096 && e.contains("kurt") && sd > 0) {
    ++t.kurt;
    const double k = (((x - mean) / sd).pow(4)).mean().item<double>();
    // Var(sample kurtosis) ~ 24 / n for a normal, less for lighter tails.
    if (!(std::abs(k - rk) <= 8.0 * std::sqrt(24.0 * both / nn))) return t.fail(name, "kurtosis: " + fmt(k, rk));
  }
  if (n >= 256 && e.contains("kurt") && rk < 2.2) {
    ++t.bound;
    const double m = x.abs().max().item<double>(), rm = e.at("absmax").get<double>();
    if (!(m >= 0.9 * rm && m <= 1.02 * rm)) return t.fail(name, "largest |x| of a uniform draw: " + fmt(m, rm));
  }
}

// A documented difference from the original's initial weights: the entries whose names match `names` (a regular
// expression) are drawn otherwise on purpose, for `reason`. Each such entry must differ (a declaration that no longer
// holds fails), and is counted and reported, not compared.
struct Deviation {
  std::string names, reason;
};

template <class F>
void check_model(const nlohmann::json& ref, const std::string& family_name, const std::string& size,
                 const std::vector<Deviation>& deviations = {}) {
  const std::string model = family_name + "-" + size;
  CAPTURE(model);
  REQUIRE(ref.at("models").contains(model));
  const auto& entries = ref.at("models").at(model);
  const int nc = ref.at("num_classes").get<int>(), seeds = ref.at("seeds").get<int>();
  torch::manual_seed(0);
  F family(size);
  family.restore({{"names", std::vector<std::string>(static_cast<size_t>(nc), "c")}});
  auto net = family.make_network();
  const auto ours = lry_test::fixture::named_state(*net);
  Tally t;
  int missing = 0, aliases = 0;
  std::vector<int> deviated(deviations.size(), 0);
  std::vector<std::regex> deviation_names;
  for (const auto& d : deviations) deviation_names.emplace_back(d.names);
  for (const auto& e : entries) {
    ++t.entries;
    const auto name = e.at("name").get<std::string>();
    auto it = ours.find(name);
    if (it == ours.end()) {
      // The original's state dict lists a shared tensor under every name it is reachable by (RTMDet's cross-level
      // head convs); ours may register it once, under the first.
      if (e.contains("alias_of") && ours.count(e.at("alias_of").get<std::string>())) {
        ++aliases;
        continue;
      }
      ++missing;
      t.fail(name, "not in ours");
      continue;
    }
    if (!it->second.is_floating_point()) {
      t.fail(name, "not floating point in ours");
      continue;
    }
    size_t d = 0;
    while (d < deviations.size() && !std::regex_match(name, deviation_names[d])) ++d;
    if (d < deviations.size()) {
      Tally scratch;
      check_entry(e, it->second, seeds, scratch);
      if (scratch.wrong == 0) t.fail(name, "declared to differ (" + deviations[d].reason + ") but drawn as the original's");
      ++deviated[d];
      continue;
    }
    check_entry(e, it->second, seeds, t);
  }
  INFO(t.report);
  CHECK_MESSAGE(t.wrong == 0, t.wrong << " of " << t.entries << " entries drawn otherwise than the original's (" << missing << " missing)");
  CHECK(t.checked_drawn > 0);
  for (size_t d = 0; d < deviations.size(); ++d) {
    CHECK_MESSAGE(deviated[d] > 0, "the declared difference " << deviations[d].names << " matches no entry");
    MESSAGE(model << ": " << deviated[d] << " entries drawn otherwise on purpose: " << deviations[d].reason);
  }
  MESSAGE(model << ": " << t.entries << " entries: " << t.checked_const << " fixed, " << t.checked_drawn << " drawn (" << t.kurt
                << " with kurtosis, " << t.bound << " with a uniform bound), " << aliases << " aliases of another, " << t.wrong
                << " otherwise");
}

// A reference file of make_init_stats.py, relative to the source tree.
inline nlohmann::json reference(const std::string& rel) {
  std::ifstream js(std::string(LIBREYOLO_SOURCE_DIR) + "/" + rel);
  REQUIRE(js.good());
  return nlohmann::json::parse(js);
}

}  // namespace lry_test::init_stats

