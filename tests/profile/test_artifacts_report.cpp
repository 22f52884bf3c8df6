// Artifacts (profile.json, profile_summary.json, profile_trace.json, timeline.html) checked key by key
// against SPEC §2.1, and the `libreyolo profile` subcommand functions: text, exit codes, errors.
#include "support_prereq.hpp"
#include "support.hpp"

#include <libreyolo/profile/report.hpp>
#include <libreyolo/profile/writers.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
json read_json_file(const fs::path& p) {
  std::ifstream f(p);
  REQUIRE(f.good());
  return json::parse(f);
}
std::string data_dir() { return std::string(LIBREYOLO_SOURCE_DIR) + "/tests/data/profile/"; }
WindowRecord fixture() { return record_from_json(read_json_file(data_dir() + "synthetic_record.json")); }
json expected() { return read_json_file(data_dir() + "synthetic_expected.json"); }

void require_keys(const json& j, std::initializer_list<const char*> keys, const std::string& where) {
  for (const char* k : keys) {
    CAPTURE(where);
    CAPTURE(k);
    CHECK(j.contains(k));
  }
}
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}
std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
// A written profile.json of the fixture in a temp dir, plus helpers to run the subcommands.
struct Written {
  lry_test::TempDir dir{"lry_profile"};
  WindowRecord rec = fixture();
  Analysis a = analyse(rec);
  Written() { write_artifacts(dir.path, rec, a); }
  fs::path profile() const { return dir.path / "profile.json"; }
};
}  // namespace

TEST_CASE("profile.json carries every key of SPEC's list and is self-contained") {
  Written w;
  const json p = read_json_file(w.profile());
  CHECK(p["schema"] == "libreyolo.profile.analysis/v1");
  require_keys(p, {"model", "config", "bound", "bound_why", "step_ms", "img_per_s", "dataload_ms", "dataload_frac",
                   "gpu_util", "gpu_util_raw", "memory_pressure", "cuda_mallocs_per_step", "host_overhead_ms_per_step",
                   "launches_per_step", "gpu_busy_ms_per_step", "mean_kernel_us", "kernels_per_step", "unique_kernels",
                   "memcpy_ms_per_step", "tensorcore_pct", "peak_vram_mb", "window", "metrics", "categories", "phases",
                   "kernels_by_phase", "ops_by_phase", "top_kernels", "kernels", "ops"},
               "profile.json");
  require_keys(p["window"], {"wall_ms", "real_steps"}, "window");
  for (const char* ph : {"dataload", "to_device", "forward", "backward", "optimizer"})
    for (const char* suffix : {"_gpu_ms", "_wall_ms", "_kernels", "_ops"}) {
      CAPTURE(ph);
      CAPTURE(suffix);
      CHECK(p["metrics"].contains(std::string(ph) + suffix));
    }
  CHECK(p["metrics"]["step_ms"] == p["step_ms"]);  // the flat copy
  REQUIRE(p["phases"].size() == 6);
  for (const auto& r : p["phases"])
    require_keys(r, {"phase", "gpu_ms_per_step", "wall_ms_per_step", "kernels_per_step", "ops_per_step", "unique_kernels"}, "phases[]");
  REQUIRE(!p["kernels"].empty());
  for (const auto& k : p["kernels"])
    require_keys(k, {"kernel", "raw_name", "category", "tensorcore", "ms_per_step", "pct_of_gpu", "count_per_step"}, "kernels[]");
  REQUIRE(!p["ops"].empty());
  for (const auto& o : p["ops"]) require_keys(o, {"op", "ms_per_step", "pct_of_cpu_ops", "count_per_step"}, "ops[]");
  CHECK(p["top_kernels"].size() == 10);
  require_keys(p["top_kernels"][0], {"name", "pct", "ms", "count"}, "top_kernels[]");
  CHECK(p["categories"].size() == 5);
  CHECK(p["kernels_by_phase"]["forward"].size() == 9);  // distinct forward kernels in the fixture plan
  const json want = expected();
  CHECK(p["step_ms"].get<double>() == doctest::Approx(want["step_ms"].get<double>()));
  CHECK(p["model"] == "yolo9-s");
  CHECK(p["config"]["imgsz"] == 640);
  double pct_sum = 0;
  for (const auto& k : p["kernels"]) pct_sum += k["pct_of_gpu"].get<double>();
  CHECK(pct_sum == doctest::Approx(100.0));
  // Self-contained: a copy elsewhere is read by the subcommands with no other file beside it.
  lry_test::TempDir other{"lry_profile_copy"};
  {  // a stream copy: fs::copy_file crashed (null call) in the sandbox of the GPU machine
    std::ifstream src(w.profile(), std::ios::binary);
    std::ofstream(other / "copied.json", std::ios::binary) << src.rdbuf();
  }
  std::ostringstream out, err;
  CHECK(run_summary(other / "copied.json", out, err) == 0);
  CHECK(err.str().empty());
}

TEST_CASE("profile_summary.json carries every key of SPEC's list") {
  Written w;
  const json s = read_json_file(w.dir / "profile_summary.json");
  require_keys(s, {"meta", "window", "real", "composition_ms", "composition_total_ms", "bound", "bound_why", "trace", "analysis"}, "summary");
  require_keys(s["meta"], {"model", "device", "batch", "imgsz", "amp", "amp_dtype", "workers"}, "meta");
  require_keys(s["window"], {"warmup", "real_steps", "synced_steps"}, "window");
  require_keys(s["real"], {"step_ms", "dataload_ms", "compute_ms", "img_per_s", "dataload_frac"}, "real");
  require_keys(s["composition_ms"], {"to_device", "forward", "backward", "optimizer"}, "composition_ms");
  require_keys(s["analysis"], {"gpu_util", "gpu_util_raw", "gpu_busy_ms_per_step", "mean_kernel_us", "kernels_per_step",
                               "memcpy_ms_per_step", "tensorcore_pct", "cuda_mallocs_per_step", "memory_pressure",
                               "top_kernels", "categories", "peak_vram_mb"}, "analysis");
  require_keys(s["analysis"]["top_kernels"][0], {"name", "pct", "ms", "count"}, "analysis.top_kernels[]");
  require_keys(s["analysis"]["categories"][0], {"name", "pct", "ms"}, "analysis.categories[]");
  const json want = expected();
  double total = 0;
  for (const char* ph : {"to_device", "forward", "backward", "optimizer"}) {
    CHECK(s["composition_ms"][ph].get<double>() == doctest::Approx(want["phase_wall_ms"][ph].get<double>()));
    total += want["phase_wall_ms"][ph].get<double>();
  }
  CHECK(s["composition_total_ms"].get<double>() == doctest::Approx(total));
  CHECK(s["window"]["warmup"] == 5);
  CHECK(s["window"]["real_steps"] == 10);
  CHECK(s["real"]["compute_ms"].get<double>() ==
        doctest::Approx(want["step_ms"].get<double>() - want["dataload_ms"].get<double>()));
  CHECK(s["trace"]["collected"] == true);
}

TEST_CASE("without a trace, GPU figures are null rather than zero") {
  WindowRecord r = fixture();
  r.trace_collected = false;
  r.gpu.clear();
  r.runtime.clear();
  const json p = profile_json(analyse(r));
  CHECK(p["gpu_util"].is_null());
  CHECK(p["kernels_per_step"].is_null());
  CHECK(p["host_overhead_ms_per_step"].is_null());
  CHECK(p["bound"] == bound::unknown_no_trace);
  CHECK(p["step_ms"].is_number());
  const std::string text = summary_text(p);
  CHECK(text.find("GPU util: n/a") != std::string::npos);
  CHECK(text.find("host/launch") == std::string::npos);
  CHECK(text.find("no GPU kernel trace") != std::string::npos);
}

TEST_CASE("profile_trace.json: Chrome trace with steps, phases, per-stream kernels and launch flows") {
  Written w;
  const json t = read_json_file(w.dir / "profile_trace.json");
  REQUIRE(t["traceEvents"].is_array());
  size_t steps = 0, phases = 0, kernels = 0, memory = 0, flow_s = 0, flow_f = 0, runtime = 0;
  std::set<int64_t> kernel_tids;
  for (const auto& e : t["traceEvents"]) {
    const std::string ph = e["ph"], cat = e.value("cat", "");
    if (ph == "X") {
      CHECK(e.contains("ts"));
      CHECK(e["dur"].get<double>() >= 0);
    }
    if (ph == "X" && cat == "step") ++steps;
    if (ph == "X" && cat == "phase") ++phases;
    if (ph == "X" && cat == "kernel") {
      ++kernels;
      kernel_tids.insert(e["tid"].get<int64_t>());
      CHECK(e["pid"] == 2);
    }
    if (ph == "X" && cat == "memory") ++memory;
    if (ph == "X" && cat == "cuda_runtime") ++runtime;
    if (ph == "s") ++flow_s;
    if (ph == "f") {
      ++flow_f;
      CHECK(e["bp"] == "e");
    }
  }
  const WindowRecord& r = w.rec;
  CHECK(steps == r.steps.size());
  CHECK(phases == r.phases.size());
  CHECK(runtime == r.runtime.size());
  size_t n_kernels = 0;
  for (const auto& g : r.gpu) n_kernels += g.kind == GpuKind::kernel;
  CHECK(kernels == n_kernels);
  CHECK(memory == r.gpu.size() - n_kernels);
  CHECK(flow_s == r.gpu.size());  // every activity of the fixture has its launch
  CHECK(flow_f == flow_s);
  CHECK(kernel_tids == std::set<int64_t>{7, 13});
}

TEST_CASE("timeline.html is one self-contained file with countable steps and phases") {
  Written w;
  std::ifstream f(w.dir / "timeline.html");
  const std::string html((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(html.find("<script src") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);
  CHECK(count_of(html, "</script>") == 2);  // kernel names with '<' did not end the data block early
}

TEST_CASE("timeline.html renders in Chromium without a script error, one element per step and phase" *
          lry_test::needs({lry_test::Need::chromium})) {
  LRY_NEED(lry_test::Need::chromium);
  Written w;
  lry_test::TempDir profile_dir{"lry_chromium"};
  const fs::path dom = profile_dir / "dom.html", log = profile_dir / "stderr.txt";
  const std::string cmd = "timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
                          "--disable-component-update --disable-sync --no-first-run --user-data-dir=" +
                          profile_dir.path.string() + "/ud --enable-logging=stderr --v=0 --dump-dom file://" +
                          (w.dir / "timeline.html").string() + " > " + dom.string() + " 2> " + log.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream d(dom);
  const std::string out((std::istreambuf_iterator<char>(d)), std::istreambuf_iterator<char>());
  std::ifstream l(log);
  const std::string console((std::istreambuf_iterator<char>(l)), std::istreambuf_iterator<char>());
  CAPTURE(console.substr(0, 2000));
  CHECK(out.find("id=\"js-error\"") == std::string::npos);
  CHECK(out.find("id=\"render-ok\"") != std::string::npos);
  CHECK(console.find("Uncaught") == std::string::npos);
  CHECK(count_of(out, "class=\"step\"") == w.rec.steps.size());
  CHECK(count_of(out, "class=\"phase\"") == w.rec.phases.size());
  CHECK(count_of(out, "data-phase=\"forward\"") == 20);
  CHECK(out.find("BOUND: host/launch") != std::string::npos);
}

TEST_CASE("profile summary and phases: text from profile.json") {
  Written w;
  const json want = expected();
  std::ostringstream out, err;
  REQUIRE(run_summary(w.profile(), out, err) == 0);
  const std::string s = out.str();
  CHECK(s.find("model: yolo9-s") != std::string::npos);
  CHECK(s.find(fmt("%.1f img/s", want["img_per_s"].get<double>())) != std::string::npos);
  CHECK(s.find(fmt("step %.2f ms", want["step_ms"].get<double>())) != std::string::npos);
  CHECK(s.find(fmt("busy %.2f ms/step", want["gpu_busy_ms_per_step"].get<double>())) != std::string::npos);
  CHECK(s.find(">> BOUND: host/launch: ") != std::string::npos);
  CHECK(s.find("kernel mix:") != std::string::npos);
  CHECK(s.find("top kernels:") != std::string::npos);
  CHECK(s.find("MEMORY PRESSURE") == std::string::npos);
  json p = read_json_file(w.profile());
  p["memory_pressure"] = true;
  CHECK(summary_text(p).find("!! MEMORY PRESSURE") != std::string::npos);

  std::ostringstream pout, perr;
  REQUIRE(run_phases(w.profile(), pout, perr) == 0);
  const std::string t = pout.str();
  CHECK(count_of(t, "\n") == 7);  // header + five phases + outside
  std::istringstream lines(t);
  std::string line;
  while (std::getline(lines, line) && line.rfind("forward", 0) != 0) {}
  CHECK(line.find(fmt("%.3f", want["phase_gpu_ms"]["forward"].get<double>())) != std::string::npos);
  CHECK(line.find(fmt("%.3f", want["phase_wall_ms"]["forward"].get<double>())) != std::string::npos);
  CHECK(line.find("12.0") != std::string::npos);  // kernels per step
}

TEST_CASE("profile kernels: filters, sorting, phases, and their errors") {
  Written w;
  auto run = [&](KernelQuery q, int want_rc = 0) {
    std::ostringstream out, err;
    CHECK(run_kernels(w.profile(), q, out, err) == want_rc);
    return want_rc == 0 ? out.str() : err.str();
  };
  const std::string all = run({});
  CHECK(all.find("12 kernels match") != std::string::npos);
  const std::string first_row = all.substr(all.find('\n') + 1, all.find('\n', all.find('\n') + 1) - all.find('\n') - 1);
  CHECK(first_row.find(w.a.kernels[0].name) != std::string::npos);  // largest time first
  KernelQuery q;
  q.category = "gemm/conv";
  CHECK(run(q).find("3 kernels match") != std::string::npos);
  q = {};
  q.tensorcore_only = true;
  const std::string tc = run(q);
  CHECK(tc.find("2 kernels match") != std::string::npos);
  CHECK(count_of(tc, " TC  ") == 1 + 2);  // the header's column title, then two rows
  q = {};
  q.grep = "CUTLASS";  // case-insensitive
  CHECK(run(q).find("1 kernels match") != std::string::npos);
  q = {};
  q.top = 3;
  CHECK(run(q).find("12 kernels match (top 3 shown)") != std::string::npos);
  q = {};
  q.sort = "name";
  const std::string by_name = run(q);
  CHECK(by_name.find("at::native::anon::multi_tensor_apply_kernel") < by_name.find("sm90_xmma_gemm"));
  q = {};
  q.phase = "optimizer";
  CHECK(run(q).find("2 kernels match") != std::string::npos);  // foreach + add
  q.phase = "outside";
  CHECK(run(q).find("2 kernels match") != std::string::npos);  // EMA foreach + copy
  q.phase = "warmup";
  const std::string bad_phase = run(q, 2);
  CHECK(bad_phase.find("unknown --phase 'warmup'; allowed: dataload, to_device, forward, backward, optimizer, outside") != std::string::npos);
  q = {};
  q.category = "matmul";
  CHECK(run(q, 2).find("allowed: gemm/conv, elementwise, reduction/norm, layout/copy, other") != std::string::npos);
  q = {};
  q.sort = "speed";
  CHECK(run(q, 2).find("unknown --sort 'speed'; allowed: time, count, name") != std::string::npos);
  q = {};
  q.grep = "(";
  CHECK(run(q, 2).find("--grep '('") != std::string::npos);
  q = {};
  q.top = 0;
  CHECK(run(q, 2).find("--top 0") != std::string::npos);
}

TEST_CASE("profile subcommands: missing file, not JSON, wrong schema -> exit 2 naming the file") {
  lry_test::TempDir dir{"lry_profile_err"};
  std::ostringstream out, err;
  CHECK(run_summary(dir / "nope.json", out, err) == 2);
  CHECK(err.str().find("nope.json' does not exist") != std::string::npos);
  {
    std::ofstream(dir / "text.json") << "this is not json";
  }
  err.str("");
  CHECK(run_phases(dir / "text.json", out, err) == 2);
  CHECK(err.str().find("text.json' is not JSON") != std::string::npos);
  {
    std::ofstream(dir / "other.json") << R"({"schema": "libreyolo.profile.analysis/v0"})";
  }
  err.str("");
  CHECK(run_kernels(dir / "other.json", {}, out, err) == 2);
  CHECK(err.str().find("schema is 'libreyolo.profile.analysis/v0', expected libreyolo.profile.analysis/v1") != std::string::npos);
  {
    std::ofstream(dir / "array.json") << "[1, 2]";
  }
  err.str("");
  CHECK(run_compare(dir / "array.json", dir / "array.json", out, err) == 2);
  CHECK(err.str().find("schema is '(none)'") != std::string::npos);
  CHECK(out.str().empty());
}

TEST_CASE("repeat aggregation and compare: mean, population std, mixed bound, significance") {
  Written w;
  const json base = read_json_file(w.profile());
  auto trials = [&](std::vector<double> ips, std::vector<std::string> bounds) {
    std::vector<json> v;
    for (size_t i = 0; i < ips.size(); ++i) {
      json t = base;
      t["img_per_s"] = ips[i];
      t["bound"] = bounds[i];
      v.push_back(t);
    }
    return v;
  };
  const json a = aggregate_repeat(trials({100, 102, 98}, {"compute", "compute", "compute"}));
  CHECK(a["schema"] == "libreyolo.profile.repeat/v1");
  CHECK(a["trials"] == 3);
  CHECK(a["bound"] == "compute");
  CHECK(a["metrics"]["img_per_s"]["mean"].get<double>() == doctest::Approx(100.0));
  CHECK(a["metrics"]["img_per_s"]["std"].get<double>() == doctest::Approx(std::sqrt(8.0 / 3.0)));
  CHECK(a["metrics"]["img_per_s"]["values"] == json::array({100, 102, 98}));
  CHECK(a["metrics"]["step_ms"]["std"].get<double>() == doctest::Approx(0.0));
  for (const char* k : repeat_metrics) CHECK(a["metrics"].contains(k));
  const json mixed = aggregate_repeat(trials({100, 101}, {"compute", "host/launch"}));
  CHECK(mixed["bound"] == "mixed");
  CHECK_THROWS_AS(aggregate_repeat({}), libreyolo::DataError);
  CHECK_THROWS_AS(aggregate_repeat({json::object()}), libreyolo::DataError);

  // limit = 2 sqrt(8/3/3 + 8/3/3) = 2.667: a delta of 10 is significant, a delta of 1 is not.
  const json far = aggregate_repeat(trials({110, 112, 108}, {"compute", "compute", "compute"}));
  const json near = aggregate_repeat(trials({101, 103, 99}, {"compute", "compute", "compute"}));
  auto line_of = [](const std::string& text, const std::string& key) {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
      if (l.rfind(key + " ", 0) == 0) return l;
    return std::string();
  };
  CHECK(line_of(compare_text(a, far), "img_per_s").find(" significant (2se 2.667)") != std::string::npos);
  CHECK(line_of(compare_text(a, far), "img_per_s").find("+10.000") != std::string::npos);
  CHECK(line_of(compare_text(a, near), "img_per_s").find("not significant") != std::string::npos);
  CHECK(line_of(compare_text(base, base), "step_ms").find("needs n >= 2") != std::string::npos);

  // Through the files: run_aggregate_repeat writes profile_repeat.json, compare reads repeat files.
  lry_test::TempDir dir{"lry_repeat"};
  std::ostringstream out, err;
  REQUIRE(run_aggregate_repeat({w.profile(), w.profile()}, dir / "profile_repeat.json", out, err) == 0);
  CHECK(out.str().find("repeat: 2 trials") != std::string::npos);
  REQUIRE(run_compare(dir / "profile_repeat.json", w.profile(), out, err) == 0);
  CHECK(out.str().find("bound: host/launch -> host/launch") != std::string::npos);
  CHECK(run_aggregate_repeat({dir / "missing.json"}, dir / "x.json", out, err) == 2);
}

// The profile.json a real training run wrote on the H200 (ResNet-18 b16 224, AMP fp16, cache=ram, run
// r18_cached of benchmarks/gpu_session.sh): the v1 reader and the three text reports work on it.
TEST_CASE("real H200 profile.json: summary, phases and kernels reports") {
  const auto path = data_dir() + "h200_r18_profile.json";
  const json p = load_profile_file(path);
  CHECK(p["bound"] == "host/launch");
  CHECK(p["config"]["device"] == "cuda:0");
  CHECK(p["kernels_per_step"].get<double>() > 100);
  const std::string s = summary_text(p);
  CHECK(s.find("model: resnet18") != std::string::npos);
  CHECK(s.find(fmt("busy %.2f ms/step", p["gpu_busy_ms_per_step"].get<double>())) != std::string::npos);
  CHECK(s.find(">> BOUND: host/launch: ") != std::string::npos);
  const std::string t = phases_text(p);
  CHECK(count_of(t, "\n") == 7);  // header + five phases + outside
  KernelQuery q;
  q.top = 5;
  q.phase = "backward";
  const std::string k = kernels_text(p, q);
  CHECK(k.find("kernels match") != std::string::npos);
  q.category = "gemm/conv";
  q.phase.clear();
  CHECK(kernels_text(p, q).find("kernels match") != std::string::npos);
}
