// Training-step benchmark: one fixed batch replayed without the dataloader (SPEC §2.4 method).
//   step_bench --model yolo9t|yolo9s|resnet18 --batch B --imgsz N --precision fp32|fp16|bf16
//              [--cudnn-benchmark 0|1] [--channels-last 0|1] [--detail TOP] [--warmup W] [--steps S]
// Prints one JSON line: min/median step ms over `--steps` timed steps after `--warmup`, the GPU kernel
// busy time per step of the same steps (profile::time_steps), kernels/step and peak VRAM; with
// --detail (default 12) also where the time goes: GPU ms, kernels and CPU ops per phase (forward =
// network, loss, backward, optimizer), kernel categories, the largest kernels and CPU operators; and
// for detection the loss alone (its forward + backward on the head outputs of one extra forward).
#include <libreyolo/families/resnet/network.hpp>
#include <libreyolo/families/yolo9/loss.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/step_timing.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include "bench_options.hpp"

#include <functional>
#include <iostream>

namespace ly = libreyolo;
using ly::profile::Phase;
using Outputs = std::vector<torch::Tensor>;

namespace {
struct Args {
  std::string model = "yolo9t", precision = "fp16";
  int batch = 8, imgsz = 640, warmup = 10, steps = 24, detail = 12;
  bool cudnn_benchmark = false, channels_last = false;
};

Args parse(int argc, char** argv) {
  Args a;
  bench::Options()
      .add("--model", &a.model)
      .add("--precision", &a.precision)
      .add("--batch", &a.batch)
      .add("--imgsz", &a.imgsz)
      .add("--warmup", &a.warmup)
      .add("--steps", &a.steps)
      .add("--detail", &a.detail)
      .add("--cudnn-benchmark", &a.cudnn_benchmark)
      .add("--channels-last", &a.channels_last)
      .parse(argc, argv);
  if (a.model != "yolo9t" && a.model != "yolo9s" && a.model != "resnet18" && a.model != "resnet34")
    throw std::invalid_argument("--model " + a.model + ": allowed yolo9t, yolo9s, resnet18, resnet34");
  if (a.precision != "fp32" && a.precision != "fp16" && a.precision != "bf16")
    throw std::invalid_argument("--precision " + a.precision + ": allowed fp32, fp16, bf16");
  return a;
}

// NHWC weights for every 4-d parameter (cuDNN's Tensor-Core layout).
void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  for (auto& p : m.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
}

// The detection targets: 6 boxes per image padded to 10 rows (class -1), in pixels.
torch::Tensor detection_targets(int batch, torch::Device dev) {
  auto t = torch::full({batch, 10, 5}, -1.0);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < 6; ++j) {
      float cx = 80.f + 80.f * j, cy = 100.f + 50.f * (b % 8), w = 40.f + 10.f * j, h = 60.f;
      t[b][j] = torch::tensor({float(j * 7 % 80), cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
    }
  return t.to(dev);
}
}  // namespace

int main(int argc, char** argv) try {
  auto a = parse(argc, argv);
  torch::manual_seed(0);
  const torch::Device dev = ly::compat::cuda_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  at::globalContext().setBenchmarkCuDNN(a.cudnn_benchmark);
  auto cfg = ly::parse_args({"amp=" + std::string(a.precision == "fp32" ? "false" : "true"),
                             "amp_dtype=" + std::string(a.precision == "bf16" ? "bfloat16" : "float16")});
  ly::precision::FamilyDefault prec;
  prec.setup(cfg, dev, true);

  std::shared_ptr<torch::nn::Module> net;
  std::function<Outputs(const torch::Tensor&)> forward;
  std::function<torch::Tensor(const Outputs&)> loss_of;
  auto x = torch::rand({a.batch, 3, a.imgsz, a.imgsz}, torch::TensorOptions().device(dev));
  if (a.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  const bool detect = a.model.rfind("yolo9", 0) == 0;
  if (detect) {
    auto y = ly::families::yolo9::Yolo9(ly::families::yolo9::Yolo9Options{a.model.substr(5), 80, 16});
    y->to(dev);
    net = y.ptr();
    auto loss = std::make_shared<ly::families::yolo9::DetectionLoss>(y->strides(), 80);
    auto t = detection_targets(a.batch, dev);
    forward = [y](const torch::Tensor& in) mutable { return y->forward(in); };
    loss_of = [loss, t](const Outputs& out) { return (*loss)(out, t).total; };
  } else {
    auto r = ly::resnet::ResNet(ly::resnet::ResNetOptions{std::stoi(a.model.substr(6)), 1000});
    r->to(dev);
    net = r.ptr();
    auto labels = torch::randint(0, 1000, {a.batch}, torch::TensorOptions().dtype(torch::kLong).device(dev));
    forward = [r](const torch::Tensor& in) mutable { return Outputs{r->forward(in)}; };
    loss_of = [labels](const Outputs& out) {
      return torch::nn::functional::cross_entropy(out[0].to(torch::kFloat32), labels);
    };
  }
  if (a.channels_last) to_channels_last(*net);
  ly::train::OptimizerOptions oo;
  ly::train::Optimizer opt(ly::train::make_param_groups(*net, 5e-4), oo);
  auto step = [&](ly::profile::StepPhases& ph) {
    torch::Tensor loss;
    {
      [[maybe_unused]] auto g = prec.autocast();
      ph.mark(Phase::forward);
      loss = loss_of(forward(x));
    }
    ph.mark(Phase::backward);
    prec.scale(loss).backward();
    ph.mark(Phase::optimizer);
    prec.step(opt);
    prec.update();
    opt.zero_grad();
  };
  ly::profile::StepPhases none;
  for (int i = 0; i < a.warmup; ++i) step(none);
  ly::compat::cuda_synchronize(dev);
  ly::compat::cuda_reset_peak(0);
  const auto t = ly::profile::time_steps(step, a.steps, dev, a.batch);
  nlohmann::json out = {{"model", a.model},         {"batch", a.batch},
                        {"imgsz", a.imgsz},         {"precision", prec.used().to_json()},
                        {"cudnn_benchmark", a.cudnn_benchmark}, {"channels_last", a.channels_last},
                        {"step_ms_min", t.min_ms}, {"step_ms_median", t.median_ms},
                        {"gpu_busy_ms", t.busy.gpu_busy_ms_per_step}, {"kernels_per_step", t.busy.kernels_per_step},
                        {"tensorcore_pct", t.busy.tensorcore_pct}, {"trace", t.traced},
                        {"peak_vram_mb", t.peak_vram_mb},   {"steps", a.steps},
                        {"device", ly::compat::cuda_available() ? "cuda" : "cpu"}, {"torch", ly::compat::torch_version()}};
  out["step_over_busy"] = t.busy.gpu_busy_ms_per_step > 0 ? t.min_ms / t.busy.gpu_busy_ms_per_step : 0.0;
  if (a.detail > 0) {
    out["breakdown"] = ly::profile::step_breakdown_json(t.busy, static_cast<size_t>(a.detail));
    if (detect) {
      // The loss alone: forward + backward of the loss on the saved head outputs (leaf tensors).
      Outputs heads;
      {
        torch::NoGradGuard ng;
        [[maybe_unused]] auto g = prec.autocast();
        for (auto& o : forward(x)) heads.push_back(o.detach().clone().requires_grad_(true));
      }
      auto loss_step = [&] {
        torch::Tensor l;
        {
          [[maybe_unused]] auto g = prec.autocast();
          l = loss_of(heads);
        }
        l.backward();
        for (auto& h : heads) h.mutable_grad() = torch::Tensor();
      };
      for (int i = 0; i < 3; ++i) loss_step();
      const auto lt = ly::profile::time_steps(loss_step, a.steps, dev, a.batch);
      out["loss_alone"] = {{"ms_min", lt.min_ms}, {"ms_median", lt.median_ms}, {"gpu_busy_ms", lt.busy.gpu_busy_ms_per_step},
                           {"kernels_per_step", lt.busy.kernels_per_step},
                           {"breakdown", ly::profile::step_breakdown_json(lt.busy, static_cast<size_t>(a.detail))}};
    }
  }
  std::cout << out.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "step_bench: " << e.what() << "\n";
  return 2;
}
