#pragma once
// Definitions of timeline_html.hpp (core/api.hpp): included by timeline_html.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/timeline_html.hpp>

namespace libreyolo::profile {

namespace detail {
LIBREYOLO_INLINE double rounded_ms(int64_t ns, int64_t t0) { return std::round(static_cast<double>(ns - t0) / 100.0) / 1e4; }

LIBREYOLO_INLINE nlohmann::json timeline_data(const WindowRecord& rec, const nlohmann::json& profile) {
  using nlohmann::json;
  const int64_t t0 = rec.steps.empty() ? 0 : rec.steps.front().start_ns;
  json steps = json::array(), phases = json::array(), names = json::array(), lanes = json::object();
  for (const auto& s : rec.steps)
    steps.push_back({rounded_ms(s.start_ns, t0), rounded_ms(s.end_ns, t0), s.synced});
  for (const auto& p : rec.phases)
    phases.push_back({p.step, phase_name(p.phase), rounded_ms(p.start_ns, t0), rounded_ms(p.end_ns, t0)});
  std::map<std::string, int> name_index;
  for (const auto& g : rec.gpu) {
    auto [it, fresh] = name_index.emplace(g.name, static_cast<int>(name_index.size()));
    if (fresh) names.push_back(g.name);
    lanes[std::to_string(g.stream)].push_back(
        {rounded_ms(g.start_ns, t0), rounded_ms(g.start_ns + g.dur_ns, t0), it->second, gpu_kind_name(g.kind)});
  }
  json head = json::object();
  for (const char* k : {"model", "bound", "bound_why", "step_ms", "img_per_s", "dataload_frac", "gpu_util",
                        "gpu_util_raw", "kernels_per_step", "mean_kernel_us", "tensorcore_pct", "peak_vram_mb",
                        "host_overhead_ms_per_step", "launches_per_step", "trace_collected", "notes", "levers"})
    head[k] = profile.contains(k) ? profile.at(k) : json(nullptr);
  // Beside the timeline: the per-phase table, the kernel categories and the top kernels.
  json table = json::array();
  for (const auto& r : profile.value("phases", json::array()))
    if (r.is_object())
      table.push_back({r.value("phase", std::string()), r.contains("wall_ms_per_step") ? r.at("wall_ms_per_step") : json(nullptr),
                       r.contains("gpu_ms_per_step") ? r.at("gpu_ms_per_step") : json(nullptr),
                       r.contains("kernels_per_step") ? r.at("kernels_per_step") : json(nullptr),
                       r.contains("ops_per_step") ? r.at("ops_per_step") : json(nullptr)});
  json cats = json::array(), top = json::array();
  for (const auto& c : profile.value("categories", json::array()))
    if (c.is_object()) cats.push_back({c.value("name", std::string()), c.contains("pct") ? c.at("pct") : json(nullptr),
                                       c.contains("ms") ? c.at("ms") : json(nullptr)});
  for (const auto& k : profile.value("top_kernels", json::array()))
    if (k.is_object()) top.push_back({k.value("name", std::string()), k.contains("pct") ? k.at("pct") : json(nullptr),
                                      k.contains("ms") ? k.at("ms") : json(nullptr), k.contains("count") ? k.at("count") : json(nullptr)});
  return {{"steps", steps}, {"phases", phases}, {"names", names}, {"lanes", lanes}, {"head", head},
          {"phase_table", table}, {"categories", cats}, {"top_kernels", top}};
}
}  // namespace detail

LIBREYOLO_INLINE std::string timeline_html(const WindowRecord& rec, const nlohmann::json& profile) {
  std::string data = detail::timeline_data(rec, profile).dump();
  // "</" inside a <script> element would end it early; "<\/" is the same JSON string.
  for (auto pos = data.find("</"); pos != std::string::npos; pos = data.find("</", pos + 3)) data.replace(pos, 2, "<\\/");
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>libreyolo training profile</title>\n<style>";
  html += detail::timeline_css;
  html += "</style></head><body>\n<h1 id=\"model\"></h1><div id=\"verdict\"></div><div id=\"why\"></div>"
          "<div id=\"notes\"></div><div id=\"numbers\"></div><div id=\"legend\"></div>\n"
          "<p style=\"color:#666;margin:4px 0\">Wheel: zoom &middot; drag: pan &middot; double-click: reset. "
          "Darker steps ran with device synchronisation.</p>\n<svg id=\"tl\" xmlns=\"http://www.w3.org/2000/svg\"></svg>\n<div id=\"tables\"></div>\n"
          "<script type=\"application/json\" id=\"data\">";
  html += data;
  html += "</script>\n<script>";
  html += detail::timeline_js;
  html += "</script>\n</body></html>\n";
  return html;
}

}  // namespace libreyolo::profile
