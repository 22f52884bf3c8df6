// Inference CUDA graphs on a GPU (suite "gpu"; skipped without CUDA): eval/graphed_forward.hpp's graphed
// forward gives the predictions of the eager forward (boxes and scores within 1e-5, the same count and
// classes) for YOLOv9-t and RT-DETR-r18 (its decoder inside the graph) on synthetic letterboxed images,
// one graph for every image of one shape and a second for a batch of two.
#include <doctest/doctest.h>
#include <libreyolo/eval/graphed_forward.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"

#include <string>
#include <type_traits>
#include <vector>

namespace ly = libreyolo;

namespace {

// Three 480x640 patterned images letterboxed to 640, as predict feeds them: [1, 3, 640, 640] each.
std::vector<torch::Tensor> letterboxed_inputs(torch::Device dev) {
  std::vector<torch::Tensor> xs;
  for (int b = 0; b < 3; ++b) {
    ly::data::Image img(480, 640);
    for (size_t i = 0; i < img.px.size(); ++i)
      img.px[i] = static_cast<uint8_t>(((i / 3) % 640 * (b + 1) + (i / 1920) * (7 + b) + (i % 3) * 60) & 0xff);
    ly::data::DetBoxes none;
    auto in = ly::data::letterbox(img, 640, 640, none, nullptr, /*scaleup=*/false);
    xs.push_back(ly::data::to_chw_tensor(in).unsqueeze(0).to(dev).to(torch::kFloat32).div(255.0));
  }
  return xs;
}

template <class F>
void graphed_equals_eager(F family) {
  LRY_REQUIRE_CUDA();
  const torch::Device dev(torch::kCUDA, 0);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  torch::manual_seed(0);
  family.restore({{"names", std::vector<std::string>(80, "object")}});  // 80 classes, as COCO
  auto net = family.make_network();
  net->to(dev);
  net->eval();
  torch::NoGradGuard ng;
  ly::tasks::DecodeOptions dec;
  dec.conf = 0.001;  // random weights: a low threshold keeps boxes to compare
  auto inputs = letterboxed_inputs(dev);
  inputs.push_back(torch::cat({inputs[0], inputs[2]}));  // a batch of two: a second shape, a second graph
  ly::eval::GraphedForward<decltype(net)> eager(net, dev, false, "test");
  ly::eval::GraphedForward<decltype(net)> graphed(net, dev, true, "test");
  size_t compared = 0, raw_compared = 0;
  for (int pass = 0; pass < 2; ++pass)  // the second pass replays the recorded graphs
    for (size_t i = 0; i < inputs.size(); ++i) {
      CAPTURE(pass);
      CAPTURE(i);
      auto raw_want = eager(inputs[i]);
      auto raw_got = graphed(inputs[i]);
      REQUIRE(graphed.active());
      // The raw network outputs where they are tensors (YOLOv9: one map per level), element by element:
      // with random weights the decoded list may be empty (YOLOv9's prior-initialised class biases keep
      // every score under 0.001), and the outputs are then what is compared.
      if constexpr (std::is_same_v<decltype(raw_want), std::vector<torch::Tensor>>) {
        REQUIRE(raw_want.size() == raw_got.size());
        for (size_t k = 0; k < raw_want.size(); ++k) {
          const auto w = raw_want[k].to(torch::kFloat64), g = raw_got[k].to(torch::kFloat64);
          REQUIRE(w.sizes() == g.sizes());
          CHECK(((w - g).abs() <= 1e-5 * (1 + w.abs())).all().template item<bool>());
          raw_compared += static_cast<size_t>(w.numel());
        }
      }
      const std::vector<torch::Tensor> want = family.decode(raw_want, dec);
      const std::vector<torch::Tensor> got = family.decode(raw_got, dec);
      REQUIRE(want.size() == got.size());
      for (size_t b = 0; b < want.size(); ++b) {
        const torch::Tensor w = want[b].to(torch::kCPU).to(torch::kFloat64), g = got[b].to(torch::kCPU).to(torch::kFloat64);
        REQUIRE(w.size(0) == g.size(0));
        if (w.size(0) == 0) continue;
        compared += static_cast<size_t>(w.size(0));
        CHECK((w.narrow(1, 0, 5) - g.narrow(1, 0, 5)).abs().max().item<double>() <= 1e-5);  // boxes, score
        CHECK(torch::equal(w.select(1, 5), g.select(1, 5)));                               // classes
      }
    }
  CHECK(compared + raw_compared > 0);  // something was compared: boxes, or the raw outputs
  MESSAGE("compared ", compared, " decoded boxes and ", raw_compared, " raw output values");
  CHECK(graphed.graphs() == 2);  // [1, 3, 640, 640] and [2, 3, 640, 640]
  CHECK(graphed.fallback().empty());
}

}  // namespace

LRY_GPU_SUITE {
  TEST_CASE("gpu inference graphs: YOLOv9-t graphed predictions equal eager") { graphed_equals_eager(ly::Yolo9Family("t")); }
  TEST_CASE("gpu inference graphs: RT-DETR-r18 graphed predictions (decoder in the graph) equal eager") {
    graphed_equals_eager(ly::RTDETRFamily("r18"));
  }
  TEST_CASE("gpu profile infer --trace: kernels per forward and their busy time, eager and graphed, one launch per replay") {
    LRY_REQUIRE_CUDA();
    ly::eval::InferOptions o;
    o.batch = 1, o.imgsz = 128, o.device = "cuda", o.cuda_graph = true, o.repeat = 3, o.warmup = 1, o.trace = 4;
    // The caller's cuDNN autotuning flag survives the measurement (which runs with it off: no --cudnn-benchmark).
    const bool before = at::globalContext().benchmarkCuDNN();
    at::globalContext().setBenchmarkCuDNN(true);
    const auto d = ly::Model("yolo9t").profile_infer(o);
    CHECK(at::globalContext().benchmarkCuDNN());
    CHECK(d["cudnn_benchmark"] == false);
    at::globalContext().setBenchmarkCuDNN(before);
    INFO(d.dump());
    CHECK(d["trace_collected"] == true);
    CHECK(d["host_timings_only"] == false);
    REQUIRE(d["modes"].size() == 2);
    const auto& e = d["modes"][0]["kernels"];
    const auto& g = d["modes"][1]["kernels"];
    REQUIRE(e.is_object());
    REQUIRE(g.is_object());
    for (const auto* k : {&e, &g}) {
      CHECK((*k)["forwards"] == 4);
      CHECK((*k)["kernels_per_forward"].get<double>() >= 50);  // YOLOv9-t's forward is hundreds of kernels
      CHECK((*k)["busy_ms"].get<double>() > 0);
      CHECK((*k)["busy_ms"].get<double>() <= (*k)["kernel_sum_ms"].get<double>() + 1e-9);
    }
    // The replay runs the eager forward's kernels (the same network, the same decode), from one launch.
    CHECK(g["kernels_per_forward"].get<double>() == doctest::Approx(e["kernels_per_forward"].get<double>()).epsilon(0.1));
    CHECK(g["launches_per_step"].get<double>() < 0.1 * e["launches_per_step"].get<double>());
  }
}
