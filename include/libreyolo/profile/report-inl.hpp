#pragma once
// Definitions of report.hpp (core/api.hpp): included by report.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/report.hpp>

namespace libreyolo::profile {

LIBREYOLO_INLINE nlohmann::json aggregate_repeat(const std::vector<nlohmann::json>& trials) {
  using nlohmann::json;
  if (trials.empty()) throw DataError("profile repeat: no trial produced a profile.json");
  for (size_t i = 0; i < trials.size(); ++i)
    if (!trials[i].is_object() || trials[i].value("schema", std::string()) != analysis_schema)
      throw DataError("profile repeat: trial " + std::to_string(i + 1) + " is not a " + std::string(analysis_schema) +
                      " document");
  json bounds = json::array();
  for (const auto& t : trials) bounds.push_back(t.value("bound", std::string("?")));
  const bool agree = std::all_of(bounds.begin(), bounds.end(), [&](const json& b) { return b == bounds[0]; });
  json metrics = json::object();
  for (const char* key : repeat_metrics) {
    json values = json::array();
    std::vector<double> xs;
    for (const auto& t : trials) {
      const json v = t.contains(key) ? t.at(key) : json(nullptr);
      values.push_back(v);
      if (v.is_number()) xs.push_back(v.get<double>());
    }
    json m = {{"values", values}, {"n", xs.size()}, {"mean", nullptr}, {"std", nullptr}};
    if (!xs.empty()) {
      double mean = 0, var = 0;
      for (double x : xs) mean += x;
      mean /= static_cast<double>(xs.size());
      for (double x : xs) var += (x - mean) * (x - mean);
      m["mean"] = mean;
      m["std"] = std::sqrt(var / static_cast<double>(xs.size()));
    }
    metrics[key] = m;
  }
  return {{"schema", repeat_schema}, {"trials", trials.size()}, {"model", trials[0].value("model", std::string())},
          {"bound", agree ? bounds[0] : json(bound::mixed)}, {"bounds", bounds}, {"metrics", metrics}};
}

namespace detail {

LIBREYOLO_INLINE MetricSample metric_sample(const nlohmann::json& doc, const char* key) {
  MetricSample s;
  if (doc.value("schema", std::string()) == repeat_schema) {
    if (!doc.contains("metrics") || !doc.at("metrics").is_object())
      throw DataError("'metrics' is missing or not an object");
    const auto& metrics = doc.at("metrics");
    if (!metrics.contains(key)) return s;
    const auto& m = metrics.at(key);
    if (!m.is_object()) throw DataError("metric '" + std::string(key) + "' is not an object");
    const auto mean = m.contains("mean") ? m.at("mean") : nlohmann::json();
    if (!mean.is_number()) return s;  // null: no trial had a value
    const auto sd = m.contains("std") ? m.at("std") : nlohmann::json();
    const auto n = m.contains("n") ? m.at("n") : nlohmann::json();
    if (!sd.is_number() || !std::isfinite(sd.get<double>()) || sd.get<double>() < 0)
      throw DataError("metric '" + std::string(key) + "' has a mean but its 'std' is " +
                      (sd.is_null() ? std::string("missing") : "'" + sd.dump() + "'") + "; allowed: a number >= 0");
    if (!n.is_number_integer() || n.get<int64_t>() < 1)
      throw DataError("metric '" + std::string(key) + "' has a mean but its 'n' is " +
                      (n.is_null() ? std::string("missing") : "'" + n.dump() + "'") + "; allowed: an integer >= 1");
    s = {mean.get<double>(), sd.get<double>(), static_cast<size_t>(n.get<int64_t>())};
  } else if (doc.contains(key) && doc.at(key).is_number()) {
    s = {doc.at(key).get<double>(), 0.0, 1};
  }
  return s;
}

LIBREYOLO_INLINE void check_metrics(const nlohmann::json& doc, const std::filesystem::path& file) {
  for (const char* key : repeat_metrics) {
    try {
      metric_sample(doc, key);
    } catch (const DataError& e) {
      throw DataError("profile: '" + file.string() + "': " + e.what());
    }
  }
}

}  // namespace detail

LIBREYOLO_INLINE std::string compare_text(const nlohmann::json& a, const nlohmann::json& b) {
  std::ostringstream o;
  char line[200];
  std::snprintf(line, sizeof line, "%-26s %12s %12s %12s %8s  %s\n", "metric", "a", "b", "delta", "delta%", "significance");
  o << "bound: " << a.value("bound", std::string("?")) << " -> " << b.value("bound", std::string("?")) << "\n" << line;
  for (const char* key : repeat_metrics) {
    const auto sa = detail::metric_sample(a, key), sb = detail::metric_sample(b, key);
    if (sa.n == 0 || sb.n == 0) {
      std::snprintf(line, sizeof line, "%-26s %12s %12s %12s %8s  %s\n", key, sa.n ? detail::num(sa.mean, 3).c_str() : "n/a",
                    sb.n ? detail::num(sb.mean, 3).c_str() : "n/a", "n/a", "", "n/a (missing on one side)");
      o << line;
      continue;
    }
    const double delta = sb.mean - sa.mean;
    std::string sig = "n/a (needs n >= 2 on both sides: use --repeat)";
    if (sa.n >= 2 && sb.n >= 2) {
      const double limit = 2.0 * std::sqrt(sa.sd * sa.sd / static_cast<double>(sa.n) + sb.sd * sb.sd / static_cast<double>(sb.n));
      sig = std::abs(delta) > limit ? "significant" : "not significant";
      sig += " (2se " + detail::num(limit, 3) + ")";
    }
    std::snprintf(line, sizeof line, "%-26s %12s %12s %+12.3f %7s%%  %s\n", key, detail::num(sa.mean, 3).c_str(),
                  detail::num(sb.mean, 3).c_str(), delta,
                  sa.mean != 0 ? detail::num(100.0 * delta / std::abs(sa.mean), 1).c_str() : "n/a", sig.c_str());
    o << line;
  }
  return o.str();
}

LIBREYOLO_INLINE int run_summary(const std::filesystem::path& profile, std::ostream& out, std::ostream& err) {
  return detail::guarded(err, {profile}, [&] { out << summary_text(load_profile_file(profile)); });
}

LIBREYOLO_INLINE int run_phases(const std::filesystem::path& profile, std::ostream& out, std::ostream& err) {
  return detail::guarded(err, {profile}, [&] { out << phases_text(load_profile_file(profile)); });
}

LIBREYOLO_INLINE int run_kernels(const std::filesystem::path& profile, const KernelQuery& query, std::ostream& out, std::ostream& err) {
  return detail::guarded(err, {profile}, [&] { out << kernels_text(load_profile_file(profile), query); });
}

LIBREYOLO_INLINE int run_compare(const std::filesystem::path& a, const std::filesystem::path& b, std::ostream& out, std::ostream& err) {
  return detail::guarded(err, {a, b}, [&] {
    const auto ja = load_profile_file(a, {analysis_schema, repeat_schema});
    const auto jb = load_profile_file(b, {analysis_schema, repeat_schema});
    detail::check_metrics(ja, a);
    detail::check_metrics(jb, b);
    out << compare_text(ja, jb);
  });
}

LIBREYOLO_INLINE int run_aggregate_repeat(const std::vector<std::filesystem::path>& trials, const std::filesystem::path& out_file,
                                std::ostream& out, std::ostream& err) {
  return detail::guarded(err, trials, [&] {
    std::vector<nlohmann::json> docs;
    for (const auto& t : trials) docs.push_back(load_profile_file(t));
    const auto agg = aggregate_repeat(docs);
    if (auto why = atomic_file::write(out_file, "profile repeat result", agg.dump(1) + "\n"); !why.empty())
      throw SetupError("profile repeat: cannot write '" + out_file.string() + "': " + why);
    const auto& ips = agg["metrics"]["img_per_s"];
    out << "repeat: " << trials.size() << " trials, img/s " << detail::num(ips["mean"], 1) << " +- "
        << detail::num(ips["std"], 1) << ", bound " << agg["bound"].get<std::string>() << " -> " << out_file.string() << "\n";
  });
}

}  // namespace libreyolo::profile
