// `profile what-if` (profile/lenses.hpp) on hand-made profiles: the cuda_graph lever reads the run's
// graphs from its config, which holds true / false (the trainer's meta: graphs active) or "step" (as the
// cuda_graph key writes it), and the trainer's cuda_graph_step (whole steps recorded).
#include <libreyolo/profile/lenses.hpp>

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
