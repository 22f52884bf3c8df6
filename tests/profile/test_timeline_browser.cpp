// timeline.html rendered by headless Chromium (issue 26): time-axis labels that do not overlap, the
// per-phase table, the kernel categories and top kernels beside the timeline, and on a run without a
// kernel trace (CPU) no "n/a" carrying a unit.
#include "support_prereq.hpp"
#include "support.hpp"

#include <libreyolo/profile/writers.hpp>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
json tl_read_json_file(const fs::path& p) {
  std::ifstream f(p);
  REQUIRE(f.good());
  return json::parse(f);
}
WindowRecord tl_fixture() {
  return record_from_json(tl_read_json_file(std::string(LIBREYOLO_SOURCE_DIR) + "/tests/data/profile/synthetic_record.json"));
}
size_t tl_count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}
// The page after its scripts ran (Chromium's --dump-dom); "" when Chromium is not installed.
std::string rendered(const fs::path& html, const lry_test::TempDir& scratch) {
  LRY_NEED(lry_test::Need::chromium);
  const fs::path dom = scratch / "dom.html";
  const std::string cmd = "timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
                          "--disable-component-update --disable-sync --no-first-run --window-size=1280,900 --user-data-dir=" +
                          scratch.path.string() + "/ud --dump-dom file://" + html.string() + " > " + dom.string() +
                          " 2> " + (scratch / "stderr.txt").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream d(dom);
  return std::string((std::istreambuf_iterator<char>(d)), std::istreambuf_iterator<char>());
}
struct Tick {
  double x;
  std::string label;
};
std::vector<Tick> ticks(const std::string& dom) {
  std::vector<Tick> out;
  const std::regex re(R"re(<text x="([-0-9.e]+)" y="12" class="tick">([^<]*)</text>)re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back({std::stod((*it)[1].str()), (*it)[2].str()});
  return out;
}
// The rows (<tr>) of the table with this id.
size_t table_rows(const std::string& dom, const std::string& id) {
  const auto b = dom.find("<table id=\"" + id + "\"");
  if (b == std::string::npos) return 0;
  const auto e = dom.find("</table>", b);
  return tl_count_of(dom.substr(b, e - b), "<tr>");
}
}  // namespace

TEST_CASE("timeline.html in Chromium: readable time axis, phase table, kernel categories and top kernels" * lry_test::needs({lry_test::Need::chromium})) {
  lry_test::TempDir dir("lry_tl");
  const WindowRecord rec = tl_fixture();
  const Analysis a = analyse(rec);
  write_artifacts(dir.path, rec, a);
  const std::string dom = rendered(dir / "timeline.html", dir);
  CHECK(dom.find("id=\"js-error\"") == std::string::npos);
  REQUIRE(dom.find("id=\"render-ok\"") != std::string::npos);
  const auto t = ticks(dom);
  REQUIRE(t.size() >= 3);
  CHECK(t.size() <= 20);
  for (size_t i = 1; i < t.size(); ++i) {
    CAPTURE(t[i - 1].label);
    CAPTURE(t[i].label);
    CHECK(t[i].x > t[i - 1].x);
    // 10 px text is at most ~6.5 px a character: each label ends before the next one starts
    CHECK(t[i].x - t[i - 1].x >= 6.5 * static_cast<double>(t[i - 1].label.size()));
    CHECK(t[i].label != t[i - 1].label);
  }
  const json p = profile_json(a);
  CHECK(table_rows(dom, "phase-table") == 1 + p["phases"].size());  // header + a row per phase (traced: no note)
  CHECK(dom.find(">forward</td>") != std::string::npos);
  CHECK(table_rows(dom, "kernel-mix") == 1 + p["categories"].size());
  CHECK(table_rows(dom, "top-kernels") == 1 + p["top_kernels"].size());
  CHECK(dom.find(">gemm/conv</td>") != std::string::npos);
}

TEST_CASE("timeline.html of a run without a kernel trace: n/a without units, the tables say why" * lry_test::needs({lry_test::Need::chromium})) {
  lry_test::TempDir dir("lry_tl_cpu");
  WindowRecord rec = tl_fixture();
  rec.gpu.clear();
  rec.runtime.clear();
  rec.cpu_ops.clear();
  rec.trace_collected = false;
  rec.peak_vram_bytes = 0;
  rec.meta["device"] = "cpu";
  const Analysis a = analyse(rec);
  write_artifacts(dir.path, rec, a);
  const std::string dom = rendered(dir / "timeline.html", dir);
  REQUIRE(dom.find("id=\"render-ok\"") != std::string::npos);
  for (const char* bad : {"n/a%", "n/a MB", "n/a ms", "n/a us", "n/a @"}) CHECK_MESSAGE(dom.find(bad) == std::string::npos, bad);
  CHECK(dom.find("no kernel trace in this run") != std::string::npos);
  CHECK(table_rows(dom, "phase-table") == 1 + 6 + 1);  // header, phases, the note
  CHECK(table_rows(dom, "kernel-mix") == 1 + 1);      // header, "no kernels traced"
  CHECK(table_rows(dom, "top-kernels") == 1 + 1);
  CHECK(ticks(dom).size() >= 3);
}
