#pragma once
// Definitions of report_text.hpp (core/api.hpp): included by report_text.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/report_text.hpp>

namespace libreyolo::profile {

namespace detail {
LIBREYOLO_INLINE std::string num(const nlohmann::json& v, int decimals) {
  if (!v.is_number()) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v.get<double>());
  return buf;
}
LIBREYOLO_INLINE std::string num_at(const nlohmann::json& j, const char* key, int decimals) {
  return j.contains(key) ? num(j.at(key), decimals) : "n/a";
}
LIBREYOLO_INLINE std::string num_at(const nlohmann::json& j, const char* key, int decimals, std::string_view unit) {
  const std::string v = num_at(j, key, decimals);
  return v == "n/a" ? v : v + std::string(unit);
}
LIBREYOLO_INLINE std::string pct(const nlohmann::json& v) { return v.is_number() ? num(v.get<double>() * 100.0, 0) + "%" : "n/a"; }
LIBREYOLO_INLINE std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

LIBREYOLO_INLINE NameMatcher::NameMatcher(const std::string& pattern) : pattern_(pattern) {
  if (pattern.empty()) return;
  if (pattern.size() > max_grep_length)
    throw ConfigError("profile kernels: --grep is " + std::to_string(pattern.size()) +
                      " characters long; allowed: at most " + std::to_string(max_grep_length));
#if defined(LIBREYOLO_WITH_RE2)
  re2::RE2::Options opt;
  opt.set_case_sensitive(false);
  opt.set_log_errors(false);
  re_ = std::make_shared<re2::RE2>(pattern, opt);
  if (!re_->ok())
    throw ConfigError("profile kernels: --grep '" + pattern + "' is not a valid regular expression (" + re_->error() +
                      "; RE2 syntax: no backreferences or lookaround)");
#else
  if (pattern.find_first_of("\\^$.[]()*+?{}") != std::string::npos)
    throw ConfigError("profile kernels: --grep '" + pattern + "': this build has no RE2, so --grep takes plain text "
                      "(case-insensitive, '|' between alternatives) without the characters \\^$.[]()*+?{}");
  for (size_t b = 0;;) {
    const size_t e = pattern.find('|', b);
    alternatives_.push_back(lower(pattern.substr(b, e == std::string::npos ? std::string::npos : e - b)));
    if (e == std::string::npos) break;
    b = e + 1;
  }
#endif
}

LIBREYOLO_INLINE bool NameMatcher::operator()(const std::string& name) const {
  if (pattern_.empty()) return true;
#if defined(LIBREYOLO_WITH_RE2)
  return re2::RE2::PartialMatch(name, *re_);
#else
  const std::string l = lower(name);
  for (const auto& a : alternatives_)
    if (l.find(a) != std::string::npos) return true;
  return false;
#endif
}

LIBREYOLO_INLINE std::string NameMatcher::lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// The tables of an analysis document are lists of row objects (kernels_by_phase, ops_by_phase: one such
// list per phase). A table of another shape would print as an empty table, or lose rows silently.
LIBREYOLO_INLINE void check_profile_tables(const nlohmann::json& j, const std::filesystem::path& path) {
  const auto bad = [&](const std::string& table, const std::string& what) {
    throw DataError("profile: '" + path.string() + "': the '" + table + "' table is malformed: " + what +
                    " (a truncated or hand-edited profile.json? write it again with `libreyolo profile run`)");
  };
  const auto rows = [&](const nlohmann::json& t, const std::string& table) {
    if (!t.is_array()) bad(table, "it is a " + std::string(t.type_name()) + ", expected a list of rows");
    for (size_t i = 0; i < t.size(); ++i)
      if (!t[i].is_object()) bad(table, "row " + std::to_string(i + 1) + " is a " + t[i].type_name() + ", expected an object");
  };
  for (const char* table : {"phases", "kernels", "ops", "top_kernels", "categories"})
    if (j.contains(table)) rows(j.at(table), table);
  for (const char* table : {"kernels_by_phase", "ops_by_phase"}) {
    if (!j.contains(table)) continue;
    const auto& t = j.at(table);
    if (!t.is_object()) bad(table, "it is a " + std::string(t.type_name()) + ", expected an object of per-phase lists");
    for (const auto& [phase, list] : t.items()) rows(list, std::string(table) + "." + phase);
  }
}
}  // namespace detail

LIBREYOLO_INLINE nlohmann::json load_profile_file(const std::filesystem::path& path,
                                        std::initializer_list<std::string_view> schemas) {
  if (!std::filesystem::exists(path)) throw DataError("profile: file '" + path.string() + "' does not exist");
  if (std::filesystem::is_directory(path))
    throw DataError("profile: '" + path.string() + "' is a directory; give a profile.json or profile_repeat.json file");
  std::ifstream f(path);
  if (!f) throw DataError("profile: cannot read '" + path.string() + "'");
  nlohmann::json j;
  // A profile.json nests 4 levels; a file nested thousands deep would overflow the stack when printed.
  constexpr int max_depth = 64;
  try {
    j = nlohmann::json::parse(f, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > max_depth)
        throw DataError("profile: '" + path.string() + "' nests deeper than " + std::to_string(max_depth) +
                        " levels; not a libreyolo profile");
      return true;
    });
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError("profile: '" + path.string() + "' is not JSON (" + e.what() + ")");
  }
  const std::string schema = j.is_object() && j.contains("schema") && j["schema"].is_string() ? j["schema"].get<std::string>() : "";
  std::vector<std::string> allowed;
  for (auto s : schemas) {
    if (schema == s) {
      if (schema == analysis_schema) detail::check_profile_tables(j, path);
      return j;
    }
    allowed.emplace_back(s);
  }
  throw DataError("profile: '" + path.string() + "' is not a libreyolo profile: schema is '" +
                  (schema.empty() ? std::string("(none)") : schema) + "', expected " + detail::joined(allowed, " or "));
}

LIBREYOLO_INLINE ConvFamilies conv_ms_by_family(const nlohmann::json& kernels) {
  ConvFamilies c;
  if (!kernels.is_array()) return c;
  for (const auto& k : kernels) {
    if (!k.is_object()) continue;
    const ConvAlgorithm a = conv_algorithm(k.value("raw_name", k.value("kernel", std::string())));
    if (!a.is_conv()) continue;
    const double ms = k.value("ms_per_step", 0.0);
    c.conv_ms += ms;
    auto f = std::find_if(c.families.begin(), c.families.end(), [&](const auto& x) { return x.first == a.family; });
    if (f == c.families.end()) c.families.emplace_back(a.family, ms);
    else f->second += ms;
  }
  std::stable_sort(c.families.begin(), c.families.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return c;
}

LIBREYOLO_INLINE std::string summary_text(const nlohmann::json& p) {
  using detail::num_at;
  std::ostringstream o;
  const auto& c = p.value("config", nlohmann::json::object());
  o << "model: " << p.value("model", std::string("(unnamed)")) << "  (device " << c.value("device", std::string("?"))
    << ", batch " << (c.contains("batch") ? c["batch"].dump() : "?") << ", imgsz "
    << (c.contains("imgsz") ? c["imgsz"].dump() : "?") << ", amp " << (c.contains("amp") ? c["amp"].dump() : "?") << ")\n";
  o << "throughput: " << num_at(p, "img_per_s", 1, " img/s") << ", step " << num_at(p, "step_ms", 2, " ms") << " (dataload "
    << num_at(p, "dataload_ms", 2, " ms") << ", " << detail::pct(p.value("dataload_frac", nlohmann::json())) << ")\n";
  o << "kernels/step: " << num_at(p, "kernels_per_step", 0) << " at mean " << num_at(p, "mean_kernel_us", 1, " us") << " ("
    << num_at(p, "unique_kernels", 0) << " unique)\n";
  o << "GPU util: " << detail::pct(p.value("gpu_util", nlohmann::json())) << " (raw " << num_at(p, "gpu_util_raw", 2)
    << "), busy " << num_at(p, "gpu_busy_ms_per_step", 2, " ms/step") << "\n";
  o << "Tensor Cores: " << num_at(p, "tensorcore_pct", 0, "% of kernel time") << "\n";
  o << "peak VRAM: " << num_at(p, "peak_vram_mb", 0, " MB") << "\n";
  o << "memcpy: " << num_at(p, "memcpy_ms_per_step", 3, " ms/step") << "\n";
  o << "host overhead: " << num_at(p, "host_overhead_ms_per_step", 2, " ms/step") << ", "
    << num_at(p, "launches_per_step", 0, " launches/step") << "\n";
  if (p.contains("step_ms") && p.at("step_ms").is_number() && !(p.at("step_ms").get<double>() > 0))
    o << "!! ZERO STEP TIME: step_ms is " << num_at(p, "step_ms", 3)
      << ": the window measured no time, so throughput, dataload share and utilisation mean nothing (a truncated or "
         "hand-edited profile, or a clock that did not advance)\n";
  if (p.value("memory_pressure", false))
    o << "!! MEMORY PRESSURE: " << num_at(p, "cuda_mallocs_per_step", 1) << " device mallocs/step, raw util "
      << num_at(p, "gpu_util_raw", 2) << "\n";
  o << ">> BOUND: " << p.value("bound", std::string("?")) << ": " << p.value("bound_why", std::string()) << "\n";
  if (p.contains("levers") && !p["levers"].empty())
    o << "   levers: " << detail::joined(p["levers"].get<std::vector<std::string>>(), "; ") << "\n";
  for (const auto& n : p.value("notes", nlohmann::json::array())) o << "   note: " << n.get<std::string>() << "\n";
  if (p.value("trace_collected", false)) {
    o << "kernel mix:";
    for (const auto& cat : p.value("categories", nlohmann::json::array()))
      o << "  " << cat.value("name", std::string()) << " " << detail::num(cat.value("pct", nlohmann::json()), 0) << "%";
    // The convolutions by algorithm family (`profile convs` has the whole table).
    if (const auto c = conv_ms_by_family(p.value("kernels", nlohmann::json::array())); c.conv_ms > 0) {
      o << "\nconvolutions: " << detail::num(c.conv_ms, 2) << " ms/step; by algorithm:";
      for (const auto& [name, ms] : c.families) o << "  " << name << " " << detail::num(100.0 * ms / c.conv_ms, 0) << "%";
      o << " (profile convs)";
    }
    o << "\ntop kernels:\n";
    for (const auto& k : p.value("top_kernels", nlohmann::json::array()))
      o << "  " << detail::num(k.value("pct", nlohmann::json()), 1) << "%  " << detail::num(k.value("ms", nlohmann::json()), 3)
        << " ms  x" << detail::num(k.value("count", nlohmann::json()), 1) << "  " << k.value("name", std::string()) << "\n";
  }
  return o.str();
}

LIBREYOLO_INLINE std::string phases_text(const nlohmann::json& p) {
  std::ostringstream o;
  char line[160];
  std::snprintf(line, sizeof line, "%-10s %10s %10s %10s %10s\n", "phase", "gpu_ms", "wall_ms", "kernels", "ops");
  const auto phases = p.value("phases", nlohmann::json::array());
  if (phases.empty())
    return std::string("no phase table: this profile's 'phases' table is ") + (p.contains("phases") ? "empty" : "missing") +
           " (a truncated or hand-edited profile.json, or a window that measured no step)\n";
  o << line;
  for (const auto& r : phases) {
    std::snprintf(line, sizeof line, "%-10s %10s %10s %10s %10s\n", r.value("phase", std::string()).c_str(),
                  detail::num_at(r, "gpu_ms_per_step", 3).c_str(), detail::num_at(r, "wall_ms_per_step", 3).c_str(),
                  detail::num_at(r, "kernels_per_step", 1).c_str(), detail::num_at(r, "ops_per_step", 1).c_str());
    o << line;
  }
  return o.str();
}

LIBREYOLO_INLINE std::string kernels_text(const nlohmann::json& p, const KernelQuery& q) {
  auto allowed = [](auto list) {
    std::vector<std::string> v(list.begin(), list.end());
    return detail::joined(v, ", ");
  };
  if (q.top < 1) throw ConfigError("profile kernels: --top " + std::to_string(q.top) + " must be >= 1");
  if (q.sort != "time" && q.sort != "count" && q.sort != "name")
    throw ConfigError("profile kernels: unknown --sort '" + q.sort + "'; allowed: time, count, name");
  if (!q.category.empty() && std::find(kernel_categories.begin(), kernel_categories.end(), q.category) == kernel_categories.end())
    throw ConfigError("profile kernels: unknown --category '" + q.category + "'; allowed: " + allowed(kernel_categories));
  nlohmann::json list = p.value("kernels", nlohmann::json::array());
  if (!q.phase.empty()) {
    if (std::find(report_phases.begin(), report_phases.end(), q.phase) == report_phases.end())
      throw ConfigError("profile kernels: unknown --phase '" + q.phase + "'; allowed: " + allowed(report_phases));
    list = p.value("kernels_by_phase", nlohmann::json::object()).value(q.phase, nlohmann::json::array());
  }
  const detail::NameMatcher match(q.grep);
  std::vector<nlohmann::json> rows;
  for (const auto& k : list) {
    if (!k.is_object()) continue;
    if (!q.category.empty() && k.value("category", std::string()) != q.category) continue;
    if (q.tensorcore_only && !k.value("tensorcore", false)) continue;
    if (!match(k.value("raw_name", std::string()))) continue;
    rows.push_back(k);
  }
  auto key = q.sort == "count" ? "count_per_step" : "ms_per_step";
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    if (q.sort == "name") return a.value("kernel", std::string()) < b.value("kernel", std::string());
    return a.value(key, 0.0) > b.value(key, 0.0);
  });
  std::ostringstream o;
  if (list.empty() && p.value("kernels", nlohmann::json::array()).empty()) {  // say why, not print an empty table
    o << "no kernel rows: this profile's 'kernels' table is " << (p.contains("kernels") ? "empty" : "missing") << "; "
      << (p.value("trace_collected", false) ? "a kernel trace was collected, so the file may be truncated or hand-edited"
                                            : "no kernel trace was collected (a CPU run, or the tracer did not attach)")
      << "\n0 kernels match\n";
    return o.str();
  }
  char line[96];
  std::snprintf(line, sizeof line, "%7s %10s %9s  %-14s %2s  %s\n", "pct", "ms/step", "count", "category", "TC", "kernel");
  o << line;
  for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(q.top); ++i) {
    const auto& k = rows[i];
    std::snprintf(line, sizeof line, "%6s%% %10s %9s  %-14s %2s  ", detail::num_at(k, "pct_of_gpu", 1).c_str(),
                  detail::num_at(k, "ms_per_step", 4).c_str(), detail::num_at(k, "count_per_step", 1).c_str(),
                  k.value("category", std::string()).c_str(), k.value("tensorcore", false) ? "TC" : "");
    o << line << k.value("kernel", std::string()) << "\n";
  }
  o << rows.size() << " kernels match" << (rows.size() > static_cast<size_t>(q.top) ? " (top " + std::to_string(q.top) + " shown)" : "") << "\n";
  return o.str();
}

}  // namespace libreyolo::profile
