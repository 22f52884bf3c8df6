// CUDA-graph speedup, one arm per process (SPEC §2.4 method): the same saved initial state, one real
// batch replayed without the dataloader, fastest of --steps timed steps after --warmup steps (the graph
// arm captures during warm-up), then the same steps again under Kineto for the GPU kernel busy time.
//   graph_speedup --arm eager|graph --model resnet18|yolo9t --precision fp16|fp32 --state FILE
// Prints one JSON line. Peak VRAM covers warm-up (and so the capture) and the timed steps.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/core/memory_format.hpp>
#include <libreyolo/families/resnet/network.hpp>
#include <libreyolo/families/yolo9/loss.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/collector.hpp>
#include <libreyolo/profile/step_timing.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include "../bench_options.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>

namespace ly = libreyolo;

namespace {
struct Args {
  std::string arm = "eager", model = "yolo9t", precision = "fp16", state;
  int warmup = 10, steps = 24;
  bool nhwc = false;  // --nhwc 1: channels-last weights and input, cuDNN autotuning (the trainer's CUDA defaults)
};

Args parse(int argc, char** argv) {
  Args a;
  bench::Options()
      .add("--arm", &a.arm)
      .add("--model", &a.model)
      .add("--precision", &a.precision)
      .add("--state", &a.state)
      .add("--warmup", &a.warmup)
      .add("--steps", &a.steps)
      .add("--nhwc", &a.nhwc)
      .parse(argc, argv);
  if (a.arm != "eager" && a.arm != "graph") throw std::invalid_argument("--arm " + a.arm + ": allowed eager, graph");
  if (a.model != "resnet18" && a.model != "yolo9t") throw std::invalid_argument("--model " + a.model + ": allowed resnet18, yolo9t");
  if (a.precision != "fp16" && a.precision != "fp32") throw std::invalid_argument("--precision " + a.precision + ": allowed fp16, fp32");
  if (a.state.empty()) a.state = "graph_speedup_" + a.model + ".state";
  return a;
}

// The first arm to run writes the initial weights; every later arm loads them (same start state).
void same_state(torch::nn::Module& net, const std::string& path) {
  std::vector<torch::Tensor> state;
  for (auto& p : net.parameters()) state.push_back(p);
  for (auto& b : net.buffers()) state.push_back(b);
  if (!std::filesystem::exists(path)) {
    torch::save(state, path);
    return;
  }
  std::vector<torch::Tensor> saved;
  torch::load(saved, path);
  if (saved.size() != state.size()) throw std::runtime_error(path + ": saved state does not match the network");
  torch::NoGradGuard ng;
  for (size_t i = 0; i < state.size(); ++i) state[i].copy_(saved[i]);
}

// The arm: `Capture` is Eager or CudaGraph<>; `loss_of(out)` is the family's eager loss.
template <class Capture, class Net, class LossFn>
nlohmann::json run_arm(const Args& a, Net net, LossFn loss_of, const torch::Tensor& x, torch::Device dev) {
  auto cfg = ly::parse_args({"amp=" + std::string(a.precision == "fp32" ? "false" : "true"), "amp_dtype=float16",
                             "cuda_graph=true", "device=cuda"});
  at::globalContext().setBenchmarkCuDNN(a.nhwc);
  if (a.nhwc) ly::to_channels_last(*net);
  ly::precision::FamilyDefault prec;
  prec.set_capture_active(Capture::graphs);
  prec.setup(cfg, dev, true);
  Capture capture;
  capture.setup(cfg, dev);
  ly::train::Optimizer opt(ly::train::make_param_groups(*net, 5e-4), ly::train::OptimizerOptions{});
  const torch::Tensor input = a.nhwc ? ly::as_channels_last(x) : x;
  auto step = [&] {
    torch::Tensor loss;
    {
      [[maybe_unused]] auto g = prec.autocast();
      loss = loss_of(capture.forward(net, input));
    }
    prec.scale(loss).backward();
    prec.step(opt);
    prec.update();
    opt.zero_grad();
  };
  ly::compat::cuda_synchronize(dev);
  ly::compat::cuda_reset_peak(0);
  for (int i = 0; i < a.warmup; ++i) step();
  ly::compat::cuda_synchronize(dev);
  const auto t = ly::profile::time_steps(step, a.steps, dev, static_cast<int>(x.size(0)));
  return {{"arm", a.arm},
          {"model", a.model},
          {"precision", a.precision},
          {"nhwc", a.nhwc},
          {"batch", x.size(0)},
          {"imgsz", x.size(2)},
          {"step_ms_min", t.min_ms},
          {"step_ms_median", t.median_ms},
          {"gpu_busy_ms", t.busy.gpu_busy_ms_per_step},
          {"kernels_per_step", t.busy.kernels_per_step},
          {"peak_vram_mb", t.peak_vram_mb},
          {"step_over_busy", t.busy.gpu_busy_ms_per_step > 0 ? t.min_ms / t.busy.gpu_busy_ms_per_step : 0.0},
          {"capture", capture.report()},
          {"torch", ly::compat::torch_version()}};
}

template <class Capture>
nlohmann::json run_model(const Args& a, torch::Device dev) {
  torch::manual_seed(0);
  if (a.model == "yolo9t") {
    auto y = ly::families::yolo9::Yolo9(ly::families::yolo9::Yolo9Options{"t", 80, 16});
    y->to(dev);
    same_state(*y, a.state);
    const int64_t batch = 8;
    torch::manual_seed(1);
    auto x = torch::rand({batch, 3, 640, 640}).to(dev);
    // 6 boxes per image, padded to 10 rows (class -1), in pixels.
    auto t = torch::full({batch, 10, 5}, -1.0);
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < 6; ++j) {
        float cx = 80.f + 80.f * j, cy = 100.f + 50.f * (b % 8), w = 40.f + 10.f * j, h = 60.f;
        t[b][j] = torch::tensor({float(j * 7 % 80), cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
      }
    t = t.to(dev);
    auto loss = std::make_shared<ly::families::yolo9::DetectionLoss>(y->strides(), 80);
    return run_arm<Capture>(a, y, [loss, t](const std::vector<torch::Tensor>& out) { return (*loss)(out, t).total; },
                            x, dev);
  }
  auto r = ly::resnet::ResNet(ly::resnet::ResNetOptions{18, 1000});
  r->to(dev);
  same_state(*r, a.state);
  torch::manual_seed(1);
  auto x = torch::rand({16, 3, 224, 224}).to(dev);
  auto labels = torch::randint(0, 1000, {16}, torch::kLong).to(dev);
  return run_arm<Capture>(a, r, [labels](const torch::Tensor& logits) {
    return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), labels);
  }, x, dev);
}
}  // namespace

int main(int argc, char** argv) try {
  auto a = parse(argc, argv);
  if (!ly::compat::cuda_available()) {
    std::cerr << "graph_speedup: needs a CUDA device (this build/run has none)\n";
    return 2;
  }
  const torch::Device dev(torch::kCUDA, 0);
  auto out = a.arm == "graph" ? run_model<ly::capture::CudaGraph<>>(a, dev) : run_model<ly::capture::Eager>(a, dev);
  std::cout << out.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "graph_speedup: " << e.what() << "\n";
  return 1;
}
