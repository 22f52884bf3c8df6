// `profile get` (profile/lenses.hpp): one value of a profile.json, on the real H200 profile.json in
// tests/data/profile. The expected values come from the file through the names' documented meaning.
#include <libreyolo/profile/lenses.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;

namespace {
std::string h200_profile() { return std::string(LIBREYOLO_SOURCE_DIR) + "/tests/data/profile/h200_r18_profile.json"; }

// What a metric name means, read from the document by the test's own rules (lenses.hpp's list).
json expected_metric(const json& p, const std::string& name) {
  static const std::map<std::string, std::string> alias = {
      {"util", "gpu_util"}, {"busy_ms", "gpu_busy_ms_per_step"}, {"verdict", "bound"},
      {"host_overhead_ms", "host_overhead_ms_per_step"}, {"launches", "launches_per_step"},
      {"kernels", "kernels_per_step"}, {"memcpy_ms", "memcpy_ms_per_step"}};
  if (alias.count(name)) return p.at(alias.at(name));
  if (name == "dataload_pct") return 100.0 * p.at("dataload_frac").get<double>();
  if (name == "window_wall_ms") return p.at("window").at("wall_ms");
  for (const char* k : {"real_steps", "synced_steps", "traced_steps", "warmup"})
    if (name == k) return p.at("window").value(k, json());
  for (const char* k : {"batch", "imgsz", "device", "amp", "workers"})
    if (name == k) return p.at("config").at(k);
  for (const auto& row : p.at("phases"))
    for (auto [suffix, key] : {std::pair{"_gpu_ms", "gpu_ms_per_step"}, std::pair{"_wall_ms", "wall_ms_per_step"},
                               std::pair{"_kernels", "kernels_per_step"}, std::pair{"_ops", "ops_per_step"}})
      if (name == row.at("phase").get<std::string>() + suffix) return row.at(key);
  for (const auto& row : p.at("categories")) {
    if (name == row.at("name").get<std::string>() + "_ms") return row.at("ms");
    if (name == row.at("name").get<std::string>() + "_pct") return row.at("pct");
  }
  REQUIRE_MESSAGE(p.contains(name), "no rule for metric " << name);
  REQUIRE_FALSE(p.at(name).is_structured());
  return p.at(name);
}
}  // namespace

TEST_CASE("profile get: every metric of a profile.json, as text and as --json") {
  const json p = load_profile_file(h200_profile());
  const auto names = metric_names();
  // The names the issue asks for, and every scalar of the file's own `metrics` table.
  for (const char* n : {"step_ms", "util", "busy_ms", "dataload_pct", "peak_vram_mb", "verdict"})
    CHECK(std::count(names.begin(), names.end(), n) == 1);
  for (const auto& [key, value] : p.at("metrics").items()) {
    CAPTURE(key);
    CHECK(std::count(names.begin(), names.end(), key) == 1);
    CHECK(get_metric(p, key) == value);
  }
  for (const auto& name : names) {
    CAPTURE(name);
    const json want = expected_metric(p, name);
    CHECK(get_metric(p, name) == want);
    std::ostringstream out, err;
    REQUIRE(run_get(h200_profile(), name, false, out, err) == 0);
    CHECK(err.str().empty());
    CHECK(out.str() == (want.is_string() ? want.get<std::string>() : want.dump()) + "\n");
    std::ostringstream jout, jerr;
    REQUIRE(run_get(h200_profile(), name, true, jout, jerr) == 0);
    CHECK(json::parse(jout.str()) == json{{name, want}});
  }
  // A few literal values of this file (what a script would read).
  CHECK(get_metric(p, "verdict") == "host/launch");
  CHECK(get_metric(p, "step_ms").get<double>() == 17.41058575);
  CHECK(get_metric(p, "dataload_pct").get<double>() == 100.0 * 0.0011516604680191953);
  CHECK(get_metric(p, "peak_vram_mb").get<double>() == 470.83447265625);
  CHECK(get_metric(p, "batch") == 16);
  CHECK(get_metric(p, "gemm/conv_ms").get<double>() == 0.8691836000000001);
  CHECK(get_metric(p, "traced_steps").is_null());  // this file predates the window's traced_steps
  std::ostringstream out, err;
  REQUIRE(run_get(h200_profile(), "verdict", false, out, err) == 0);
  CHECK(out.str() == "host/launch\n");  // a bare string, no quotes
  std::ostringstream nout, nerr;
  REQUIRE(run_get(h200_profile(), "traced_steps", false, nout, nerr) == 0);
  CHECK(nout.str() == "null\n");
}

TEST_CASE("profile get: an unknown metric fails with exit 2 and lists every allowed name; a missing file names it") {
  std::ostringstream out, err;
  CHECK(run_get(h200_profile(), "stepms", false, out, err) == 2);
  CHECK(out.str().empty());
  const std::string e = err.str();
  CHECK(e.find("unknown metric 'stepms'") != std::string::npos);
  for (const auto& n : metric_names()) {
    CAPTURE(n);
    CHECK(e.find(n) != std::string::npos);
  }
  std::ostringstream out2, err2;
  CHECK(run_get("/nonexistent/profile.json", "step_ms", false, out2, err2) == 2);
  CHECK(err2.str().find("/nonexistent/profile.json") != std::string::npos);
}
