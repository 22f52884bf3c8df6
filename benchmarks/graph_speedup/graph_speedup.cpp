// CUDA-graph speedup, one arm per process (SPEC §2.4 method): the same saved initial state, one real
// batch replayed without the dataloader, fastest of --steps timed steps after --warmup steps (the graph
// arm captures during warm-up), then the same steps again under Kineto for the GPU kernel busy time.
// The step arm is cuda_graph=step: forward, loss, backward, unscale, optimizer and scaler update in one
// graph per batch shape (the trainer's train_whole_step without EMA and clipping, which the other arms
// lack too); a family whose loss is not fixed-shape runs the graph arm's loop there (network only).
//   graph_speedup --arm eager|graph|step --model NAME --precision fp16|fp32 --state FILE [--batch B --imgsz S --classes C]
//                 [--detail N]  (where the time goes: GPU ms, kernels and CPU operators per phase, the N largest)
//                 [--accumulate N]  (gradient accumulation: a timed step is a window of N micro-batches; per micro-batch output)
// NAME is any registered model (yolo9t, resnet18, ...). The batch is real: the family's task writes its
// synthetic set, the family's dataset loads and collates it (augmentation off), and the network is built
// for C classes (default: 80 for detectors and point detectors, 1000 for classifiers, 150 for semantic
// segmenters, as their COCO / ImageNet / ADE20K heads). The
// family's capture region is the one the trainer graphs; the loss is the family's own, eager.
// Prints one JSON line. Peak VRAM covers warm-up (and so the capture) and the timed steps.
#include <ATen/CPUGeneratorImpl.h>
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/capture/graphed_callable.hpp>
#include <libreyolo/core/cudnn.hpp>
#include <libreyolo/core/memory_format.hpp>
#include <libreyolo/families/registry.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/collector.hpp>
#include <libreyolo/profile/step_timing.hpp>
#include <libreyolo/train/clip.hpp>
#include <libreyolo/train/device_step.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include "../bench_options.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <iostream>
#include <type_traits>

namespace ly = libreyolo;

namespace {
struct Args {
  std::string arm = "eager", model = "yolo9t", precision = "fp16", state;
  int warmup = 10, steps = 24, detail = 0;  // detail N: where a step's time goes, N largest entries per list
  int batch = 0, imgsz = 0, classes = 0;  // 0: the task's default (detect 8 / 640 / 80, classify 16 / 224 / 1000, semantic 16 / 224 / 150, point 16 / 224 / 80)
  std::string device = "cuda";  // cpu: a smoke test of the eager arm (no graphs, no kernel times)
  // The memory format and cuDNN's algorithm choice: -1 = the trainer's default (TrainConfig: channels_last,
  // cudnn_autotune), 0/1 = off/on. --nhwc 1 is the older spelling of --channels-last 1 --cudnn-benchmark 1.
  // --cudnn-deterministic 1: cuDNN picks among deterministic engines only (heuristics or autotuning).
  // --cudnn-heuristic instant|b: the trainer's cudnn_heuristic (core/cudnn.hpp), set in this process before the
  // first convolution; "" (default) leaves the environment as it is (TORCH_CUDNN_USE_HEURISTIC_MODE_B=1 set
  // outside is mode B). The output's "cudnn_heuristic" says which was in effect.
  std::string cudnn_heuristic;
  // --arm grads' loss: probe (default) = a fixed random linear function of the network's raw outputs, so the
  // gradients differ only by arithmetic; family = the family's training loss, whose assignment of targets can
  // flip between fp16 and fp32 forwards on random weights (then every gradient differs, by ~100%).
  std::string grads_loss = "probe";
  int channels_last = -1, cudnn_benchmark = -1;
  bool cudnn_deterministic = false, nhwc = false;
  // --accumulate N (> 1): one timed step is a window of N micro-batches of the same batch, each loss times 1/N,
  // the optimizer once after the last (the trainer's gradient accumulation, train/accumulation.hpp); the step arm
  // runs the trainer's two step kinds (accumulating, stepping). The times and kernel busy printed are per
  // micro-batch (the window's / N); "window_ms_min" is the whole window's.
  int accumulate = 1;
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
      .add("--channels-last", &a.channels_last)
      .add("--cudnn-benchmark", &a.cudnn_benchmark)
      .add("--cudnn-deterministic", &a.cudnn_deterministic)
      .add("--cudnn-heuristic", &a.cudnn_heuristic)
      .add("--batch", &a.batch)
      .add("--imgsz", &a.imgsz)
      .add("--classes", &a.classes)
      .add("--device", &a.device)
      .add("--detail", &a.detail)
      .add("--grads-loss", &a.grads_loss)
      .add("--accumulate", &a.accumulate)
      .parse(argc, argv);
  if (a.accumulate < 1) throw std::invalid_argument("--accumulate " + std::to_string(a.accumulate) + ": allowed 1 or more");
  if (a.arm != "eager" && a.arm != "graph" && a.arm != "step" && a.arm != "grads")
    throw std::invalid_argument("--arm " + a.arm + ": allowed eager, graph, step, grads");
  if (a.grads_loss != "probe" && a.grads_loss != "family")
    throw std::invalid_argument("--grads-loss " + a.grads_loss + ": allowed probe, family");
  if (a.device != "cuda" && a.device != "cpu") throw std::invalid_argument("--device " + a.device + ": allowed cuda, cpu");
  if (a.device == "cpu" && a.arm == "graph") throw std::invalid_argument("--arm graph needs --device cuda");
  // --arm step on the CPU: the step path without a graph (a smoke test of the device-state step).
  if (a.precision != "fp16" && a.precision != "fp32") throw std::invalid_argument("--precision " + a.precision + ": allowed fp16, fp32");
  if (a.state.empty()) a.state = "graph_speedup_" + a.model + ".state";
  for (auto [name, v] : {std::pair{"--channels-last", a.channels_last}, std::pair{"--cudnn-benchmark", a.cudnn_benchmark}})
    if (v < -1 || v > 1) throw std::invalid_argument(std::string(name) + " " + std::to_string(v) + ": allowed -1 (the trainer's default), 0, 1");
  if (!a.cudnn_heuristic.empty() && a.cudnn_heuristic != "instant" && a.cudnn_heuristic != "b")
    throw std::invalid_argument("--cudnn-heuristic " + a.cudnn_heuristic + ": allowed instant, b");
  if (a.nhwc) a.channels_last = a.cudnn_benchmark = 1;
  const ly::TrainConfig defaults;
  if (a.channels_last < 0) a.channels_last = defaults.channels_last ? 1 : 0;
  if (a.cudnn_benchmark < 0) a.cudnn_benchmark = ly::cudnn_autotune(defaults) ? 1 : 0;
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

// The arm: `Capture` is Eager, CudaGraph<> or CudaGraph<scope::step>; `loss_of(out)` is the family's eager loss; `Region` the
// family's capture region.
// `make_opt(cfg)` builds the family's optimizer as the trainer does; gradients are clipped as the trainer
// clips them (the family's clip_grad_norm, after unscaling) in every arm.
template <class Capture, class Region, class Net, class LossFn, class MakeOpt, class StepArm = std::nullptr_t>
nlohmann::json run_arm(const Args& a, ly::TrainConfig cfg, Net net, LossFn loss_of, MakeOpt make_opt,
                       const torch::Tensor& x, torch::Device dev, StepArm step_arm = nullptr) {
  for (const auto& kv : {"amp=" + std::string(a.precision == "fp32" ? "false" : "true"), std::string("amp_dtype=float16"),
                         std::string("cuda_graph=") + (a.arm == "step" ? "step" : "true"), "device=" + a.device}) {
    const auto eq = kv.find('=');
    ly::set_key(cfg, kv.substr(0, eq), kv.substr(eq + 1));
  }
  const bool nhwc = a.channels_last == 1;
  at::globalContext().setBenchmarkCuDNN(a.cudnn_benchmark == 1);
  at::globalContext().setDeterministicCuDNN(a.cudnn_deterministic);
  if (!a.cudnn_heuristic.empty()) ly::set_cudnn_heuristic(a.cudnn_heuristic);
  if (nhwc) ly::to_channels_last(*net);
  ly::precision::FamilyDefault prec;
  prec.set_capture_active(Capture::graphs);
  prec.setup(cfg, dev, true);
  Capture capture;
  capture.setup(cfg, dev);
  std::unique_ptr<ly::train::Optimizer> opt_owner = make_opt(cfg);
  ly::train::Optimizer& opt = *opt_owner;
  const double clip = cfg.clip_grad_norm;
  const torch::Tensor input = nhwc ? ly::as_channels_last(x) : x;
  // Phases for --detail: forward = the network and the family's loss (assigner included), backward, optimizer
  // (the step arm's whole-step graph is one phase).
  const int n_acc = a.accumulate;
  std::function<void(ly::profile::StepPhases&)> step = [&](ly::profile::StepPhases& ph) {
    for (int k = 0; k < n_acc; ++k) {
      torch::Tensor loss;
      {
        [[maybe_unused]] auto g = prec.autocast();
        ph.mark(ly::profile::Phase::forward);
        loss = loss_of(capture.forward(net, input, Region{}));
        if (n_acc > 1) loss = loss * ly::train::loss_factor(n_acc);
      }
      ph.mark(ly::profile::Phase::backward);
      prec.scale(loss).backward();
    }
    ph.mark(ly::profile::Phase::optimizer);
    if (clip > 0) {
      prec.unscale_(opt);
      ly::train::clip_grad_norm(opt.params(), clip);
    }
    prec.step(opt);
    prec.update();
    opt.zero_grad();
  };
  if constexpr (!std::is_same_v<StepArm, std::nullptr_t>) {
    if (a.arm == "step") {
      step_arm(capture, prec, opt, net, clip, step);  // replaces `step` when the family's step is capturable
    }
  }
  ly::compat::cuda_synchronize(dev);
  if (dev.is_cuda()) ly::compat::cuda_reset_peak(0);
  ly::profile::StepPhases none;
  for (int i = 0; i < a.warmup; ++i) step(none);
  ly::compat::cuda_synchronize(dev);
  auto t = ly::profile::time_steps(step, a.steps, dev, static_cast<int>(x.size(0)) * n_acc);
  const double window_ms_min = t.min_ms;
  if (n_acc > 1) {  // per micro-batch
    t.min_ms /= n_acc;
    t.median_ms /= n_acc;
    t.busy.gpu_busy_ms_per_step /= n_acc;
    t.busy.kernels_per_step /= n_acc;
  }
  nlohmann::json out = {{"arm", a.arm},
          {"model", a.model},
          {"precision", a.precision},
          {"channels_last", nhwc},
          {"cudnn_benchmark", a.cudnn_benchmark == 1},
          {"cudnn_deterministic", a.cudnn_deterministic},
          {"cudnn_heuristic", std::getenv(ly::cudnn_heuristic_env) ? "b" : "instant"},
          {"batch", x.size(0)},
          {"imgsz", x.size(2)},
          {"accumulate", n_acc},
          {"window_ms_min", window_ms_min},
          {"step_ms_min", t.min_ms},
          {"step_ms_median", t.median_ms},
          {"gpu_busy_ms", t.busy.gpu_busy_ms_per_step},
          {"kernels_per_step", t.busy.kernels_per_step},
          {"peak_vram_mb", t.peak_vram_mb},
          {"step_over_busy", t.busy.gpu_busy_ms_per_step > 0 ? t.min_ms / t.busy.gpu_busy_ms_per_step : 0.0},
          {"capture", capture.report()},
          {"optimizer_fused", opt.device_fused()},
          {"optimizer_multi_tensor", opt.device_multi_tensor()},
          {"torch", ly::compat::torch_version()}};
  if (a.detail > 0) out["breakdown"] = ly::profile::step_breakdown_json(t.busy, static_cast<size_t>(a.detail));
  return out;
}

// --arm grads: how far one step's gradients under the chosen arithmetic (--precision, --channels-last and the
// cuDNN flags) are from a reference computed in the same process on the same weights and batch: fp32, NCHW,
// TF32 off for the convolutions (fp32 accumulation). Per parameter the relative error |g - g_ref| / |g_ref|; summarised
// over the convolution weights (4-d parameters) and over all, with the worst ones named. The fp16 loss is scaled
// before backward and the gradients unscaled, as a GradScaler does: from 2^12, halved while a gradient is
// not finite (a fixed 2^12 overflowed on random weights); the scale used is reported.
template <class Net, class LossFn>
nlohmann::json run_grads(const Args& a, ly::TrainConfig cfg, Net net, LossFn loss_of, const torch::Tensor& x, torch::Device dev) {
  const bool half = a.precision == "fp16", nhwc = a.channels_last == 1;
  const auto params = net->named_parameters(true);
  auto grads = [&](bool reduced, double scale) -> std::pair<double, std::vector<torch::Tensor>> {
    for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss;
    if (reduced) {
      ly::set_key(cfg, "amp", half ? "true" : "false");
      ly::set_key(cfg, "amp_dtype", "float16");
      ly::precision::FamilyDefault prec;
      prec.setup(cfg, dev, true);
      [[maybe_unused]] auto g = prec.autocast();
      loss = loss_of(net->forward(nhwc ? ly::as_channels_last(x) : x));
    } else {
      loss = loss_of(net->forward(x));
    }
    (loss.to(torch::kFloat32) * scale).backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : params) out.push_back(p.value().grad().defined() ? p.value().grad().detach().to(torch::kFloat64) / scale : torch::Tensor());
    return std::make_pair(loss.item<double>(), out);
  };
  // The reference: fp32, NCHW, TF32 off.
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);  // matmuls: PyTorch's default is already no TF32
  const std::pair<double, std::vector<torch::Tensor>> r_ref = grads(false, 1.0);
  const double loss_ref = r_ref.first;
  const std::vector<torch::Tensor>& ref = r_ref.second;
  at::globalContext().setAllowTF32CuDNN(tf32);
  if (nhwc) ly::to_channels_last(*net);
  auto all_finite = [](const std::vector<torch::Tensor>& g) {
    for (const auto& t : g)
      if (t.defined() && !torch::isfinite(t).all().item<bool>()) return false;
    return true;
  };
  double scale = half ? 4096.0 : 1.0;
  std::pair<double, std::vector<torch::Tensor>> r_got = grads(true, scale);
  while (half && std::isfinite(r_got.first) && !all_finite(r_got.second) && scale > 0x1p-24) {
    scale /= 2;
    r_got = grads(true, scale);
  }
  const double loss = r_got.first;
  const std::vector<torch::Tensor>& got = r_got.second;
  std::vector<std::pair<double, size_t>> conv, all;
  bool finite = true;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!ref[i].defined() || !got[i].defined()) continue;
    const double n = ref[i].norm().item<double>();
    if (!(n > 0)) continue;
    const double e = (got[i].contiguous() - ref[i].contiguous()).norm().item<double>() / n;
    finite = finite && std::isfinite(e);
    all.emplace_back(e, i);
    if (ref[i].dim() == 4) conv.emplace_back(e, i);
  }
  auto summary = [&](std::vector<std::pair<double, size_t>> v) {
    nlohmann::json j;
    if (v.empty()) return j;
    std::sort(v.begin(), v.end());
    double mean = 0;
    for (const auto& [e, i] : v) mean += e / static_cast<double>(v.size());
    j = {{"n", v.size()}, {"median", v[v.size() / 2].first}, {"p90", v[v.size() * 9 / 10].first}, {"max", v.back().first}, {"mean", mean}};
    for (size_t k = 0; k < v.size() && k < 8; ++k) {
      const auto& [e, i] = v[v.size() - 1 - k];
      j["worst"].push_back({{"name", params[i].key()}, {"shape", ref[i].sizes().vec()}, {"rel_err", e}});
    }
    return j;
  };
  nlohmann::json per_conv = nlohmann::json::object();
  for (const auto& [e, i] : conv) per_conv[params[i].key()] = e;
  return {{"arm", "grads"}, {"model", a.model}, {"precision", a.precision}, {"channels_last", nhwc},
          {"cudnn_benchmark", a.cudnn_benchmark == 1}, {"cudnn_deterministic", a.cudnn_deterministic},
          {"cudnn_heuristic", std::getenv(ly::cudnn_heuristic_env) ? "b" : "instant"}, {"batch", x.size(0)},
          {"imgsz", x.size(2)}, {"grads_loss", a.grads_loss}, {"loss_ref", loss_ref}, {"loss", loss}, {"loss_scale", scale}, {"finite", finite},
          {"conv_weights", summary(conv)}, {"all_params", summary(all)}, {"per_conv_weight", per_conv},
          {"torch", ly::compat::torch_version()}};
}

template <class Capture, class P>
nlohmann::json run_family(const Args& a, P p, torch::Device dev) {
  constexpr bool detect = P::task_info::task == ly::Task::detect;
  const int batch = a.batch > 0 ? a.batch : (detect ? 8 : 16);
  const int imgsz = a.imgsz > 0 ? a.imgsz : (detect ? 640 : 224);
  // The usual benchmark heads: COCO's 80 (detect, point), ImageNet's 1000 (classify), ADE20K's 150 (semantic:
  // the logits are upsampled to the full image before the loss, so the class count sets most of the memory).
  constexpr ly::Task task = P::task_info::task;
  const int classes = a.classes > 0 ? a.classes
                                    : task == ly::Task::classify ? 1000 : task == ly::Task::semantic ? 150 : 80;
  // One real batch from the task's synthetic set (written once per state file, reused by every arm).
  const std::filesystem::path data_dir = a.state + ".data";
  ly::data::SynthOptions o;
  o.out = data_dir;
  o.images = std::max(2 * batch, 16);  // classification: one train and one val image per class at least
  o.imgsz = imgsz;
  o.classes = 8;
  o.seed = 0;
  if (!std::filesystem::exists(data_dir)) P::synth(o);
  // The family's recipe (optimizer, learning rate, clipping, pipeline) as the trainer applies it, augmentation off.
  auto cfg = ly::parse_args({"data=" + P::synth_data(data_dir).string(), "imgsz=" + std::to_string(imgsz), "workers=0",
                             "mosaic=0", "mixup=0", "fliplr=0", "hsv_h=0", "hsv_s=0", "hsv_v=0", "scale=0",
                             "translate=0", "seed=0"});
  ly::train::apply_family_overrides(p, cfg);
  p.setup(cfg);
  p.restore({{"names", std::vector<std::string>(static_cast<size_t>(classes), "c")}});
  const auto ds = p.train_set();
  std::mt19937_64 rng(0);
  std::vector<typename P::Dataset::Sample> samples;
  for (int i = 0; i < batch; ++i) samples.push_back(ds->get(static_cast<size_t>(i) % ds->size(), rng, 0));
  const auto b = P::to_device(P::Dataset::collate(std::move(samples)), dev);
  torch::manual_seed(0);
  auto net = p.make_network();
  net->to(dev);
  same_state(*net, a.state);
  auto family = std::make_shared<P>(std::move(p));
  using Region = ly::capture::region_t<ly::family_traits<P>::capture_region>;
  // The step arm: the trainer's whole step on device state through the policy's run_whole_step.
  auto step_arm = [&a, family, b](auto& capture, auto& prec, ly::train::Optimizer& opt, auto& net_ref, double clip,
                                  std::function<void(ly::profile::StepPhases&)>& step) {
    if constexpr (std::decay_t<decltype(capture)>::whole_step) {
      if (!capture.step_mode()) return;
      opt.enable_device_state();
      auto batch = std::make_shared<typename P::Batch>(b);
      if constexpr (ly::member::declares<P, ly::member::step_padding>)
        if (capture.step_graphs_enabled()) *batch = P::pad_for_step_graph(*batch);
      const bool nhwc = a.channels_last == 1;
      // The trainer's step body itself (train/device_step.hpp), without an EMA; under --accumulate N its two
      // kinds, N - 1 accumulating micro-batches and the stepping one, through the trainer's GradAccumulator.
      auto acc = std::make_shared<ly::train::GradAccumulator>();
      if (a.accumulate > 1) {
        acc->enable(opt.params(), opt.params().front().device());
        acc->set_window(a.accumulate);
      }
      step = [&capture, &prec, &opt, net = net_ref, family, batch, nhwc, clip, acc, n = a.accumulate](ly::profile::StepPhases&) mutable {
        for (int k = 0; k < n; ++k)
          ly::train::device_step(*family, net, prec, opt, nullptr, capture, *batch, clip, nhwc,
                                 ly::train::Accumulation{acc.get(), k + 1 == n});
      };
    }
  };
  // The optimizer as the trainer builds it (trainer_impl.hpp setup): the family's groups and options.
  auto make_opt = [family, net](const ly::TrainConfig& c) mutable {
    return ly::train::family_optimizer(*family, *net, c, c.weight_decay);
  };
  // A step arm for a family whose loss is not fixed-shape captures the network (as the trainer resolves it).
  if (a.arm == "grads") {
    at::globalContext().setBenchmarkCuDNN(a.cudnn_benchmark == 1);
    at::globalContext().setDeterministicCuDNN(a.cudnn_deterministic);
    if (!a.cudnn_heuristic.empty()) ly::set_cudnn_heuristic(a.cudnn_heuristic);
    // The probe: sum_i mean(out_i * R_i) over the output tensors, R_i drawn once (seeded) and shared by both runs.
    auto probe = [family, b, use = a.grads_loss == "probe", r = std::make_shared<std::vector<torch::Tensor>>()](const auto& out) {
      using Out = std::decay_t<decltype(out)>;
      if constexpr (std::is_same_v<Out, torch::Tensor> || std::is_same_v<Out, std::vector<torch::Tensor>>) {
        if (use) {
          const auto flat = ly::capture::OutputCodec<Out>::flatten(out);
          if (r->empty()) {
            auto gen = at::detail::createCPUGenerator(12345);
            for (const auto& f : flat)
              r->push_back(at::randn(f.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32)).to(f.device()));
          }
          torch::Tensor l = torch::zeros({}, flat.front().options().dtype(torch::kFloat32));
          for (size_t i = 0; i < flat.size(); ++i) l = l + (flat[i].to(torch::kFloat32) * (*r)[i]).mean();
          return l;
        }
      } else if (use) {
        throw std::invalid_argument("--grads-loss probe: this family's network output is not a tensor list; use --grads-loss family");
      }
      return family->loss(out, b).total;
    };
    return run_grads(a, cfg, net, probe, P::input(b), dev);
  }
  using C = std::conditional_t<Capture::whole_step && !ly::capture::step_capturable<P>(), typename Capture::network_only, Capture>;
  return run_arm<C, Region>(a, cfg, net, [family, b](const auto& out) { return family->loss(out, b).total; },
                                  make_opt, P::input(b), dev, step_arm);
}

template <class Capture>
nlohmann::json run_model(const Args& a, torch::Device dev) {
  return ly::with_family(a.model, [&](auto p) { return run_family<Capture>(a, std::move(p), dev); });
}
}  // namespace

int main(int argc, char** argv) try {
  auto a = parse(argc, argv);
  if (a.device == "cuda" && !ly::compat::cuda_available()) {
    std::cerr << "graph_speedup: needs a CUDA device (this build/run has none; --device cpu for a smoke test)\n";
    return 2;
  }
  const torch::Device dev = a.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  namespace cap = ly::capture;
  auto out = a.arm == "step"    ? run_model<cap::CudaGraph<cap::scope::step>>(a, dev)
             : a.arm != "eager" ? run_model<cap::CudaGraph<>>(a, dev)
                                : run_model<cap::Eager>(a, dev);
  std::cout << out.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "graph_speedup: " << e.what() << "\n";
  return 1;
}
