#pragma once
// Definitions of lenses.hpp (core/api.hpp): included by lenses.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/lenses.hpp>

#include <functional>
#include <utility>

namespace libreyolo::profile {

LIBREYOLO_INLINE nlohmann::json summary_doc(const nlohmann::json& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const char* k : {"schema", "model", "config", "bound", "bound_why", "levers", "notes", "trace_collected", "img_per_s",
                        "step_ms", "dataload_ms", "dataload_frac", "compute_ms", "gpu_util", "gpu_util_raw",
                        "gpu_busy_ms_per_step", "kernels_per_step", "mean_kernel_us", "unique_kernels", "tensorcore_pct",
                        "peak_vram_mb", "memcpy_ms_per_step", "host_overhead_ms_per_step", "launches_per_step",
                        "memory_pressure", "categories", "top_kernels"})
    if (p.contains(k)) j[k] = p.at(k);
  return j;
}

LIBREYOLO_INLINE nlohmann::json phases_doc(const nlohmann::json& p) {
  return {{"model", p.value("model", std::string())}, {"phases", p.value("phases", nlohmann::json::array())}};
}

LIBREYOLO_INLINE nlohmann::json kernels_doc(const nlohmann::json& p, const KernelQuery& q) {
  (void)kernels_text(p, q);  // the same checks (ConfigError on a bad query)
  nlohmann::json list = q.phase.empty() ? p.value("kernels", nlohmann::json::array())
                                        : p.value("kernels_by_phase", nlohmann::json::object()).value(q.phase, nlohmann::json::array());
  const detail::NameMatcher match(q.grep);
  std::vector<nlohmann::json> rows;
  for (const auto& k : list) {
    if (!k.is_object()) continue;
    if (!q.category.empty() && k.value("category", std::string()) != q.category) continue;
    if (q.tensorcore_only && !k.value("tensorcore", false)) continue;
    if (!match(k.value("raw_name", std::string()))) continue;
    rows.push_back(k);
  }
  const char* key = q.sort == "count" ? "count_per_step" : "ms_per_step";
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    if (q.sort == "name") return a.value("kernel", std::string()) < b.value("kernel", std::string());
    return a.value(key, 0.0) > b.value(key, 0.0);
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(q.top); ++i) out.push_back(rows[i]);
  return {{"model", p.value("model", std::string())}, {"matched", rows.size()}, {"kernels", out},
          {"trace_collected", p.value("trace_collected", false)}};
}

LIBREYOLO_INLINE nlohmann::json compare_doc(const nlohmann::json& a, const nlohmann::json& b) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const char* key : repeat_metrics) {
    const auto sa = detail::metric_sample(a, key), sb = detail::metric_sample(b, key);
    nlohmann::json m = {{"a", sa.n ? nlohmann::json(sa.mean) : nlohmann::json()},
                        {"b", sb.n ? nlohmann::json(sb.mean) : nlohmann::json()},
                        {"delta", nullptr}, {"delta_pct", nullptr}, {"significant", nullptr}};
    if (sa.n && sb.n) {
      const double delta = sb.mean - sa.mean;
      m["delta"] = delta;
      if (sa.mean != 0) m["delta_pct"] = 100.0 * delta / std::abs(sa.mean);
      if (sa.n >= 2 && sb.n >= 2)
        m["significant"] = std::abs(delta) > 2.0 * std::sqrt(sa.sd * sa.sd / double(sa.n) + sb.sd * sb.sd / double(sb.n));
    }
    metrics[key] = m;
  }
  return {{"bound_a", a.value("bound", std::string("?"))}, {"bound_b", b.value("bound", std::string("?"))}, {"metrics", metrics}};
}

LIBREYOLO_INLINE nlohmann::json ops_doc(const nlohmann::json& p, int top, const std::string& phase) {
  if (top < 1) throw ConfigError("profile ops: --top " + std::to_string(top) + " must be >= 1");
  nlohmann::json list = p.value("ops", nlohmann::json::array());
  if (!phase.empty()) {
    if (std::find(report_phases.begin(), report_phases.end(), phase) == report_phases.end()) {
      std::vector<std::string> v(report_phases.begin(), report_phases.end());
      throw ConfigError("profile ops: unknown --phase '" + phase + "'; allowed: " + detail::joined(v, ", "));
    }
    list = p.value("ops_by_phase", nlohmann::json::object()).value(phase, nlohmann::json::array());
  }
  std::vector<nlohmann::json> rows;
  for (const auto& o : list)
    if (o.is_object()) rows.push_back(o);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.value("ms_per_step", 0.0) > b.value("ms_per_step", 0.0); });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(top); ++i) out.push_back(rows[i]);
  return {{"model", p.value("model", std::string())}, {"phase", phase.empty() ? nlohmann::json() : nlohmann::json(phase)},
          {"total", rows.size()}, {"ops", out}};
}

LIBREYOLO_INLINE std::string ops_text(const nlohmann::json& doc) {
  std::ostringstream o;
  char line[96];
  std::snprintf(line, sizeof line, "%7s %10s %9s  %s\n", "pct", "ms/step", "count", "operator");
  o << line;
  for (const auto& r : doc["ops"]) {
    std::snprintf(line, sizeof line, "%6s%% %10s %9s  ", detail::num_at(r, "pct_of_cpu_ops", 1).c_str(),
                  detail::num_at(r, "ms_per_step", 4).c_str(), detail::num_at(r, "count_per_step", 1).c_str());
    o << line << r.value("op", std::string()) << "\n";
  }
  const auto total = doc["total"].get<size_t>();
  if (total == 0)
    o << "no operators recorded (the operator table comes from the kernel tracer, which CUDA builds have; a CPU build "
         "keeps host phase timings only)\n";
  else
    o << total << " operators" << (total > doc["ops"].size() ? " (top " + std::to_string(doc["ops"].size()) + " shown)" : "") << "\n";
  return o.str();
}

namespace detail {
// Whether a kernel is one of cuDNN's NCHW <-> NHWC layout conversions.
LIBREYOLO_INLINE bool is_layout_conversion(const std::string& raw) {
  const std::string n = lowercase(raw);
  return contains_any(n, {"nchwtonhwc", "nhwctonchw"});
}
}  // namespace detail

LIBREYOLO_INLINE nlohmann::json convs_doc(const nlohmann::json& p) {
  using nlohmann::json;
  if (!p.value("trace_collected", false) || !p.contains("kernels") || !p.at("kernels").is_array())
    throw DataError("profile convs: needs a kernel trace (a CUDA run); this profile has host timings only");
  const double busy = p.contains("gpu_busy_ms_per_step") && p.at("gpu_busy_ms_per_step").is_number()
                          ? p.at("gpu_busy_ms_per_step").get<double>()
                          : 0.0;
  struct Row {
    std::string pass, family, math;
    double ms = 0, kernels = 0, split_k_ms = 0;
  };
  std::vector<Row> rows;
  const ConvFamilies fam = conv_ms_by_family(p.at("kernels"));
  const double conv_ms = fam.conv_ms;
  double conv_kernels = 0, split_ms = 0, layout_ms = 0, layout_kernels = 0;
  for (const auto& k : p.at("kernels")) {
    if (!k.is_object()) continue;
    const std::string raw = k.value("raw_name", k.value("kernel", std::string()));
    const double ms = k.value("ms_per_step", 0.0), count = k.value("count_per_step", 0.0);
    if (detail::is_layout_conversion(raw)) layout_ms += ms, layout_kernels += count;
    const ConvAlgorithm a = conv_algorithm(raw);
    if (!a.is_conv()) continue;
    conv_kernels += count;
    if (a.split_k) split_ms += ms;
    auto r = std::find_if(rows.begin(), rows.end(), [&](const Row& x) { return x.pass == a.pass && x.family == a.family && x.math == a.math; });
    if (r == rows.end()) r = rows.insert(rows.end(), Row{a.pass, a.family, a.math});
    r->ms += ms, r->kernels += count;
    if (a.split_k) r->split_k_ms += ms;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  const auto pct = [](double part, double whole) { return whole > 0 ? json(100.0 * part / whole) : json(); };
  json jr = json::array(), jf = json::array();
  for (const auto& r : rows)
    jr.push_back({{"pass", r.pass}, {"family", r.family}, {"math", r.math.empty() ? json() : json(r.math)}, {"ms", r.ms},
                  {"pct_of_conv", pct(r.ms, conv_ms)}, {"kernels_per_step", r.kernels}, {"split_k_ms", r.split_k_ms}});
  for (const auto& [name, ms] : fam.families) jf.push_back({{"family", name}, {"ms", ms}, {"pct_of_conv", pct(ms, conv_ms)}});
  const auto& cfg = p.value("config", json::object());
  return {{"model", p.value("model", std::string())},
          {"conv_ms", conv_ms},
          {"conv_pct_of_busy", pct(conv_ms, busy)},
          {"conv_kernels_per_step", conv_kernels},
          {"split_k_ms", split_ms},
          {"dominant", fam.families.empty() ? json() : json(fam.families.front().first)},
          {"families", jf},
          {"rows", jr},
          {"layout_conversion_ms", layout_ms},
          {"layout_conversion_kernels_per_step", layout_kernels},
          {"channels_last", cfg.contains("channels_last") ? cfg.at("channels_last") : json()},
          {"cudnn_benchmark", cfg.contains("cudnn_benchmark") ? cfg.at("cudnn_benchmark") : json()},
          {"cudnn_heuristic", cfg.contains("cudnn_heuristic") ? cfg.at("cudnn_heuristic") : json()}};
}

LIBREYOLO_INLINE std::string convs_text(const nlohmann::json& d) {
  std::ostringstream o;
  o << "convolutions of " << d.value("model", std::string("?")) << ": " << detail::num(d["conv_ms"], 2) << " ms/step ("
    << detail::num(d["conv_pct_of_busy"], 0) << "% of GPU busy), " << detail::num(d["conv_kernels_per_step"], 0)
    << " kernels/step; split-K " << detail::num(d["split_k_ms"], 2) << " ms\n";
  if (d["dominant"].is_null()) {
    o << "no convolution kernels in this window\n";
  } else {
    o << "dominant algorithm: " << d["dominant"].get<std::string>() << "\n";
    char line[220];
    std::snprintf(line, sizeof line, "  %-6s %-38s %-30s %9s %7s %9s %9s\n", "pass", "algorithm", "arithmetic", "ms/step", "% conv",
                  "kernels", "split-K");
    o << line;
    for (const auto& r : d["rows"]) {
      std::snprintf(line, sizeof line, "  %-6s %-38s %-30s %9s %7s %9s %9s\n", r.value("pass", std::string()).c_str(),
                    r.value("family", std::string()).c_str(), r["math"].is_null() ? "?" : r["math"].get<std::string>().c_str(),
                    detail::num(r["ms"], 3).c_str(), detail::num(r["pct_of_conv"], 1).c_str(),
                    detail::num(r["kernels_per_step"], 1).c_str(), detail::num(r["split_k_ms"], 3).c_str());
      o << line;
    }
  }
  o << "layout conversions (NCHW <-> NHWC): " << detail::num(d["layout_conversion_ms"], 2) << " ms/step, "
    << detail::num(d["layout_conversion_kernels_per_step"], 0) << " kernels/step\n";
  return o.str();
}

LIBREYOLO_INLINE nlohmann::json what_if_doc(const nlohmann::json& p) {
  using nlohmann::json;
  const auto num = [&](const char* k) { return p.contains(k) && p.at(k).is_number() ? p.at(k).get<double>() : -1.0; };
  const auto& cfg = p.value("config", json::object());
  const double step = num("step_ms"), load = std::max(0.0, num("dataload_ms")), busy = num("gpu_busy_ms_per_step");
  const bool traced = p.value("trace_collected", false) && busy >= 0;
  const bool amp = cfg.value("amp", json(false)).is_boolean() && cfg.value("amp", json(false)).get<bool>();
  // CUDA graphs in the run: `cuda_graph` true (graphs active) or "step" (as the config key writes it), or
  // the trainer's `cuda_graph_step` (the whole step is recorded).
  const json cg = cfg.value("cuda_graph", json(false));
  const bool step_graphs = (cg.is_string() && detail::lowercase(cg.get<std::string>()) == "step") ||
                           cfg.value("cuda_graph_step", json(false)) == json(true);
  const bool graphs = step_graphs || (cg.is_boolean() && cg.get<bool>());
  const int workers = cfg.value("workers", json(0)).is_number_integer() ? cfg.value("workers", json(0)).get<int>() : 0;
  if (step <= 0) throw DataError("profile what-if: the profile has no step_ms; nothing to estimate from");
  json levers = json::array();
  auto add = [&](const std::string& lever, const std::string& setting, bool applies, double est, const std::string& why) {
    json l = {{"lever", lever}, {"setting", setting}, {"applies", applies}, {"why", why},
              {"step_ms", step}, {"estimated_step_ms", nullptr}, {"estimated_speedup", nullptr}};
    if (applies && est > 0) l["estimated_step_ms"] = est, l["estimated_speedup"] = step / est;
    levers.push_back(l);
  };
  // CUDA graphs
  if (step_graphs) add("cuda_graph", "cuda_graph=step", false, -1, "already on in this run (cuda_graph=step: the whole training step)");
  else if (graphs) add("cuda_graph", "cuda_graph=true", false, -1, "already on in this run");
  else if (!traced) add("cuda_graph", "cuda_graph=true", false, -1, "needs a kernel trace (a CUDA run) to know the GPU busy time");
  else add("cuda_graph", "cuda_graph=true", true, std::min(step, std::max(busy, load)),
           "the step approaches max(GPU busy " + detail::num(busy, 2) + " ms, dataload " + detail::num(load, 2) + " ms)");
  // AMP
  double gemm_pct = -1;
  for (const auto& c : p.value("categories", json::array()))
    if (c.value("name", std::string()) == "gemm/conv" && c.contains("pct") && c.at("pct").is_number()) gemm_pct = c.at("pct").get<double>();
  if (amp) add("amp", "amp=true", false, -1, "already on in this run");
  else if (!traced || gemm_pct < 0) add("amp", "amp=true", false, -1, "needs a kernel trace (a CUDA run) for the gemm/conv share");
  else {
    const double saved = busy * gemm_pct / 100.0 * 0.5;
    add("amp", "amp=true", true, std::max(step - saved, std::max(load, 1e-3)),
        "gemm/conv are " + detail::num(gemm_pct, 0) + "% of GPU time; on Tensor Cores about 2x faster");
  }
  // data loader workers
  const double frac = step > 0 ? load / step : 0;
  if (frac < 0.1) add("workers", "workers=" + std::to_string(std::max(1, workers * 2)), false, -1,
                      "not dataloader-bound (dataload " + detail::num(100 * frac, 0) + "% of the step)");
  else if (workers == 0) add("workers", "workers=4", true, std::max(step - load, 1e-3),
                             "workers=0 loads on the training thread; with workers the step approaches its compute time");
  else add("workers", "workers=" + std::to_string(workers * 2), true, step - load / 2,
           "dataload is " + detail::num(100 * frac, 0) + "% of the step; twice the workers halve it");
  // channels-last and the convolution algorithm choice, from the kernels' names
  if (!traced || !p.contains("kernels")) {
    add("channels_last", "channels_last=true", false, -1, "needs a kernel trace (a CUDA run) to see the layout conversions");
    add("cudnn", "cudnn_heuristic=b", false, -1, "needs a kernel trace (a CUDA run) to see the convolution kernels");
  } else {
    const json c = convs_doc(p);
    const double kernels = std::max(1.0, p.value("kernels_per_step", 1.0));
    const double gap = std::max(0.0, p.value("host_overhead_ms_per_step", 0.0));
    const double kernel_sum = p.value("gpu_kernel_sum_ms_per_step", 0.0);
    // Kernels taken away: their share of the busy time (the union shrinks in proportion) and of the launch
    // gaps (one launch each), as `what-if --remove-category` computes it.
    const auto without = [&](double ms, double count) {
      const double b = kernel_sum > 0 ? busy * ms / kernel_sum : ms;
      return std::max(step - b - (graphs ? 0.0 : gap * count / kernels), std::max(load, busy - b));
    };
    const double lay_ms = c["layout_conversion_ms"].get<double>(), lay_n = c["layout_conversion_kernels_per_step"].get<double>();
    if (lay_ms <= 0)
      add("channels_last", "channels_last=true", false, -1,
          cfg.value("channels_last", json(false)) == json(true) ? "already on in this run (no NCHW <-> NHWC conversions)"
                                                                : "no NCHW <-> NHWC conversions in this run");
    else
      add("channels_last", "channels_last=true", true, without(lay_ms, lay_n),
          "cuDNN converted NCHW <-> NHWC around the convolutions: " + detail::num(lay_ms, 2) + " ms/step in " +
              detail::num(lay_n, 0) + " kernels, which channels-last tensors avoid");
    const double conv_ms = c["conv_ms"].get<double>();
    const bool tuned = cfg.value("cudnn_benchmark", json(false)) == json(true);
    if (conv_ms <= 0) add("cudnn", "cudnn_heuristic=b", false, -1, "no convolution kernels in this run");
    else if (tuned) add("cudnn", "cudnn_benchmark=true", false, -1, "already autotuning in this run");
    else {
      const std::string setting = cfg.value("cudnn_heuristic", json("instant")) == json("b") ? "cudnn_benchmark=true" : "cudnn_heuristic=b";
      add("cudnn", setting, true, without(conv_ms, c["conv_kernels_per_step"].get<double>()),
          "a BOUND, not an estimate: another algorithm choice changes only the convolution kernels (" + detail::num(conv_ms, 2) +
              " ms/step, dominant: " + c["dominant"].get<std::string>() +
              "); the step cannot fall below this. Faster choices trained to a lower mAP in our measurements "
              "(docs/performance.md): check accuracy too");
    }
  }
  return {{"model", p.value("model", std::string())}, {"estimate", true},
          {"note", "estimates from the measured window, not measurements: try the lever and profile again"},
          {"bound", p.value("bound", std::string("?"))}, {"step_ms", step}, {"levers", levers}};
}

LIBREYOLO_INLINE std::string what_if_text(const nlohmann::json& d) {
  std::ostringstream o;
  o << "what-if for " << d.value("model", std::string("?")) << " (bound: " << d.value("bound", std::string("?")) << ", step "
    << detail::num(d["step_ms"], 2) << " ms)\n";
  o << "ESTIMATES from the measured window, not measurements: try the lever and profile again.\n";
  char line[200];
  for (const auto& l : d["levers"]) {
    const bool a = l.value("applies", false);
    std::snprintf(line, sizeof line, "  %-18s %s", l.value("setting", std::string()).c_str(),
                  a ? ("~" + detail::num(l["estimated_step_ms"], 2) + " ms/step (x" + detail::num(l["estimated_speedup"], 2) + ")").c_str()
                    : "n/a");
    o << line << "  -- " << l.value("why", std::string()) << "\n";
  }
  return o.str();
}

LIBREYOLO_INLINE nlohmann::json what_if_removal_doc(const nlohmann::json& p, const Removal& r) {
  using nlohmann::json;
  if (r.category.empty() && !r.launches)
    throw ConfigError("profile what-if: nothing to remove; give --remove-category C and/or --remove-launches");
  if (!r.category.empty() && std::find(kernel_categories.begin(), kernel_categories.end(), r.category) == kernel_categories.end()) {
    std::vector<std::string> v(kernel_categories.begin(), kernel_categories.end());
    throw ConfigError("profile what-if: unknown --remove-category '" + r.category + "'; allowed: " + detail::joined(v, ", "));
  }
  const auto num = [&](const char* k) { return p.contains(k) && p.at(k).is_number() ? p.at(k).get<double>() : 0.0; };
  const double step = num("step_ms");
  if (step <= 0) throw DataError("profile what-if: the profile has no step_ms; nothing to estimate from");
  if (!p.value("trace_collected", false) || !p.contains("gpu_busy_ms_per_step") || !p.at("gpu_busy_ms_per_step").is_number())
    throw DataError("profile what-if: removing kernels or launch gaps needs a kernel trace (a CUDA run); this profile has "
                    "host timings only");
  const double load = num("dataload_ms"), busy = num("gpu_busy_ms_per_step"), kernel_sum = num("gpu_kernel_sum_ms_per_step");
  const double gap = num("host_overhead_ms_per_step"), launches = num("launches_per_step"), kernels = num("kernels_per_step");
  double cat_ms = 0, cat_kernels = 0, busy_removed = 0, launches_removed = 0, gap_removed = 0;
  if (!r.category.empty()) {
    for (const auto& c : p.value("categories", json::array()))
      if (c.is_object() && c.value("name", std::string()) == r.category) cat_ms = c.value("ms", 0.0);
    for (const auto& k : p.value("kernels", json::array()))
      if (k.is_object() && k.value("category", std::string()) == r.category) cat_kernels += k.value("count_per_step", 0.0);
    busy_removed = kernel_sum > 0 ? busy * cat_ms / kernel_sum : 0;
    launches_removed = kernels > 0 ? launches * cat_kernels / kernels : 0;
    gap_removed = launches > 0 ? gap * launches_removed / launches : 0;
  }
  if (r.launches) launches_removed = launches, gap_removed = gap;
  const double est = std::max(step - busy_removed - gap_removed, busy - busy_removed);
  std::string removed = r.category.empty() ? "" : "the " + r.category + " kernels";
  if (r.launches) removed += std::string(removed.empty() ? "" : " and ") + "every launch gap";
  json d = {{"model", p.value("model", std::string())}, {"estimate", true},
            {"note", "an estimate re-derived from the measured window (step = dataload + GPU busy + launch gaps), not a "
                     "measurement: make the change and profile again"},
            {"removed", removed}, {"category", r.category.empty() ? json() : json(r.category)},
            {"remove_launches", r.launches}, {"step_ms", step}, {"dataload_ms", load}, {"gpu_busy_ms", busy},
            {"launch_gaps_ms", gap}, {"launches_per_step", launches}, {"category_ms", cat_ms},
            {"category_kernels_per_step", cat_kernels}, {"busy_removed_ms", busy_removed},
            {"launches_removed", launches_removed}, {"gaps_removed_ms", gap_removed}, {"estimated_step_ms", est},
            {"estimated_speedup", est > 0 ? json(step / est) : json()}};
  if (p.contains("img_per_s") && p.at("img_per_s").is_number() && est > 0)
    d["img_per_s"] = p.at("img_per_s"), d["estimated_img_per_s"] = p.at("img_per_s").get<double>() * step / est;
  return d;
}

LIBREYOLO_INLINE std::string what_if_removal_text(const nlohmann::json& d) {
  std::ostringstream o;
  o << "what-if for " << d.value("model", std::string("?")) << ": without " << d.value("removed", std::string()) << "\n";
  o << "ESTIMATE re-derived from the measured window (step = dataload + GPU busy + launch gaps), not a measurement.\n";
  o << "  measured   step " << detail::num(d["step_ms"], 2) << " ms = dataload " << detail::num(d["dataload_ms"], 2)
    << " + busy " << detail::num(d["gpu_busy_ms"], 2) << " + launch gaps " << detail::num(d["launch_gaps_ms"], 2) << " ms ("
    << detail::num(d["launches_per_step"], 1) << " launches)\n";
  o << "  removed    busy " << detail::num(d["busy_removed_ms"], 2) << " ms, launch gaps " << detail::num(d["gaps_removed_ms"], 2)
    << " ms (" << detail::num(d["launches_removed"], 1) << " launches)\n";
  o << "  estimated  ~" << detail::num(d["estimated_step_ms"], 2) << " ms/step (x" << detail::num(d["estimated_speedup"], 2) << ")";
  if (d.contains("estimated_img_per_s")) o << ", ~" << detail::num(d["estimated_img_per_s"], 1) << " img/s";
  o << "\n";
  return o.str();
}

namespace detail {
using MetricGetter = std::function<nlohmann::json(const nlohmann::json&)>;
// name -> how it is read from a profile.json (the names metric_names() lists, in that order).
LIBREYOLO_INLINE const std::vector<std::pair<std::string, MetricGetter>>& metric_table() {
  using nlohmann::json;
  static const auto table = [] {
    std::vector<std::pair<std::string, MetricGetter>> t;
    const auto at = [](std::string key) {
      return [key](const json& p) { return p.contains(key) ? p.at(key) : json(); };
    };
    const auto in = [](std::string obj, std::string key) {
      return [obj, key](const json& p) {
        return p.contains(obj) && p.at(obj).is_object() && p.at(obj).contains(key) ? p.at(obj).at(key) : json();
      };
    };
    for (const char* k : {"step_ms", "img_per_s", "dataload_ms", "dataload_frac", "compute_ms", "gpu_util", "gpu_util_raw",
                          "gpu_busy_ms_per_step", "gpu_kernel_sum_ms_per_step", "host_overhead_ms_per_step",
                          "launches_per_step", "kernels_per_step", "mean_kernel_us", "unique_kernels", "memcpy_ms_per_step",
                          "memset_ms_per_step", "tensorcore_pct", "peak_vram_mb", "cuda_mallocs_per_step",
                          "cuda_frees_per_step", "memory_pressure", "bound", "bound_why", "model", "trace_collected"})
      t.emplace_back(k, at(k));
    for (auto [alias, key] : std::initializer_list<std::pair<const char*, const char*>>{
             {"util", "gpu_util"}, {"busy_ms", "gpu_busy_ms_per_step"}, {"verdict", "bound"},
             {"host_overhead_ms", "host_overhead_ms_per_step"}, {"launches", "launches_per_step"},
             {"kernels", "kernels_per_step"}, {"memcpy_ms", "memcpy_ms_per_step"}})
      t.emplace_back(alias, at(key));
    t.emplace_back("dataload_pct", [](const json& p) {
      return p.contains("dataload_frac") && p.at("dataload_frac").is_number() ? json(100.0 * p.at("dataload_frac").get<double>())
                                                                                : json();
    });
    for (const char* k : {"real_steps", "synced_steps", "traced_steps", "warmup"}) t.emplace_back(k, in("window", k));
    t.emplace_back("window_wall_ms", in("window", "wall_ms"));
    for (const char* k : {"batch", "imgsz", "device", "amp", "workers"}) t.emplace_back(k, in("config", k));
    for (auto phase : report_phases)
      for (auto [suffix, key] : std::initializer_list<std::pair<const char*, const char*>>{
               {"_gpu_ms", "gpu_ms_per_step"}, {"_wall_ms", "wall_ms_per_step"}, {"_kernels", "kernels_per_step"},
               {"_ops", "ops_per_step"}})
        t.emplace_back(std::string(phase) + suffix, [phase = std::string(phase), key = std::string(key)](const json& p) {
          for (const auto& row : p.value("phases", json::array()))
            if (row.is_object() && row.value("phase", std::string()) == phase) return row.contains(key) ? row.at(key) : json();
          return json();
        });
    for (auto cat : kernel_categories)
      for (auto [suffix, key] : std::initializer_list<std::pair<const char*, const char*>>{{"_ms", "ms"}, {"_pct", "pct"}})
        t.emplace_back(std::string(cat) + suffix, [cat = std::string(cat), key = std::string(key)](const json& p) {
          for (const auto& row : p.value("categories", json::array()))
            if (row.is_object() && row.value("name", std::string()) == cat) return row.contains(key) ? row.at(key) : json();
          return json();
        });
    return t;
  }();
  return table;
}
}  // namespace detail

LIBREYOLO_INLINE std::vector<std::string> metric_names() {
  std::vector<std::string> names;
  for (const auto& [name, get] : detail::metric_table()) names.push_back(name);
  return names;
}

LIBREYOLO_INLINE nlohmann::json get_metric(const nlohmann::json& p, const std::string& name) {
  for (const auto& [n, get] : detail::metric_table())
    if (n == name) return get(p);
  throw ConfigError("profile get: unknown metric '" + name + "'; allowed: " + detail::joined(metric_names(), ", "));
}

LIBREYOLO_INLINE std::string metric_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

LIBREYOLO_INLINE int run_get(const std::filesystem::path& f, const std::string& name, bool as_json, std::ostream& out,
                             std::ostream& err) {
  return detail::guarded(err, {f}, [&] {
    (void)get_metric(nlohmann::json::object(), name);  // an unknown name is refused before the file is read
    const auto v = get_metric(load_profile_file(f), name);
    if (as_json) out << nlohmann::json{{name, v}}.dump() << "\n";
    else out << metric_text(v) << "\n";
  });
}

LIBREYOLO_INLINE int run_summary(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return summary_doc(load_profile_file(f)); },
                      [&] { return summary_text(load_profile_file(f)); });
}

LIBREYOLO_INLINE int run_phases(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return phases_doc(load_profile_file(f)); },
                      [&] { return phases_text(load_profile_file(f)); });
}

LIBREYOLO_INLINE int run_kernels(const std::filesystem::path& f, const KernelQuery& q, bool as_json, std::ostream& out, std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return kernels_doc(load_profile_file(f), q); },
                      [&] { return kernels_text(load_profile_file(f), q); });
}

LIBREYOLO_INLINE int run_ops(const std::filesystem::path& f, int top, const std::string& phase, bool as_json, std::ostream& out,
                   std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return ops_doc(load_profile_file(f), top, phase); },
                      [&] { return ops_text(ops_doc(load_profile_file(f), top, phase)); });
}

LIBREYOLO_INLINE int run_what_if(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return what_if_doc(load_profile_file(f)); },
                      [&] { return what_if_text(what_if_doc(load_profile_file(f))); });
}

LIBREYOLO_INLINE int run_convs(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return convs_doc(load_profile_file(f)); },
                      [&] { return convs_text(convs_doc(load_profile_file(f))); });
}

LIBREYOLO_INLINE int run_what_if(const std::filesystem::path& f, const Removal& r, bool as_json, std::ostream& out,
                                 std::ostream& err) {
  return detail::lens({f}, as_json, out, err, [&] { return what_if_removal_doc(load_profile_file(f), r); },
                      [&] { return what_if_removal_text(what_if_removal_doc(load_profile_file(f), r)); });
}

LIBREYOLO_INLINE int run_compare(const std::filesystem::path& a, const std::filesystem::path& b, bool as_json, std::ostream& out,
                       std::ostream& err) {
  if (!as_json) return run_compare(a, b, out, err);
  return detail::guarded(err, {a, b}, [&] {
    const auto ja = load_profile_file(a, {analysis_schema, repeat_schema});
    const auto jb = load_profile_file(b, {analysis_schema, repeat_schema});
    detail::check_metrics(ja, a);
    detail::check_metrics(jb, b);
    out << compare_doc(ja, jb).dump(2) << "\n";
  });
}

}  // namespace libreyolo::profile
