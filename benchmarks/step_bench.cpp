// Training-step benchmark: one fixed batch replayed without the dataloader (SPEC §2.4 method).
//   step_bench --model yolo9t|yolo9s|resnet18 --batch B --imgsz N --precision fp32|fp16|bf16
// Prints one JSON line: min/median step ms over `--steps` timed steps after `--warmup`, the GPU kernel
// busy time per step of the same steps (profile::time_steps), kernels/step and peak VRAM.
#include <libreyolo/families/resnet/network.hpp>
#include <libreyolo/families/yolo9/loss.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/step_timing.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>

namespace ly = libreyolo;

struct Args {
  std::string model = "yolo9t", precision = "fp16";
  int batch = 8, imgsz = 640, warmup = 10, steps = 24;
};

static Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--precision") a.precision = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--imgsz") a.imgsz = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--steps") a.steps = std::stoi(v);
    else throw std::invalid_argument("unknown option " + k);
  }
  return a;
}

int main(int argc, char** argv) {
  auto a = parse(argc, argv);
  torch::manual_seed(0);
  const torch::Device dev = ly::compat::cuda_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  auto cfg = ly::parse_args({"amp=" + std::string(a.precision == "fp32" ? "false" : "true"),
                             "amp_dtype=" + std::string(a.precision == "bf16" ? "bfloat16" : "float16")});
  ly::precision::FamilyDefault prec;
  prec.setup(cfg, dev, true);

  std::shared_ptr<torch::nn::Module> net;
  std::function<torch::Tensor()> forward_loss;
  auto x = torch::rand({a.batch, 3, a.imgsz, a.imgsz}, torch::TensorOptions().device(dev));
  if (a.model.rfind("yolo9", 0) == 0) {
    auto y = ly::families::yolo9::Yolo9(ly::families::yolo9::Yolo9Options{a.model.substr(5), 80, 16});
    y->to(dev);
    net = y.ptr();
    // 6 boxes per image, padded to 10 rows (class -1), in pixels.
    auto t = torch::full({a.batch, 10, 5}, -1.0);
    for (int b = 0; b < a.batch; ++b)
      for (int j = 0; j < 6; ++j) {
        float cx = 80.f + 80.f * j, cy = 100.f + 50.f * (b % 8), w = 40.f + 10.f * j, h = 60.f;
        t[b][j] = torch::tensor({float(j * 7 % 80), cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
      }
    t = t.to(dev);
    auto loss = std::make_shared<ly::families::yolo9::DetectionLoss>(y->strides(), 80);
    forward_loss = [y, t, loss, x, &prec]() mutable {
      [[maybe_unused]] auto g = prec.autocast();
      return (*loss)(y->forward(x), t).total;
    };
  } else {
    auto r = ly::resnet::ResNet(ly::resnet::ResNetOptions{std::stoi(a.model.substr(6)), 1000});
    r->to(dev);
    net = r.ptr();
    auto labels = torch::randint(0, 1000, {a.batch}, torch::TensorOptions().dtype(torch::kLong).device(dev));
    forward_loss = [r, labels, x, &prec]() mutable {
      [[maybe_unused]] auto g = prec.autocast();
      return torch::nn::functional::cross_entropy(r->forward(x).to(torch::kFloat32), labels);
    };
  }
  ly::train::OptimizerOptions oo;
  ly::train::Optimizer opt(ly::train::make_param_groups(*net, 5e-4), oo);
  auto step = [&] {
    auto loss = forward_loss();
    prec.scale(loss).backward();
    prec.step(opt);
    prec.update();
    opt.zero_grad();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  ly::compat::cuda_synchronize(dev);
  ly::compat::cuda_reset_peak(0);
  const auto t = ly::profile::time_steps(step, a.steps, dev, a.batch);
  nlohmann::json out = {{"model", a.model},         {"batch", a.batch},
                        {"imgsz", a.imgsz},         {"precision", prec.used().to_json()},
                        {"step_ms_min", t.min_ms}, {"step_ms_median", t.median_ms},
                        {"gpu_busy_ms", t.busy.gpu_busy_ms_per_step}, {"kernels_per_step", t.busy.kernels_per_step},
                        {"tensorcore_pct", t.busy.tensorcore_pct}, {"trace", t.traced},
                        {"peak_vram_mb", t.peak_vram_mb},   {"steps", a.steps},
                        {"device", ly::compat::cuda_available() ? "cuda" : "cpu"}, {"torch", ly::compat::torch_version()}};
  out["step_over_busy"] = t.busy.gpu_busy_ms_per_step > 0 ? t.min_ms / t.busy.gpu_busy_ms_per_step : 0.0;
  std::cout << out.dump() << std::endl;
  return 0;
}
