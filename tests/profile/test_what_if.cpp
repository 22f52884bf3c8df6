// `profile what-if` (profile/lenses.hpp) on hand-made profiles: the cuda_graph lever reads the run's
// graphs from its config, which holds true / false (the trainer's meta: graphs active) or "step" (as the
// cuda_graph key writes it), and the trainer's cuda_graph_step (whole steps recorded).
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/lenses.hpp>
#include <libreyolo/profile/writers.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <string>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;

namespace {
// A traced profile: 10 ms steps, 6 ms of GPU busy time, 1 ms of loading, workers 4; `config` merged in.
json profile_with(const json& config) {
  json cfg = {{"amp", true}, {"workers", 4}};
  cfg.update(config);
  return {{"schema", analysis_schema}, {"model", "yoloxt"}, {"step_ms", 10.0}, {"dataload_ms", 1.0},
          {"gpu_busy_ms_per_step", 6.0}, {"trace_collected", true}, {"config", cfg}};
}
json graph_lever(const json& doc) {
  for (const auto& l : doc["levers"])
    if (l["lever"] == "cuda_graph") return l;
  FAIL("no cuda_graph lever");
  return {};
}
}  // namespace

TEST_CASE("profile what-if: cuda_graph=step counts as graphs on and is named; false still estimates the lever") {
  // No graphs: the lever applies, the step approaching max(busy, dataload).
  auto off = graph_lever(what_if_doc(profile_with({{"cuda_graph", false}})));
  CHECK(off["applies"] == true);
  CHECK(off["setting"] == "cuda_graph=true");
  CHECK(off["estimated_step_ms"].get<double>() == doctest::Approx(6.0));

  // Network graphs on.
  auto net = graph_lever(what_if_doc(profile_with({{"cuda_graph", true}})));
  CHECK(net["applies"] == false);
  CHECK(net["setting"] == "cuda_graph=true");
  CHECK(net["why"] == "already on in this run");

  // The whole step: as the config key writes it ("step", any case), or the trainer's cuda_graph_step.
  for (const json& cfg : {json{{"cuda_graph", "step"}}, json{{"cuda_graph", "STEP"}},
                          json{{"cuda_graph", true}, {"cuda_graph_step", true}}}) {
    CAPTURE(cfg.dump());
    const auto doc = what_if_doc(profile_with(cfg));
    auto l = graph_lever(doc);
    CHECK(l["applies"] == false);
    CHECK(l["estimated_step_ms"].is_null());
    CHECK(l["setting"] == "cuda_graph=step");
    CHECK(l["why"].get<std::string>().find("already on") != std::string::npos);
    const auto text = what_if_text(doc);
    CHECK(text.find("cuda_graph=step") != std::string::npos);
    CHECK(text.find("the whole training step") != std::string::npos);
  }

  // cuda_graph_step false with network graphs: network graphs.
  auto plain = graph_lever(what_if_doc(profile_with({{"cuda_graph", true}, {"cuda_graph_step", false}})));
  CHECK(plain["setting"] == "cuda_graph=true");
  CHECK(plain["applies"] == false);
  // Another string is not "graphs on".
  CHECK(graph_lever(what_if_doc(profile_with({{"cuda_graph", "maybe"}})))["applies"] == true);
}

namespace {
constexpr int64_t wi_ms = 1'000'000;
// A hand-made window: step 0 unsynchronised (0-100 ms, 8 images, dataload 0-10 ms) gives the real step;
// step 1 synchronised and traced (100-200 ms) holds four launches and their kernels:
//   sgemm (gemm/conv)       stream 7  [120, 150)
//   elementwise             stream 7  [150, 160)
//   cutlass conv (gemm)     stream 8  [170, 180)
//   elementwise             stream 9  [175, 185)   (overlaps the conv: the busy union counts it once)
struct HandWindow {
  struct K {
    const char* name;
    int64_t stream, start, end;
    bool gemm;
  };
  std::vector<K> kernels = {{"sgemm_128x64_nn", 7, 120, 150, true},
                            {"vectorized_elementwise_kernel", 7, 150, 160, false},
                            {"cutlass_conv2d_fprop_kernel", 8, 170, 180, true},
                            {"vectorized_elementwise_kernel", 9, 175, 185, false}};
  WindowRecord record() const {
    WindowRecord r;
    r.trace_collected = true;
    r.traced_from = 1;
    r.meta = {{"model", "hand"}, {"device", "cuda:0"}, {"amp", true}, {"workers", 4}};
    r.steps.push_back({0, 100 * wi_ms, false, 8});
    r.steps.push_back({100 * wi_ms, 200 * wi_ms, true, 8});
    r.phases.push_back({0, Phase::dataload, 0, 10 * wi_ms, false});
    r.phases.push_back({1, Phase::dataload, 100 * wi_ms, 110 * wi_ms, true});
    r.phases.push_back({1, Phase::forward, 110 * wi_ms, 200 * wi_ms, true});
    uint64_t corr = 1;
    for (const auto& k : kernels) {
      r.runtime.push_back({"cudaLaunchKernel", (k.start - 5) * wi_ms, wi_ms / 100, corr, 1});
      r.gpu.push_back({GpuKind::kernel, k.name, k.stream, k.start * wi_ms, (k.end - k.start) * wi_ms, corr});
      ++corr;
    }
    return r;
  }
  // The window's own figures, from its definition.
  double step() const { return 100.0; }
  double dataload() const { return 10.0; }
  double busy() const { return (160.0 - 120.0) + (185.0 - 170.0); }  // the union: [120,160) and [170,185)
  double kernel_sum(bool gemm_only) const {
    double s = 0;
    for (const auto& k : kernels)
      if (!gemm_only || k.gemm) s += double(k.end - k.start);
    return s;
  }
  double gemm_count() const { return 2; }
  double launches() const { return double(kernels.size()); }
  double gaps() const { return step() - busy() - dataload(); }
  double img_per_s() const { return 8 / (step() / 1000.0); }
};
}  // namespace

TEST_CASE("profile what-if --remove-category / --remove-launches: the step re-derived from a hand-made window") {
  const HandWindow w;
  const json p = profile_json(analyse(w.record()));
  // The analysis reads the window as defined above.
  REQUIRE(p["step_ms"].get<double>() == doctest::Approx(w.step()));
  REQUIRE(p["gpu_busy_ms_per_step"].get<double>() == doctest::Approx(w.busy()));
  REQUIRE(p["host_overhead_ms_per_step"].get<double>() == doctest::Approx(w.gaps()));

  // Without gemm/conv: its share of the busy union, and the gaps of its two launches of four.
  const double busy_removed = w.busy() * w.kernel_sum(true) / w.kernel_sum(false);
  const double gaps_removed = w.gaps() * w.gemm_count() / w.launches();
  auto d = what_if_removal_doc(p, {"gemm/conv", false});
  CHECK(d["estimate"] == true);
  CHECK(d["category_ms"].get<double>() == doctest::Approx(w.kernel_sum(true)));
  CHECK(d["category_kernels_per_step"].get<double>() == doctest::Approx(w.gemm_count()));
  CHECK(d["busy_removed_ms"].get<double>() == doctest::Approx(busy_removed));
  CHECK(d["launches_removed"].get<double>() == doctest::Approx(w.gemm_count()));
  CHECK(d["gaps_removed_ms"].get<double>() == doctest::Approx(gaps_removed));
  const double est = w.step() - busy_removed - gaps_removed;
  CHECK(d["estimated_step_ms"].get<double>() == doctest::Approx(est));
  CHECK(d["estimated_speedup"].get<double>() == doctest::Approx(w.step() / est));
  CHECK(d["estimated_img_per_s"].get<double>() == doctest::Approx(w.img_per_s() * w.step() / est));

  // Every launch gap closed: dataload + busy remain.
  d = what_if_removal_doc(p, {"", true});
  CHECK(d["gaps_removed_ms"].get<double>() == doctest::Approx(w.gaps()));
  CHECK(d["launches_removed"].get<double>() == doctest::Approx(w.launches()));
  CHECK(d["estimated_step_ms"].get<double>() == doctest::Approx(w.dataload() + w.busy()));

  // Both: dataload + what is left of the busy time.
  d = what_if_removal_doc(p, {"gemm/conv", true});
  CHECK(d["estimated_step_ms"].get<double>() == doctest::Approx(w.dataload() + w.busy() - busy_removed));

  // A category with no kernels in the window changes nothing.
  d = what_if_removal_doc(p, {"layout/copy", false});
  CHECK(d["estimated_step_ms"].get<double>() == doctest::Approx(w.step()));

  // The text says it is an estimate and shows the split.
  const auto text = what_if_removal_text(what_if_removal_doc(p, {"elementwise", false}));
  CHECK(text.find("ESTIMATE") != std::string::npos);
  CHECK(text.find("without the elementwise kernels") != std::string::npos);
}

TEST_CASE("profile what-if removals: a bad category lists the allowed ones; no trace or nothing to remove is refused") {
  const HandWindow w;
  const json p = profile_json(analyse(w.record()));
  const auto dir = std::filesystem::temp_directory_path() / "libreyolo_what_if_removal";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "profile.json") << p.dump();
    auto untraced = p;
    untraced["trace_collected"] = false;
    untraced["gpu_busy_ms_per_step"] = nullptr;
    std::ofstream(dir / "untraced.json") << untraced.dump();
  }
  std::ostringstream out, err;
  CHECK(run_what_if(dir / "profile.json", Removal{"gemm", false}, false, out, err) == 2);
  CHECK(err.str().find("unknown --remove-category 'gemm'; allowed: gemm/conv, elementwise, reduction/norm, layout/copy, other") !=
        std::string::npos);
  std::ostringstream out2, err2;
  CHECK(run_what_if(dir / "untraced.json", Removal{"", true}, false, out2, err2) == 2);
  CHECK(err2.str().find("needs a kernel trace") != std::string::npos);
  CHECK_THROWS_AS(what_if_removal_doc(p, Removal{}), libreyolo::ConfigError);
  std::ostringstream out3, err3;
  REQUIRE(run_what_if(dir / "profile.json", Removal{"", true}, true, out3, err3) == 0);
  const auto j = json::parse(out3.str());
  CHECK(j["estimate"] == true);
  CHECK(j["estimated_step_ms"].get<double>() == doctest::Approx(w.dataload() + w.busy()));
  std::filesystem::remove_all(dir);
}
