// CUDA-graph capture on a GPU (suite "gpu"; skipped without CUDA): graph vs eager bit-identity of the
// loss trajectory, parameters and BatchNorm statistics under AMP fp16, for the whole network and for a
// backbone_encoder region (an eager decoder with a per-batch token count), forced forward and backward
// replay failures (undone and re-run eager: the run equals eager), invalidate -> re-capture, a new shape
// running eager. The loop is the trainer's step without the
// dataloader: the same batches, autocast, GradScaler, the library's multi-tensor SGD, zero_grad.
#include <doctest/doctest.h>
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "kit/region_family.hpp"
#include "support.hpp"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace cap = ly::capture;

namespace {

struct Trajectory {
  torch::Tensor losses;  // [steps] float32 on the CPU
  std::vector<torch::Tensor> params, buffers;
  nlohmann::json report;
};

template <class Capture>
using StepHook = std::function<void(int step, Capture&)>;

// `steps` steps of make_net() (seeded, so every arm starts from the same weights) on inputs[i % n]; the
// forward goes through the capture policy's region and each step's forward + backward through run_step,
// as in the trainer.
// amp: AMP fp16 (the AmpHalf policy) or float32 (the Fp32 policy: no autocast, no loss scaling).
template <class Capture, class Region, class Prec, class MakeNet, class LossFn>
Trajectory run_steps_in(MakeNet make_net, const std::vector<torch::Tensor>& inputs, LossFn loss_of, int steps,
                        StepHook<Capture> hook, bool amp) {
  const torch::Device dev(torch::kCUDA, 0);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  auto net = make_net();
  net->to(dev);
  net->train();
  auto cfg = ly::parse_args({"cuda_graph=true", amp ? "amp=true" : "amp=false", "amp_dtype=float16", "device=cuda"});
  Prec prec;
  prec.setup(cfg, dev, amp);
  Capture capture;
  capture.setup(cfg, dev);
  ly::train::OptimizerOptions oo;
  oo.lr0 = 0.01;
  ly::train::Optimizer opt(ly::train::make_param_groups(*net, 5e-4), oo);
  std::vector<torch::Tensor> losses;
  for (int i = 0; i < steps; ++i) {
    torch::Tensor loss;
    capture.run_step(net, [&] {
      {
        auto guard = prec.autocast();
        auto out = capture.forward(net, inputs[static_cast<size_t>(i) % inputs.size()], Region{});
        loss = loss_of(out, i);
      }
      prec.scale(loss).backward();
    }, /*window_start=*/true);
    prec.step(opt);
    prec.update();
    opt.zero_grad();
    losses.push_back(loss.detach().to(torch::kFloat32));
    loss = torch::Tensor();
    if (hook) hook(i, capture);
  }
  Trajectory t;
  t.losses = torch::stack(losses).cpu();
  for (auto& p : net->parameters()) t.params.push_back(p.detach().cpu());
  for (auto& b : net->buffers()) t.buffers.push_back(b.detach().cpu());
  t.report = capture.report();
  return t;
}
template <class Capture, class Region = cap::whole_network, class MakeNet, class LossFn>
Trajectory run_steps(MakeNet make_net, const std::vector<torch::Tensor>& inputs, LossFn loss_of, int steps,
                     StepHook<Capture> hook = {}, bool amp = true) {
  return amp ? run_steps_in<Capture, Region, ly::precision::AmpHalf>(make_net, inputs, loss_of, steps, hook, true)
             : run_steps_in<Capture, Region, ly::precision::Fp32>(make_net, inputs, loss_of, steps, hook, false);
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].equal(b[i])) return false;
  return true;
}
double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Eager three times, then graph: bit-identical when eager is reproducible, else inside the eager spread.
// "Reproducible" needs every eager run equal, never two alone: a network whose backward adds with atomics
// (grid_sample's gradient in deformable attention) may let two eager runs agree by chance. Where three agree and the
// graph run differs, a fourth eager run decides: equal to the others, the difference is the graph's and the exact
// checks fail; different, eager is not reproducible and the spread rules.
// Session 50 (H100, 634494f), DEIMv2-atto's region with its decoder: in the whole suite, e1 equalled e2 over 30 steps
// and the graph run left them at step 10 (max |d| 0.174); run alone five times, the three eager runs all differed (loss
// spread 0.34-0.78, the graph's nearest 0.28-0.36); with this three-run rule, in the whole suite again, the eager
// spread was 0.027 and the graph's nearest 0.177, and the spread check failed (RESULTS.md, session 50). That case now
// runs in lockstep (one decoder gradient fed to both copies, below), because its decoder's backward adds with atomics.
// The first-difference steps reported here tell a graph-only difference (one step, every eager run alike) from noise.
template <class Region = cap::whole_network, class MakeNet, class LossFn>
void check_graph_matches_eager(MakeNet make_net, const std::vector<torch::Tensor>& inputs, LossFn loss_of, bool amp = true) {
  const int steps = 30;
  auto e1 = run_steps<cap::Eager, Region>(make_net, inputs, loss_of, steps, {}, amp);
  auto e2 = run_steps<cap::Eager, Region>(make_net, inputs, loss_of, steps, {}, amp);
  auto e3 = run_steps<cap::Eager, Region>(make_net, inputs, loss_of, steps, {}, amp);
  auto g = run_steps<cap::CudaGraph<>, Region>(make_net, inputs, loss_of, steps, {}, amp);
  CHECK(g.report["captures"] == 1);
  CHECK(g.report["replayed_steps"] == steps - 2);  // steps 0, 1 eager; the third sighting is captured
  CHECK(g.report["eager_steps"] == 2);
  CHECK(g.report["cuda_graph"] == true);
  auto same = [](const Trajectory& a, const Trajectory& b) {
    return a.losses.equal(b.losses) && all_equal(a.params, b.params) && all_equal(a.buffers, b.buffers);
  };
  // Where each pair's losses first part (-1: never): a graph-only difference parts the graph run from every eager run
  // at one step while the eager runs stay together; noise parts runs at scattered steps.
  auto first_diff = [](const Trajectory& a, const Trajectory& b) -> int64_t {
    const auto ne = a.losses.ne(b.losses).nonzero();
    return ne.size(0) == 0 ? -1 : ne[0][0].template item<int64_t>();
  };
  MESSAGE("losses first differ at step (-1: never): graph-e1 " << first_diff(g, e1) << ", graph-e2 " << first_diff(g, e2)
          << ", graph-e3 " << first_diff(g, e3) << "; e1-e2 " << first_diff(e1, e2) << ", e1-e3 " << first_diff(e1, e3)
          << ", e2-e3 " << first_diff(e2, e3));
  bool eager_reproducible = same(e1, e2) && same(e1, e3);
  if (eager_reproducible && !same(g, e1)) {
    const auto e4 = run_steps<cap::Eager, Region>(make_net, inputs, loss_of, steps, {}, amp);
    eager_reproducible = same(e4, e1);
    if (!eager_reproducible) MESSAGE("three eager runs agreed by chance; a fourth differs");
  }
  if (eager_reproducible) {
    if (!g.losses.equal(e1.losses)) MESSAGE("graph vs eager losses: max |d| " << max_abs_diff(g.losses, e1.losses));
    CHECK(g.losses.equal(e1.losses));
    CHECK(all_equal(g.params, e1.params));
    CHECK(all_equal(g.buffers, e1.buffers));  // BatchNorm running statistics
  } else {
    // One eager pair's distance is too noisy a yardstick over 30 chaotic steps (session 40: DEIMv2-atto's graph
    // run landed 2.2x from e1 where e1-e2 was the only measure). As in the conformance suite's graph case: the
    // largest pairwise distance of the three eager runs as the spread, and the graph run within twice that of its
    // nearest eager run.
    const auto y = lry_test::yardstick(g.losses, e1.losses, e2.losses, e3.losses, max_abs_diff);
    MESSAGE("eager is not bit-reproducible here (loss spread over three eager runs " << y.spread
            << "); the graph run's nearest eager run is " << y.near << " away");
    CHECK(y.near <= 2 * y.spread + 1e-6);
  }
}

std::vector<torch::Tensor> image_batches(int n, int64_t batch, int64_t size) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> v;
  for (int i = 0; i < n; ++i) v.push_back(torch::randn({batch, 3, size, size}).to(torch::kCUDA));
  return v;
}

ly::resnet::ResNet make_resnet18() {
  torch::manual_seed(0);
  return ly::resnet::ResNet(ly::resnet::ResNetOptions{18, 10});
}

auto resnet_loss() {
  torch::manual_seed(12);
  auto labels = torch::randint(0, 10, {16}, torch::kLong).to(torch::kCUDA);
  return [labels](const torch::Tensor& logits, int) {
    return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), labels);
  };
}

}  // namespace

LRY_GPU_SUITE {
  TEST_CASE("graph vs eager: ResNet-18 b16 224, AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager(make_resnet18, image_batches(3, 16, 224), resnet_loss());
  }

  TEST_CASE("graph vs eager: YOLOv9-t b8 640, AMP fp16, 30 steps, the real detection loss") {
    LRY_REQUIRE_CUDA();
    auto make = [] {
      torch::manual_seed(0);
      return ly::families::yolo9::Yolo9(ly::families::yolo9::Yolo9Options{"t", 80, 16});
    };
    // Padded targets [B, 10, 5] (class, x1, y1, x2, y2 in pixels; class -1 = padding): 1 to 7 boxes per
    // image, so the assigner sees very different box counts across the batch.
    auto targets = torch::full({8, 10, 5}, -1.0);
    for (int b = 0; b < 8; ++b)
      for (int j = 0; j <= b % 7; ++j) {
        const float cx = 60.f + 75.f * j, cy = 90.f + 60.f * b, w = 30.f + 12.f * j, h = 40.f + 5.f * b;
        targets[b][j] = torch::tensor({float((b + 3 * j) % 80), cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
      }
    targets = targets.to(torch::kCUDA);
    const std::vector<int64_t> strides{8, 16, 32};
    auto det_loss = std::make_shared<ly::families::yolo9::DetectionLoss>(strides, 80);
    auto loss = [det_loss, targets](const std::vector<torch::Tensor>& outs, int) { return (*det_loss)(outs, targets).total; };
    check_graph_matches_eager(make, image_batches(2, 8, 640), loss);
  }

  TEST_CASE("a forced replay failure switches to eager for the rest of the run, with one warning") {
    LRY_REQUIRE_CUDA();
    std::vector<std::string> lines;
    auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines.emplace_back(m); });
    auto t = run_steps<cap::CudaGraph<>>(make_resnet18, image_batches(2, 16, 224), resnet_loss(), 10,
                                         [](int step, cap::CudaGraph<>& c) {
                                           if (step == 4) c.fail_next_replay_for_testing();
                                         });
    ly::log::set_sink(prev);
    int warnings = 0;
    for (auto& l : lines) warnings += l.rfind(cap::CudaGraph<>::fallback_prefix, 0) == 0;
    CHECK(warnings == 1);
    CHECK(t.report["replayed_steps"] == 3);  // steps 2, 3, 4
    CHECK(t.report["eager_steps"] == 7);
    CHECK(t.report["fallback_reason"].get<std::string>().find("forced replay failure") != std::string::npos);
    CHECK(torch::isfinite(t.losses).all().item<bool>());
  }

  TEST_CASE("invalidate drops the graph and re-captures once the shape is stable again") {
    LRY_REQUIRE_CUDA();
    auto t = run_steps<cap::CudaGraph<>>(make_resnet18, image_batches(2, 16, 224), resnet_loss(), 12,
                                         [](int step, cap::CudaGraph<>& c) {
                                           if (step == 5) c.invalidate("test toggle");
                                         });
    CHECK(t.report["captures"] == 2);
    CHECK(t.report["invalidations"] == 1);
    CHECK(t.report["replayed_steps"] == 4 + 4);  // 2..5, then 8..11
    CHECK(t.report["eager_steps"] == 4);         // 0, 1, 6, 7
  }

  TEST_CASE("a batch of a new shape runs eager and is counted; the graph keeps replaying its own shape") {
    LRY_REQUIRE_CUDA();
    auto full = image_batches(1, 16, 224)[0];
    torch::manual_seed(13);
    auto partial = torch::randn({16, 3, 192, 192}).to(torch::kCUDA);
    std::vector<torch::Tensor> inputs{full, full, full, full, partial, full};
    auto t = run_steps<cap::CudaGraph<>>(make_resnet18, inputs, resnet_loss(), 6);
    CHECK(t.report["captures"] == 1);
    CHECK(t.report["replayed_steps"] == 3);  // 2, 3, 5
    CHECK(t.report["eager_steps"] == 3);     // 0, 1, 4 (the new shape)
    CHECK(t.report["capture_shape"] == nlohmann::json({16, 3, 224, 224}));
    CHECK(t.report["distinct_shapes"] == 2);
  }

  TEST_CASE("graph vs eager: a backbone_encoder region (graphed encoder, eager decoder of 1..13 tokens), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    auto make = [] {
      torch::manual_seed(0);
      return lry_test::TokenNet(3, 16);
    };
    torch::manual_seed(12);
    auto labels = torch::randint(0, 3, {16}, torch::kLong).to(torch::kCUDA);
    auto loss = [labels](const torch::Tensor& logits, int) {
      return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), labels);
    };
    // A whole-network graph would freeze the decoder's token count at the captured step's; the region
    // keeps it eager, so every step reads its own count and graph = eager.
    check_graph_matches_eager<cap::region_t<ly::CaptureRegion::backbone_encoder>>(make, image_batches(3, 16, 64), loss);
  }

  // The D-FINE line's capture region alone (backbone + encoder), its maps into a plain loss, so that no decoder or
  // criterion (their atomic adds make the conformance suite's graph check for these families statistical) is in the
  // comparison: the graphed region must equal eager bit for bit where eager reproduces itself. Then the same with the
  // decoder run eager on fixed targets (denoising drawn alike in both arms: the same seed, no draw in the region).
  auto detr_region_loss = [](const ly::nn::detr::DFineNetOutput& out, int) {
    torch::Tensor l = torch::zeros({}, out.features.front().options().dtype(torch::kFloat32));
    for (const auto& f : out.features) l = l + f.to(torch::kFloat32).pow(2).mean();
    return l;
  };
  auto detr_decoder_loss = [] {
    std::vector<ly::nn::detr::DetrTarget> t;
    for (int b = 0; b < 4; ++b) {
      const int64_t n = 1 + b % 3;
      t.push_back({torch::arange(n, torch::kLong).remainder(3).to(torch::kCUDA),
                   (torch::tensor({0.3f, 0.4f, 0.2f, 0.25f}).repeat({n, 1}) + 0.1f * torch::arange(n).unsqueeze(1)).to(torch::kCUDA)});
    }
    auto padded = std::make_shared<ly::nn::detr::PaddedTargets>(ly::nn::detr::pad_targets(t, torch::Device(torch::kCUDA, 0)));
    return [padded](const ly::nn::detr::DFineNetOutput& out, int) {
      const auto& r = out.run(padded.get());
      return r.pred_logits.to(torch::kFloat32).pow(2).mean() + r.pred_boxes.to(torch::kFloat32).mean();
    };
  };
  auto make_deimv2_atto = [] {
    torch::manual_seed(0);
    return ly::families::deimv2::DEIMv2(ly::families::deimv2::DEIMv2Options{"atto", 3, 0, true});
  };
  auto make_dfine_n = [] {
    torch::manual_seed(0);
    ly::families::dfine::DFineOptions o;
    o.num_classes = 3;
    return ly::families::dfine::DFine(o);
  };
  using EncoderRegion = cap::region_t<ly::CaptureRegion::backbone_encoder>;

  // D-FINE-n's backbone and hybrid encoder as a region of their own, the encoder's AIFI layer (attention and its
  // linear layers) kept or removed: which part of the region computes differently when graphed.
  struct DFineRegionNetImpl : torch::nn::Module {
    explicit DFineRegionNetImpl(bool aifi) {
      namespace detr = ly::nn::detr;
      const auto& c = *ly::families::dfine::dfine_size("n");
      detr::HGNetv2Options bo;
      bo.name = c.backbone;
      bo.use_lab = c.use_lab;
      bo.return_idx = c.return_idx;
      bo.freeze_stem = true;
      bo.freeze_norm = c.freeze_norm;
      backbone = register_module("backbone", detr::HGNetv2(bo));
      detr::DFineEncoderOptions eo;
      eo.in_channels = backbone->out_channels();
      eo.feat_strides.clear();
      for (auto i : c.return_idx) eo.feat_strides.push_back(int64_t{4} << i);
      eo.hidden_dim = c.enc_hidden;
      eo.dim_feedforward = c.enc_ffn;
      eo.expansion = c.expansion;
      eo.depth_mult = c.depth_mult;
      eo.use_encoder_idx = aifi ? std::vector<int64_t>{static_cast<int64_t>(c.return_idx.size()) - 1} : std::vector<int64_t>{};
      enc = register_module("encoder", detr::DFineEncoder(eo));
      chain_ = std::make_shared<Chain>(backbone, enc);
    }
    torch::nn::Module& encoder() { return *chain_; }
    std::vector<torch::Tensor> encode(const torch::Tensor& x) { return enc->forward(backbone->forward(x)); }
    std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& f) { return f; }
    std::vector<torch::Tensor> forward(const torch::Tensor& x) { return decode(encode(x)); }
    ly::nn::detr::HGNetv2 backbone{nullptr};
    ly::nn::detr::DFineEncoder enc{nullptr};
    using Chain = ly::nn::detr::EncoderChainImpl<ly::nn::detr::HGNetv2, ly::nn::detr::DFineEncoder>;
    std::shared_ptr<Chain> chain_;
  };
  TORCH_MODULE(DFineRegionNet);
  // A test network's maker for check_graph_matches_eager: seeded, so every arm starts from the same weights.
  template <class Net>
  auto seeded(bool variant) {
    return [variant] {
      torch::manual_seed(0);
      return Net(variant);
    };
  }
  auto maps_loss = [](const std::vector<torch::Tensor>& maps, int) {
    torch::Tensor l = torch::zeros({}, maps.front().options().dtype(torch::kFloat32));
    for (const auto& f : maps) l = l + f.to(torch::kFloat32).pow(2).mean();
    return l;
  };

  TEST_CASE("graph vs eager: DEIMv2-atto's backbone_encoder region alone (HGNetv2-Atto + lite encoder), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(make_deimv2_atto, image_batches(3, 4, 64), detr_region_loss);
  }
  TEST_CASE("graph vs eager: D-FINE-n's backbone_encoder region alone (HGNetv2-B0 + hybrid encoder), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(make_dfine_n, image_batches(3, 4, 64), detr_region_loss);
  }
  TEST_CASE("graph vs eager: D-FINE-n's backbone_encoder region alone in float32, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(make_dfine_n, image_batches(3, 4, 64), detr_region_loss, /*amp=*/false);
  }
  TEST_CASE("graph vs eager: D-FINE-n's backbone and hybrid encoder without its AIFI layer, AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(seeded<DFineRegionNet>(false), image_batches(3, 4, 64), maps_loss);
  }
  TEST_CASE("graph vs eager: D-FINE-n's backbone and hybrid encoder with its AIFI layer (the test network), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(seeded<DFineRegionNet>(true), image_batches(3, 4, 64), maps_loss);
  }
  // Session 34's diagnosis of the AIFI difference: a test network of one strided conv and four tokens, mixed by
  // the library's MultiheadAttention (scaled_dot_product_attention) or by a GELU FFN of two Linear layers; and the
  // SDPA backends narrowed to the math one.
  struct TokenNetImpl : torch::nn::Module {
    explicit TokenNetImpl(bool attention) : attention_(attention) {
      stem = register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 128, 32).stride(32)));
      if (attention_) attn = register_module("attn", ly::nn::detr::MultiheadAttention(128, 8));
      else {
        l1 = register_module("l1", torch::nn::Linear(128, 512));
        l2 = register_module("l2", torch::nn::Linear(512, 128));
      }
    }
    torch::nn::Module& encoder() { return *this; }
    std::vector<torch::Tensor> encode(const torch::Tensor& x) {
      auto t = stem->forward(x).flatten(2).transpose(1, 2);  // [B, 4, 128]
      t = attention_ ? t + attn->forward(t, t, t) : t + l2->forward(torch::gelu(l1->forward(t)));
      return {t};
    }
    std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& f) { return f; }
    std::vector<torch::Tensor> forward(const torch::Tensor& x) { return decode(encode(x)); }
    torch::nn::Conv2d stem{nullptr};
    ly::nn::detr::MultiheadAttention attn{nullptr};
    torch::nn::Linear l1{nullptr}, l2{nullptr};
    bool attention_;
  };
  TORCH_MODULE(TokenNet);
  // Only the math SDPA backend while alive (2.x; 1.13's attention is matmul + softmax already).
  struct SdpaMathOnly {
#if TORCH_VERSION_MAJOR >= 2
    SdpaMathOnly()
        : flash(at::globalContext().userEnabledFlashSDP()), eff(at::globalContext().userEnabledMemEfficientSDP()),
          cudnn(at::globalContext().userEnabledCuDNNSDP()) {
      at::globalContext().setSDPUseFlash(false);
      at::globalContext().setSDPUseMemEfficient(false);
      at::globalContext().setSDPUseCuDNN(false);
    }
    ~SdpaMathOnly() {
      at::globalContext().setSDPUseFlash(flash);
      at::globalContext().setSDPUseMemEfficient(eff);
      at::globalContext().setSDPUseCuDNN(cudnn);
    }
    bool flash, eff, cudnn;
#endif
  };
  void report_sdp_choice() {
#if TORCH_VERSION_MAJOR >= 2
    for (auto dt : {torch::kFloat16, torch::kFloat32}) {
      auto q = torch::randn({4, 8, 4, 16}, torch::TensorOptions().device(torch::kCUDA).dtype(dt));
      MESSAGE("SDPA backend for [4, 8, 4, 16] " << std::string(c10::toString(dt)) << ": " << at::_fused_sdp_choice(q, q, q)
              << " (0 math, 1 flash, 2 efficient, 3 cudnn)");
    }
#endif
  }
  TEST_CASE("graph vs eager: token net, attention (SDPA), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    report_sdp_choice();
    check_graph_matches_eager<EncoderRegion>(seeded<TokenNet>(true), image_batches(3, 4, 64), maps_loss);
  }
  TEST_CASE("graph vs eager: token net, attention (SDPA math only), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    [[maybe_unused]] SdpaMathOnly math;
    check_graph_matches_eager<EncoderRegion>(seeded<TokenNet>(true), image_batches(3, 4, 64), maps_loss);
  }
  TEST_CASE("graph vs eager: token net, attention (SDPA), float32, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(seeded<TokenNet>(true), image_batches(3, 4, 64), maps_loss, false);
  }
  TEST_CASE("graph vs eager: token net, GELU FFN (two Linear), AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    check_graph_matches_eager<EncoderRegion>(seeded<TokenNet>(false), image_batches(3, 4, 64), maps_loss);
  }
  TEST_CASE("graph vs eager: D-FINE-n's backbone and hybrid encoder with its AIFI layer, SDPA math only, AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    [[maybe_unused]] SdpaMathOnly math;
    check_graph_matches_eager<EncoderRegion>(seeded<DFineRegionNet>(true), image_batches(3, 4, 64), maps_loss);
  }
  // Session 36: the token net in lockstep through the library, as benchmarks/s35/linear_graph_diag.py does with torch
  // alone (which found graph = eager under AMP while the cases above differ). Two copies of the net at the same
  // parameters, one through CudaGraph<> (its region recorded at the third step), one through Eager; each step both
  // compute their gradients on the same batch, then both take the eager arm's plain SGD step (so a difference cannot
  // grow). Reported per variant: the first step whose region outputs differ (the forward), and the first step and the
  // parameters whose gradients differ (the backward). The loss is scaled by 65536 as the GradScaler's first steps do,
  // or not, to tell the scale's part. Session 37 (H100, 2a48513): the forwards were equal and, from the first replay,
  // only the Linear and attention biases' gradients differed, only under AMP: the region's backward was recorded
  // inside the forward's autocast region, so a bias's gradient sum ran in float32 where eager's rounds to half
  // (GraphedCallable::BackwardOutsideAutocast). With that fix every variant is equal; the case stays as its check.
  struct LockstepResult {
    int first_forward = -1, first_grad = -1;
    std::string params;
  };
  template <class MakeNet, class LossFn>
  LockstepResult lockstep(MakeNet make_net, const std::vector<torch::Tensor>& inputs, LossFn loss_of, bool amp, double scale) {
    const torch::Device dev(torch::kCUDA, 0);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    auto ne = make_net(), ng = make_net();
    for (auto* n : {&ne, &ng}) {
      (*n)->to(dev);
      (*n)->train();
    }
    auto cfg = ly::parse_args({"cuda_graph=true", amp ? "amp=true" : "amp=false", "amp_dtype=float16", "device=cuda"});
    cap::Eager eager;
    cap::CudaGraph<> graph;
    eager.setup(cfg, dev);
    graph.setup(cfg, dev);
    auto pe = ne->named_parameters(), pg = ng->named_parameters();
    LockstepResult r;
    for (int i = 0; i < 12; ++i) {
      const auto& x = inputs[static_cast<size_t>(i) % inputs.size()];
      auto step = [&](auto& capture, auto& net) {
        std::vector<torch::Tensor> outs;
        capture.run_step(net, [&] {
          torch::Tensor loss;
          {
            std::optional<ly::precision::AutocastGuard> guard;
            if (amp) guard.emplace(at::kHalf, true);
            auto out = capture.forward(net, x, EncoderRegion{});
            for (const auto& o : out) outs.push_back(o.detach().clone());
            loss = loss_of(out, i);
          }
          (loss * scale).backward();
        }, /*window_start=*/true);
        return outs;
      };
      const auto oe = step(eager, ne), og = step(graph, ng);
      if (!all_equal(oe, og) && r.first_forward < 0) r.first_forward = i;
      std::string differing;
      for (size_t k = 0; k < pe.size(); ++k) {
        const auto &ge = pe[k].value().grad(), &gg = pg[k].value().grad();
        if (ge.defined() != gg.defined() || (ge.defined() && !ge.equal(gg)))
          differing += (differing.empty() ? "" : " ") + pe[k].key() + "(" +
                       (ge.defined() && gg.defined() ? std::to_string((ge - gg).abs().max().template item<double>()) : std::string("undefined")) + ")";
      }
      if (!differing.empty() && r.first_grad < 0) {
        r.first_grad = i;
        r.params = differing;
      }
      torch::NoGradGuard ng_guard;
      for (size_t k = 0; k < pe.size(); ++k) {
        auto& p = pe[k].value();
        if (p.grad().defined()) p.sub_(p.grad() * (0.01 / scale));
        pg[k].value().copy_(p);
        p.mutable_grad() = torch::Tensor();
        pg[k].value().mutable_grad() = torch::Tensor();
      }
    }
    CHECK(graph.report()["replayed_steps"] == 10);  // steps 0, 1 eager; the third sighting is captured
    return r;
  }
  TEST_CASE("lockstep diagnosis: the token net's region graphed vs eager at the same parameters, gradient by gradient") {
    LRY_REQUIRE_CUDA();
    struct Variant {
      const char* what;
      bool attention, amp;
      double scale;
    };
    const Variant variants[] = {{"GELU FFN, AMP, loss x 65536", false, true, 65536.0},
                                {"GELU FFN, AMP, loss x 1", false, true, 1.0},
                                {"GELU FFN, float32", false, false, 1.0},
                                {"attention (SDPA), AMP, loss x 65536", true, true, 65536.0},
                                {"attention (SDPA), float32", true, false, 1.0}};
    for (const auto& v : variants) {
      const auto r = lockstep(seeded<TokenNet>(v.attention), image_batches(3, 4, 64), maps_loss, v.amp, v.scale);
      MESSAGE(std::string(v.what) << ": region outputs first differ at step " << r.first_forward << ", gradients at step "
              << r.first_grad << " (-1: never in 12 steps)" << (r.params.empty() ? std::string() : "; parameters (max |d|): " + r.params));
      CHECK(r.first_forward == -1);
      CHECK(r.first_grad == -1);
    }
  }

  // Session 34: does a GEMM compute other bits when recorded in a CUDA graph? (The token net's GELU FFN
  // differs graph vs eager while the convolution-only nets do not.) Each operation of a Linear's forward and
  // backward at the token net's shapes: eager on the default stream (twice), eager on a side stream, and
  // recorded on that stream and replayed; all must equal the first eager result bit for bit.
  TEST_CASE("GEMMs of a Linear (the token net's shapes): a side stream and a graph replay equal eager bit for bit") {
    LRY_REQUIRE_CUDA();
#if defined(LIBREYOLO_WITH_CUDA)
    const torch::Device dev(torch::kCUDA, 0);
    torch::manual_seed(5);
    for (auto dt : {torch::kFloat16, torch::kFloat32}) {
      const auto o = torch::TensorOptions().dtype(dt).device(dev);
      auto x = torch::randn({16, 128}, o), w = torch::randn({512, 128}, o), b = torch::randn({512}, o);
      auto gy = torch::randn({16, 512}, o);
      auto x3 = torch::randn({4, 128, 4}, o).transpose(1, 2);  // [4, 4, 128], not contiguous (the token net's input)
      auto wl = w.clone().requires_grad_(true);
      // The second Linear (512 -> 128): h its input, w2 its weight, g2 its output's gradient.
      auto h = torch::randn({16, 512}, o), w2 = torch::randn({128, 512}, o), b2 = torch::randn({128}, o), g2 = torch::randn({16, 128}, o);
      const std::vector<std::pair<std::string, std::function<torch::Tensor()>>> ops{
          {"second linear (512 -> 128, addmm with bias)", [&] { return torch::linear(h, w2, b2); }},
          {"second linear's grad input: mm(g2, w2)", [&] { return torch::mm(g2, w2); }},
          {"second linear's grad weight: mm(g2^T, h), K = 16", [&] { return torch::mm(g2.t(), h); }},
          {"second linear's grad weight as autograd forms it: mm(h^T, g2)^T", [&] { return torch::mm(h.t(), g2).t(); }},
          {"linear (addmm with bias)", [&] { return torch::linear(x, w, b); }},
          {"linear, 3-d input not contiguous", [&] { return torch::linear(x3, w, b); }},
          {"grad input: mm(gy, w)", [&] { return torch::mm(gy, w); }},
          {"grad weight: mm(gy^T, x), K = 16", [&] { return torch::mm(gy.t(), x); }},
          {"grad bias: gy.sum(0)", [&] { return gy.sum(0); }},
          {"autograd::grad of linear's weight", [&] {
             auto y = torch::linear(x, wl, b);
             return torch::autograd::grad({y}, {wl}, {gy})[0];
           }},
      };
      for (const auto& [what, run] : ops) {
        const auto eager = run(), again = run();
        auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, dev.index());
        c10::cuda::device_synchronize();
        bool side_eq = false, replay_eq = false;
        double replay_d = 0;
        {
          c10::cuda::CUDAStreamGuard on_side(side);
          const auto s = run();
          at::cuda::CUDAGraph graph;
          graph.capture_begin(at::cuda::graph_pool_handle(), cudaStreamCaptureModeThreadLocal);
          const auto r = run();
          graph.capture_end();
          graph.replay();
          side.synchronize();
          side_eq = s.equal(eager);
          replay_eq = r.equal(eager);
          replay_d = (r.to(torch::kFloat64) - eager.to(torch::kFloat64)).abs().max().item<double>();
        }
        c10::cuda::device_synchronize();
        MESSAGE(std::string(c10::toString(dt)) << " " << what << ": eager again equal " << again.equal(eager) << ", side stream equal "
                                  << side_eq << ", graph replay equal " << replay_eq << " (max |d| " << replay_d << ")");
        CHECK(again.equal(eager));
        CHECK(side_eq);
        CHECK(replay_eq);
      }
    }
#endif
  }
  // The region's backward from given gradients: each map that needs one takes fed[k] (the lockstep cases below).
  void backward_from(const std::vector<torch::Tensor>& maps, const std::vector<torch::Tensor>& fed) {
    std::vector<torch::Tensor> roots, grads;
    for (size_t k = 0; k < maps.size(); ++k)
      if (maps[k].requires_grad()) {
        roots.push_back(maps[k]);
        grads.push_back(fed.at(k));
      }
    REQUIRE_FALSE(roots.empty());
    torch::autograd::backward(roots, grads);
  }
  // DEIMv2-atto's region graphed, its decoder eager, through the trainer's loop (AmpHalf with its GradScaler, the
  // library's optimizer, 30 steps), in lockstep: two copies from the same weights, one eager, one through CudaGraph<>
  // (backbone + encoder recorded at the third step). Each step the eager copy runs its whole step (the decoder's
  // backward, then the region's from the gradient the decoder handed its maps, which is kept); the graph copy
  // replays its region, runs its decoder on the replayed maps (denoising draws seeded alike in both copies) and
  // compares the loss, then its region's backward is fed the eager copy's gradient and its decoder's parameters take
  // the eager copy's gradients. Both copies then step their own
  // GradScaler and optimizer. Every step's loss, region gradients, parameters and BatchNorm statistics must be equal
  // bit for bit.
  // Why lockstep: this case first compared two free-running trajectories, eager against graph, and failed now and
  // then (sessions 40, 50). The decoder's backward cannot repeat itself: grid_sample's gradient (deformable
  // attention) adds with atomics on CUDA. Computed twice on the same maps, it differed at 0-2 of 12 steps (session 50's
  // lockstep case below). So two eager runs may agree over 30 steps by chance, or part at any step, and the distance
  // between chaotic trajectories is no yardstick. Feeding one decoder gradient to both copies removes that noise and
  // keeps everything the graph does: the region's forward and backward replays, the decoder reading the replayed maps,
  // loss scaling with its inf checks, the optimizer's step on parameters the graph reads, BatchNorm's statistics.
  // Beside it, the layout (strides) of each gradient the decoder hands the maps: the backward graph copies it into
  // the layout seen before the recording (GraphedCallable::grad_buffer_for); one layout per map over the run is
  // reported.
  TEST_CASE("lockstep through the trainer's loop: DEIMv2-atto's region graphed vs eager, one decoder gradient, AMP fp16, 30 steps") {
    LRY_REQUIRE_CUDA();
    const torch::Device dev(torch::kCUDA, 0);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    const int steps = 30;
    const auto inputs = image_batches(3, 4, 64);
    auto loss_of = detr_decoder_loss();
    auto ne = make_deimv2_atto(), ng = make_deimv2_atto();
    for (auto* n : {&ne, &ng}) {
      (*n)->to(dev);
      (*n)->train();
    }
    auto cfg = ly::parse_args({"cuda_graph=true", "amp=true", "amp_dtype=float16", "device=cuda"});
    ly::precision::AmpHalf pe, pg;
    pe.setup(cfg, dev, true);
    pg.setup(cfg, dev, true);
    cap::Eager eager;
    cap::CudaGraph<> graph;
    eager.setup(cfg, dev);
    graph.setup(cfg, dev);
    ly::train::OptimizerOptions oo;
    oo.lr0 = 0.01;
    ly::train::Optimizer oe(ly::train::make_param_groups(*ne, 5e-4), oo), og(ly::train::make_param_groups(*ng, 5e-4), oo);
    auto pne = ne->named_parameters(), png = ng->named_parameters();
    auto bne = ne->buffers(), bng = ng->buffers();
    REQUIRE(pne.size() == png.size());
    auto is_decoder = [](const std::string& key) { return key.rfind("decoder.", 0) == 0; };
    std::vector<std::map<std::string, int>> layouts;
    auto first = [](int& at, int i) { if (at < 0) at = i; };
    int loss_at = -1, grad_at = -1, param_at = -1, buffer_at = -1, skipped = 0;
    std::string grad_what, param_what;
    for (int i = 0; i < steps; ++i) {
      const auto& x = inputs[static_cast<size_t>(i) % inputs.size()];
      std::vector<torch::Tensor> fed;
      torch::Tensor le, lg;
      eager.run_step(ne, [&] {
        // The eager copy's step in two parts, so that its region's backward takes the very tensors fed to the graph
        // copy's (a copy of a gradient in another layout could sum in another order, session 35): the decoder's
        // backward into leaves cut from the maps (and into the decoder's parameters), then the region's from them.
        std::vector<torch::Tensor> maps, leaves;
        {
          auto guard = pe.autocast();
          auto out = eager.forward(ne, x, EncoderRegion{});
          maps = out.features;
          if (layouts.size() < maps.size()) layouts.resize(maps.size());
          for (size_t k = 0; k < maps.size(); ++k) {
            leaves.push_back(maps[k].detach().requires_grad_(maps[k].requires_grad()));
            if (!maps[k].requires_grad()) continue;
            leaves.back().register_hook([&layouts, k, i](const torch::Tensor& g) {  // the layout the decoder hands over
              std::string l = "[";
              for (auto st : g.strides()) l += std::to_string(st) + " ";
              l.back() = ']';
              if (!layouts[k].count(l)) layouts[k][l] = i;  // the first step it was seen at
            });
          }
          ly::nn::detr::DFineNetOutput cut{leaves, out.decoder, out.input_hw, std::nullopt};
          torch::manual_seed(1000 + i);  // the decoder's denoising draws, alike in both copies
          le = loss_of(cut, i);
        }
        pe.scale(le).backward();
        fed.assign(leaves.size(), torch::Tensor());
        for (size_t k = 0; k < leaves.size(); ++k)
          if (leaves[k].requires_grad())  // zeros: a map the loss did not reach
            fed[k] = leaves[k].grad().defined() ? leaves[k].grad() : torch::zeros_like(leaves[k]);
        backward_from(maps, fed);
      }, /*window_start=*/true);
      graph.run_step(ng, [&] {
        std::vector<torch::Tensor> maps;
        {
          auto guard = pg.autocast();
          auto out = graph.forward(ng, x, EncoderRegion{});
          torch::manual_seed(1000 + i);
          lg = loss_of(out, i).detach();  // the decoder on the replayed maps; its own backward is not run
          // The fed gradient carries the eager copy's loss scale; this copy's GradScaler creates its state at its first
          // scale() (session 53's H100 run threw at step() without it) and then moves in step with the eager one's.
          (void)pg.scale(lg);
          maps = out.features;
        }
        backward_from(maps, fed);
      }, /*window_start=*/true);
      if (!le.detach().equal(lg)) first(loss_at, i);
      {
        torch::NoGradGuard no_grad;
        // Checked before any is given: the decoder's parameters include shared ones (DEIMv2's shared box head is one
        // module under three names, dec_bbox_head.0-2), which named_parameters() lists once per name.
        for (size_t k = 0; k < png.size(); ++k)
          if (is_decoder(png[k].key()))
            REQUIRE_MESSAGE(!png[k].value().grad().defined(), "step " << i << ": " << png[k].key() << " of the graph copy's decoder got a gradient");
        int differing = 0;
        for (size_t k = 0; k < pne.size(); ++k) {
          auto& e = pne[k].value();
          auto& g = png[k].value();
          if (is_decoder(pne[k].key())) {
            if (e.grad().defined()) g.mutable_grad() = e.grad().detach().clone();
            continue;
          }
          const auto &ge = e.grad(), &gg = g.grad();
          if (ge.defined() != gg.defined() || (ge.defined() && !ge.equal(gg))) {
            first(grad_at, i);
            if (grad_at == i && ++differing <= 6) grad_what += " " + pne[k].key();
          }
        }
      }
      const bool stepped_e = pe.step(oe), stepped_g = pg.step(og);
      skipped += !stepped_e;
      CHECK_MESSAGE(stepped_e == stepped_g, "step " << i << ": the GradScalers decided differently");
      pe.update();
      pg.update();
      oe.zero_grad();
      og.zero_grad();
      for (size_t k = 0; k < pne.size(); ++k)
        if (!pne[k].value().equal(png[k].value())) {
          first(param_at, i);
          if (param_at == i && param_what.empty()) param_what = pne[k].key();
        }
      for (size_t k = 0; k < bne.size(); ++k)
        if (!bne[k].equal(bng[k])) first(buffer_at, i);
    }
    for (size_t k = 0; k < layouts.size(); ++k) {
      std::string all;
      for (const auto& [l, at] : layouts[k]) all += " " + l + " (first at step " + std::to_string(at) + ")";
      MESSAGE("map " << k << ": " << layouts[k].size() << " gradient layout(s):" << all);
    }
    MESSAGE("DEIMv2-atto lockstep through the trainer's loop, " << steps << " steps (" << skipped
            << " skipped by the GradScaler): first differing step (-1: never): loss " << loss_at << ", region gradients "
            << grad_at << grad_what << ", parameters " << param_at << " " << param_what << ", buffers " << buffer_at);
    CHECK(graph.report()["replayed_steps"] == steps - 2);  // steps 0, 1 eager; the third sighting is captured
    CHECK(skipped < steps / 2);  // the loss scale settles: most steps update the parameters
    CHECK(loss_at == -1);
    CHECK(grad_at == -1);
    CHECK(param_at == -1);
    CHECK(buffer_at == -1);
  }
  // Session 42 (H100, 503ae1e, the kit's graph case): with DEIMv2 embedding its reference boxes once, eager's 10
  // training steps reproduced their losses bit for bit and the graph run's losses lay 1.9e-3 from all three eager
  // runs alike. Session 44 (H200, 07aad7e): the kit's case passed, its graph run equal bit for bit to one of three
  // eager runs that all differed from each other; and this case's first form (each copy's decoder computing its own
  // gradient into the region) saw the region's outputs equal at every step but the gradient arriving at them differ
  // from step 2 while the two eager copies agreed there. The region alone into a plain loss is exact (the case
  // above), so the suspect is the decoder's own backward: grid_sample's gradient (deformable attention) adds with
  // atomics on CUDA, so two eager copies can agree by chance while a third differs.
  // This form separates the two. Three copies of DEIMv2-atto at the same parameters, two eager and one through
  // CudaGraph<> (backbone + encoder recorded at the third step); each step all three take the same batch; the first
  // eager copy's decoder turns its region outputs into the gradient arriving at them (denoising draws seeded), and
  // that one gradient is fed into all three regions, so the region's backward is compared on equal inputs: its
  // outputs and every parameter's gradient, graph against the first eager copy, where the two eager copies agree.
  // Expected: no difference at all. Beside it, the decoder's gradient computed a second time from the same maps with
  // the same seed says whether the decoder's backward repeats itself (reported). Then all three take the first copy's
  // SGD step (the region's parameters; the decoder's get no gradient here) and BatchNorm statistics.
  TEST_CASE("lockstep diagnosis: DEIMv2-atto's region graphed vs eager, each fed the first eager copy's decoder gradient") {
    LRY_REQUIRE_CUDA();
    const torch::Device dev(torch::kCUDA, 0);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    const auto inputs = image_batches(3, 4, 64);
    auto loss_of = detr_decoder_loss();
    std::vector<ly::families::deimv2::DEIMv2> nets{make_deimv2_atto(), make_deimv2_atto(), make_deimv2_atto()};
    for (auto& n : nets) {
      n->to(dev);
      n->train();
    }
    auto cfg = ly::parse_args({"cuda_graph=true", "amp=true", "amp_dtype=float16", "device=cuda"});
    cap::Eager eager1, eager2;
    cap::CudaGraph<> graph;
    eager1.setup(cfg, dev);
    eager2.setup(cfg, dev);
    graph.setup(cfg, dev);
    const double scale = 1024.0;  // a loss scale that keeps this loss's float16 gradients finite
    // The decoder's gradient with respect to the region's maps (leaves cut from them: the decoder's parameters get none).
    auto decoder_grad = [&](const ly::nn::detr::DFineNetOutput& out, int i) {
      std::vector<torch::Tensor> leaves;
      for (const auto& f : out.features) leaves.push_back(f.detach().requires_grad_(true));
      ly::nn::detr::DFineNetOutput cut{leaves, out.decoder, out.input_hw, std::nullopt};
      torch::manual_seed(1000 + i);  // the decoder's denoising draws, alike in every call
      torch::Tensor loss;
      {
        ly::precision::AutocastGuard guard(at::kHalf, true);
        loss = loss_of(cut, i) * scale;
      }
      auto g = torch::autograd::grad({loss}, leaves, {}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k)
        if (!g[k].defined()) g[k] = torch::zeros_like(leaves[k]);
      return g;
    };
    auto same = [](const torch::Tensor& a, const torch::Tensor& b) { return a.defined() == b.defined() && (!a.defined() || a.equal(b)); };
    std::vector<torch::Tensor> fed;  // this step's gradient into the region, from the first eager copy's decoder
    int decoder_repeat_differs = 0;
    std::string decoder_what;
    auto step = [&](auto& capture, ly::families::deimv2::DEIMv2& net, int i, bool first_copy) {
      std::vector<torch::Tensor> outs;
      capture.run_step(net, [&] {
        outs.clear();  // a step re-run eager after a failed replay starts again
        ly::nn::detr::DFineNetOutput out;
        {
          ly::precision::AutocastGuard guard(at::kHalf, true);
          out = capture.forward(net, inputs[static_cast<size_t>(i) % inputs.size()], EncoderRegion{});
        }
        for (const auto& f : out.features) outs.push_back(f.detach().clone());
        if (first_copy) {
          fed = decoder_grad(out, i);
          const auto again = decoder_grad(out, i);
          for (size_t k = 0; k < fed.size(); ++k)
            if (!fed[k].equal(again[k])) {
              if (decoder_repeat_differs++ == 0)
                decoder_what = "step " + std::to_string(i) + " map " + std::to_string(k) + ", max |d| " +
                               std::to_string((fed[k] - again[k]).abs().max().item<double>());
              break;
            }
        }
        backward_from(out.features, fed);
      }, /*window_start=*/true);
      return outs;
    };
    auto p1 = nets[0]->named_parameters(), p2 = nets[1]->named_parameters(), pg = nets[2]->named_parameters();
    auto b1 = nets[0]->buffers(), b2 = nets[1]->buffers(), bg = nets[2]->buffers();
    int first_forward = -1, first_grad = -1;
    std::string forward_what, grad_what;
    for (int i = 0; i < 12; ++i) {
      const auto o1 = step(eager1, nets[0], i, true), o2 = step(eager2, nets[1], i, false), og = step(graph, nets[2], i, false);
      for (size_t k = 0; k < o1.size() && first_forward < 0; ++k)
        if (same(o1[k], o2[k]) && !same(o1[k], og.at(k))) {
          first_forward = i;
          forward_what = "map " + std::to_string(k);
        }
      std::string graph_only;
      int graph_only_n = 0, eager_noise_n = 0, with_grad = 0;
      bool nonfinite = false;
      for (size_t k = 0; k < p1.size(); ++k) {
        const auto &g1 = p1[k].value().grad(), &g2 = p2[k].value().grad(), &gg = pg[k].value().grad();
        if (g1.defined()) ++with_grad;
        if (g1.defined() && !torch::isfinite(g1).all().item<bool>()) nonfinite = true;
        if (!same(g1, g2)) {
          ++eager_noise_n;
          continue;
        }
        if (!same(g1, gg)) {
          if (++graph_only_n <= 8)
            graph_only += (graph_only.empty() ? "" : " ") + p1[k].key() + "(" +
                          (g1.defined() && gg.defined() ? std::to_string((g1 - gg).abs().max().item<double>()) : std::string("undefined")) + ")";
        }
      }
      REQUIRE_MESSAGE(with_grad > 0, "step " << i << ": no parameter of the region received a gradient");
      if (graph_only_n > 0 && first_grad < 0) {
        first_grad = i;
        grad_what = std::to_string(graph_only_n) + " of " + std::to_string(with_grad) + " parameters, the eager copies equal there (" +
                    std::to_string(eager_noise_n) + " others differ between the eager copies): " + graph_only;
      }
      REQUIRE_MESSAGE(!nonfinite, "step " << i << ": a non-finite gradient at loss scale " << scale);
      torch::NoGradGuard ng;
      for (size_t k = 0; k < p1.size(); ++k) {
        auto& p = p1[k].value();
        if (p.grad().defined()) p.sub_(p.grad() * (0.01 / scale));
        p2[k].value().copy_(p);
        pg[k].value().copy_(p);
        for (auto* d : {&p1, &p2, &pg}) (*d)[k].value().mutable_grad() = torch::Tensor();
      }
      for (size_t k = 0; k < b1.size(); ++k) {
        b2[k].copy_(b1[k]);
        bg[k].copy_(b1[k]);
      }
    }
    CHECK(graph.report()["replayed_steps"] == 10);  // steps 0, 1 eager; the third sighting is captured
    MESSAGE("DEIMv2-atto lockstep, 12 steps, one decoder gradient fed to all three regions: region outputs first differ at step "
            << first_forward << " " << forward_what << "; region parameter gradients at step " << first_grad << " " << grad_what
            << " (-1: never). The decoder's gradient into the region, computed twice from the same maps and seed, differed at "
            << decoder_repeat_differs << " of 12 steps" << (decoder_what.empty() ? "" : " (first: " + decoder_what + ")"));
    CHECK(first_forward == -1);
    CHECK(first_grad == -1);
  }

  // A forced failure at step 5: one warning, the step undone (buffers restored, partial gradients dropped)
  // and re-run eager, eager for the rest of the run; the whole run then equals an eager run.
  template <class Region = cap::whole_network, class MakeNet, class LossFn>
  void check_fault_recovery(MakeNet make_net, const std::vector<torch::Tensor>& inputs, LossFn loss_of,
                            cap::ReplayFault fault, const std::string& reason, int replayed) {
    std::vector<std::string> lines;
    auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines.emplace_back(m); });
    const Trajectory g = run_steps<cap::CudaGraph<>, Region>(make_net, inputs, loss_of, 10, [fault](int step, cap::CudaGraph<>& c) {
      if (step == 4) c.fail_next_replay_for_testing(fault);
    });
    ly::log::set_sink(prev);
    const Trajectory e1 = run_steps<cap::Eager, Region>(make_net, inputs, loss_of, 10);
    const Trajectory e2 = run_steps<cap::Eager, Region>(make_net, inputs, loss_of, 10);
    int warnings = 0;
    std::string warning;
    for (auto& l : lines)
      if (l.rfind(cap::CudaGraph<>::fallback_prefix, 0) == 0) ++warnings, warning = l;
    CHECK(warnings == 1);
    CHECK(warning.find(reason) != std::string::npos);
    CHECK(warning.find("training continues eager for the rest of the run") != std::string::npos);
    CHECK(g.report["replayed_steps"] == replayed);
    CHECK(g.report["eager_steps"] == 7);  // 0, 1, then 5 (re-run) to 9
    CHECK(g.report["cuda_graph"] == true);
    CHECK(torch::isfinite(g.losses).all().item<bool>());
    const bool reproducible = e1.losses.equal(e2.losses) && all_equal(e1.params, e2.params) && all_equal(e1.buffers, e2.buffers);
    if (reproducible) {
      CHECK(g.losses.equal(e1.losses));
      CHECK(all_equal(g.params, e1.params));
      CHECK(all_equal(g.buffers, e1.buffers));  // restored: the failed step did not move BatchNorm twice
    } else {
      const double spread = max_abs_diff(e1.losses, e2.losses);
      MESSAGE("eager is not bit-reproducible here (loss spread " << spread << ")");
      CHECK(max_abs_diff(g.losses, e1.losses) <= 2 * spread + 1e-6);
    }
  }

  TEST_CASE("a forced backward replay failure: one warning, buffers restored, eager for the rest; the run equals eager") {
    LRY_REQUIRE_CUDA();
    check_fault_recovery(make_resnet18, image_batches(2, 16, 224), resnet_loss(), cap::ReplayFault::backward,
                         "backward replay failed", 4);  // 2, 3, 4 and the forward of 5
  }

  TEST_CASE("a forced forward replay failure after the launch restores BatchNorm statistics; the run equals eager") {
    LRY_REQUIRE_CUDA();
    check_fault_recovery(make_resnet18, image_batches(2, 16, 224), resnet_loss(), cap::ReplayFault::forward_after_launch,
                         "this step's BatchNorm statistics restored", 3);
  }

  TEST_CASE("a forced backward replay failure in a backbone_encoder region: the eager decoder's gradients are not doubled") {
    LRY_REQUIRE_CUDA();
    auto make = [] {
      torch::manual_seed(0);
      return lry_test::TokenNet(3, 16);
    };
    torch::manual_seed(12);
    auto labels = torch::randint(0, 3, {16}, torch::kLong).to(torch::kCUDA);
    auto loss = [labels](const torch::Tensor& logits, int) {
      return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), labels);
    };
    check_fault_recovery<cap::region_t<ly::CaptureRegion::backbone_encoder>>(make, image_batches(2, 16, 64), loss,
                                                                          cap::ReplayFault::backward, "backward replay failed", 4);
  }
}
