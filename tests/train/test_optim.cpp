// Parameter groups, SGD/AdamW against LibTorch's own optimizers, gradient clipping and EMA.
#include "support.hpp"

#include <libreyolo/train/clip.hpp>
#include <libreyolo/train/ema.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <functional>
#include <set>

// Last: c10 defines its own CHECK(cond) macro; doctest's must be the one in effect.
#include "support_doctest.hpp"

using namespace libreyolo;
using namespace libreyolo::train;

namespace {

// A module type param_groups knows nothing about: its 1-D `weight` must be read as a norm scale,
// its 2-D `proj` as an ordinary decayed weight.
struct ScaleImpl : torch::nn::Module {
  torch::Tensor weight, proj, frozen;
  ScaleImpl() {
    weight = register_parameter("weight", torch::ones({4}));
    proj = register_parameter("proj", torch::ones({4, 4}));
    frozen = register_parameter("frozen", torch::ones({4}), /*requires_grad=*/false);
  }
};
TORCH_MODULE(Scale);

struct NetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(3, 4, 3).bias(false)};
  torch::nn::BatchNorm2d bn1{4};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(4, 4, 1)};
  torch::nn::LayerNorm ln{torch::nn::LayerNormOptions({4})};
  Scale scale;
  torch::nn::Linear fc{4, 2};
  NetImpl() {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("ln", ln);
    register_module("scale", scale);
    register_module("fc", fc);
  }
};
TORCH_MODULE(Net);

std::set<const void*> ids(const std::vector<torch::Tensor>& v) {
  std::set<const void*> s;
  for (const auto& t : v) s.insert(t.unsafeGetTensorImpl());
  return s;
}

std::vector<torch::Tensor> make_params(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({3, 4}), torch::randn({5}), torch::randn({2, 2, 3})};
}
std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}
void set_grads(std::vector<torch::Tensor>& ps, const std::vector<torch::Tensor>& gs) {
  for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = gs[i].defined() ? gs[i].clone() : torch::Tensor();
}
// Random grads for step k; param 1 has no grad on step 3 (it must then be skipped, state untouched).
std::vector<torch::Tensor> grads_for(const std::vector<torch::Tensor>& ps, int k) {
  torch::manual_seed(1000 + k);
  std::vector<torch::Tensor> gs;
  for (size_t i = 0; i < ps.size(); ++i) gs.push_back(i == 1 && k == 3 ? torch::Tensor() : torch::randn(ps[i].sizes()));
  return gs;
}
bool all_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Runs 10 steps of ours (group 0 with weight decay, group 1 without) against LibTorch's optimizer,
// changing lr and momentum before every step.
// exact: bit for bit; else each element within 1e-6 relative (plus 1e-9 absolute) and the largest
// difference printed (AdamW: see its case).
template <class RefOpt, class RefOptions, class SetMomentum>
void compare_with_libtorch(const OptimizerOptions& oo, double wd, SetMomentum set_ref_momentum,
                           std::function<RefOptions(double lr, double wd)> ref_options, bool exact = true) {
  auto base = make_params(7);
  auto mine = clone_params(base), ref = clone_params(base);
  Optimizer opt({{"decay", {mine[0], mine[2]}, wd, 0}, {"bias", {mine[1]}, 0, 0}}, oo);
  RefOpt ref_decay(std::vector<torch::Tensor>{ref[0], ref[2]}, ref_options(oo.lr0, wd));
  RefOpt ref_plain(std::vector<torch::Tensor>{ref[1]}, ref_options(oo.lr0, 0));
  for (int k = 0; k < 10; ++k) {
    const double lr = oo.lr0 * (1.0 + 0.1 * k), mu = 0.8 + 0.01 * k;
    for (size_t g = 0; g < 2; ++g) opt.set_lr(g, lr);
    opt.set_momentum(mu);
    for (RefOpt* r : {&ref_decay, &ref_plain}) {
      auto& o = static_cast<RefOptions&>(r->param_groups()[0].options());
      o.lr(lr);
      set_ref_momentum(o, mu);
    }
    auto gs = grads_for(base, k);
    set_grads(mine, gs);
    set_grads(ref, gs);
    opt.step();
    ref_decay.step();
    ref_plain.step();
  }
  if (exact) {
    CHECK(all_close(mine, ref));
  } else {
    double worst = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::allclose(mine[i], ref[i], 1e-6, 1e-9));
      worst = std::max(worst, (mine[i] - ref[i]).abs().max().item<double>());
    }
    MESSAGE("largest difference from LibTorch's optimizer after 10 steps: " << worst);
  }
  CHECK_FALSE(torch::allclose(mine[0], base[0]));  // the parameters really moved
}

}  // namespace

TEST_CASE("make_param_groups: decay / norm / bias by module type, 1-D weight fallback, frozen left out") {
  Net net;
  auto groups = make_param_groups(*net, 5e-4);
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].name == "decay");
  CHECK(groups[1].name == "norm");
  CHECK(groups[2].name == "bias");
  CHECK(groups[0].weight_decay == 5e-4);
  CHECK(groups[1].weight_decay == 0);
  CHECK(groups[2].weight_decay == 0);
  CHECK(ids(groups[0].params) ==
        ids({net->conv1->weight, net->conv2->weight, net->fc->weight, net->scale->proj}));
  CHECK(ids(groups[1].params) == ids({net->bn1->weight, net->ln->weight, net->scale->weight}));
  CHECK(ids(groups[2].params) == ids({net->bn1->bias, net->conv2->bias, net->ln->bias, net->fc->bias}));
  CHECK(groups[0].params.size() == 4);
  CHECK(groups[1].params.size() == 3);
  CHECK(groups[2].params.size() == 4);
}

TEST_CASE("Optimizer: unknown name and bad values are ConfigErrors naming them") {
  auto ps = clone_params(make_params(1));
  OptimizerOptions o;
  o.name = "Adam";
  CHECK_THROWS_WITH_AS(Optimizer({{"decay", ps, 0, 0}}, o),
                       doctest::Contains("'Adam' is not supported; allowed: SGD, AdamW"), ConfigError);
  o.name = "adamw";  // case-insensitive
  Optimizer ok({{"decay", ps, 0, 0}}, o);
  CHECK(ok.name() == "AdamW");
  CHECK(ok.lr(0) == doctest::Approx(0.01));  // unset group lr starts at lr0
  CHECK_THROWS_AS(ok.set_momentum(1.5), ConfigError);
  CHECK_THROWS_AS(ok.set_lr(3, 0.1), Error);
}

TEST_CASE("SGD matches torch::optim::SGD (nesterov on/off, weight decay, changing lr/momentum)") {
  for (bool nesterov : {true, false})
    for (int foreach : {0, 1}) {
      CAPTURE(nesterov);
      CAPTURE(foreach);
      OptimizerOptions oo;
      oo.name = "SGD";
      oo.lr0 = 0.05;
      oo.nesterov = nesterov;
      oo.foreach = foreach;
      compare_with_libtorch<torch::optim::SGD, torch::optim::SGDOptions>(
          oo, 5e-2, [](torch::optim::SGDOptions& o, double mu) { o.momentum(mu); },
          [&](double lr, double wd) {
            return torch::optim::SGDOptions(lr).momentum(0.8).nesterov(nesterov).weight_decay(wd);
          });
    }
}

// Every AdamW form takes the last update as PyTorch's capturable AdamW does, p += m / (denom / step size),
// the only form a step size held in a device tensor allows in multi-tensor calls (so that cuda_graph=step's
// AdamW equals eager's bit for bit on the GPU); LibTorch's AdamW does p += step size * (m / denom). The two
// round differently in the last bit, so here the check is per element to 1e-6 relative, not bit for bit;
// the moments and everything before the last line are the same arithmetic.
TEST_CASE("AdamW matches torch::optim::AdamW (weight decay, changing lr/beta1) to rounding: the capturable form's last update") {
  for (int foreach : {0, 1}) {
    CAPTURE(foreach);
    OptimizerOptions oo;
    oo.name = "AdamW";
    oo.lr0 = 0.01;
    oo.beta2 = 0.99;
    oo.eps = 1e-8;
    oo.foreach = foreach;
    compare_with_libtorch<torch::optim::AdamW, torch::optim::AdamWOptions>(
        oo, 0.1, [](torch::optim::AdamWOptions& o, double mu) { o.betas({mu, 0.99}); },
        [](double lr, double wd) {
          return torch::optim::AdamWOptions(lr).betas({0.8, 0.99}).eps(1e-8).weight_decay(wd);
        },
        /*exact=*/false);
  }
}

TEST_CASE("Optimizer: foreach path gives the same parameters as the per-tensor loop") {
  for (const char* name : {"SGD", "AdamW"}) {
    CAPTURE(name);
    auto base = make_params(3);
    auto a = clone_params(base), b = clone_params(base);
    OptimizerOptions oo;
    oo.name = name;
    oo.foreach = 0;
    Optimizer loop({{"decay", {a[0], a[2]}, 1e-2, 0}, {"bias", {a[1]}, 0, 0}}, oo);
    oo.foreach = 1;
    Optimizer multi({{"decay", {b[0], b[2]}, 1e-2, 0}, {"bias", {b[1]}, 0, 0}}, oo);
    CHECK_FALSE(loop.uses_foreach());
    CHECK(multi.uses_foreach());
    for (int k = 0; k < 8; ++k) {
      auto gs = grads_for(base, k);
      set_grads(a, gs);
      set_grads(b, gs);
      loop.step();
      multi.step();
    }
    CHECK(all_close(a, b));
  }
}

TEST_CASE("Optimizer::zero_grad clears or zeroes grads") {
  auto ps = clone_params(make_params(2));
  Optimizer opt({{"decay", ps, 0, 0}}, {});
  set_grads(ps, grads_for(ps, 0));
  opt.zero_grad(false);
  CHECK(ps[0].grad().defined());
  CHECK(ps[0].grad().abs().sum().item<double>() == 0.0);
  opt.zero_grad();
  CHECK_FALSE(ps[0].grad().defined());
  CHECK(opt.params().size() == 3);
}

TEST_CASE("clip_grad_norm: total norm, scaled grads, untouched when under the max") {
  auto a = torch::zeros({2}).set_requires_grad(true), b = torch::zeros({1}).set_requires_grad(true);
  auto c = torch::zeros({3}).set_requires_grad(true);  // no grad: skipped
  a.mutable_grad() = torch::tensor({3.0f, 4.0f});
  b.mutable_grad() = torch::tensor({12.0f});
  // norm = sqrt(9 + 16 + 144) = 13; factor = 6.5 / (13 + 1e-6) = 0.49999996...
  auto n = clip_grad_norm({a, b, c}, 6.5);
  CHECK(n.dim() == 0);
  CHECK(n.item<double>() == doctest::Approx(13.0).epsilon(1e-7));
  const double f = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad()[0].item<double>() == doctest::Approx(3.0 * f).epsilon(1e-6));
  CHECK(a.grad()[1].item<double>() == doctest::Approx(4.0 * f).epsilon(1e-6));
  CHECK(b.grad()[0].item<double>() == doctest::Approx(6.0).epsilon(1e-6));
  CHECK_FALSE(c.grad().defined());

  a.mutable_grad() = torch::tensor({3.0f, 4.0f});
  b.mutable_grad() = torch::tensor({12.0f});
  auto n2 = clip_grad_norm({a, b}, 20.0);
  CHECK(n2.item<double>() == doctest::Approx(13.0).epsilon(1e-7));
  CHECK(torch::equal(a.grad(), torch::tensor({3.0f, 4.0f})));
  CHECK(torch::equal(b.grad(), torch::tensor({12.0f})));
}

namespace {
struct TinyImpl : torch::nn::Module {
  torch::nn::Linear fc{2, 1};
  torch::nn::BatchNorm1d bn{1};
  TinyImpl() {
    register_module("fc", fc);
    register_module("bn", bn);
  }
};
TORCH_MODULE(Tiny);
// One Linear registered under three names (as DEIMv2 atto..pico's box head under dec_bbox_head.0/1/2), one not.
struct SharedImpl : torch::nn::Module {
  torch::nn::Linear head{2, 1}, own{2, 1};
  SharedImpl() {
    for (const char* n : {"head0", "head1", "head2"}) register_module(n, head);
    register_module("own", own);
  }
};
TORCH_MODULE(Shared);
}  // namespace

TEST_CASE("ModelEMA: copies at construction, decay ramp, update of a weight and a BN running_mean") {
  for (int foreach : {0, 1}) {
    CAPTURE(foreach);
    Tiny model, copy;
    torch::NoGradGuard ng;
    model->fc->weight.fill_(1.0);
    model->bn->running_mean.fill_(2.0);
    ModelEMA ema(copy.ptr(), *model, /*decay=*/0.5, /*tau=*/1.0, foreach);
    CHECK(ema.uses_foreach() == (foreach == 1));
    CHECK(torch::equal(copy->fc->weight, model->fc->weight));
    CHECK(torch::equal(copy->fc->bias, model->fc->bias));
    CHECK_FALSE(copy->is_training());
    CHECK_FALSE(copy->fc->weight.requires_grad());
    CHECK(ema.current_decay() == 0.0);

    model->fc->weight.fill_(3.0);
    model->bn->running_mean.fill_(10.0);
    model->bn->num_batches_tracked.fill_(7);
    ema.update(*model);
    // d1 = 0.5 * (1 - e^-1) = 0.31606027941; e = d*1 + (1-d)*3 = 2.36787944117; rm = d*2 + (1-d)*10
    CHECK(ema.updates() == 1);
    CHECK(ema.current_decay() == doctest::Approx(0.31606027941));
    CHECK(copy->fc->weight[0][1].item<double>() == doctest::Approx(2.36787944117));
    CHECK(copy->bn->running_mean[0].item<double>() == doctest::Approx(7.47151776469));
    CHECK(copy->bn->num_batches_tracked.item<int64_t>() == 7);

    ema.update(*model);
    // d2 = 0.5 * (1 - e^-2) = 0.43233235838; e = d2*2.36787944117 + (1-d2)*3 = 2.72671382802
    CHECK(ema.current_decay() == doctest::Approx(0.43233235838));
    CHECK(copy->fc->weight[0][0].item<double>() == doctest::Approx(2.72671382802));
  }
  ModelEMA standard(Tiny().ptr(), *Tiny());
  CHECK(standard.current_decay() == 0.0);
}

TEST_CASE("ModelEMA: a tensor under k names is averaged k times per update (decay d^k), as the original's state-dict walk") {
  // training/ema.py ModelEMA.update walks ema.state_dict(), which lists a shared module under each name.
  for (int foreach : {0, 1})
    for (bool device_form : {false, true}) {
      CAPTURE(foreach);
      CAPTURE(device_form);
      Shared model, copy;
      torch::NoGradGuard ng;
      model->head->weight.fill_(1.0), model->own->weight.fill_(1.0);
      ModelEMA ema(copy.ptr(), *model, /*decay=*/0.5, /*tau=*/1.0, foreach);
      model->head->weight.fill_(3.0), model->own->weight.fill_(3.0);
      if (device_form) {
        ema.begin_device_update();
        ema.device_update(*model);
      } else {
        ema.update(*model);
      }
      const double d = 0.5 * (1 - std::exp(-1.0));
      CHECK(copy->own->weight[0][0].item<double>() == doctest::Approx(d * 1 + (1 - d) * 3).epsilon(1e-6));
      // three updates in a row: d^3 * 1 + (1 - d^3) * 3
      CHECK(copy->head->weight[0][0].item<double>() == doctest::Approx(d * d * d * 1 + (1 - d * d * d) * 3).epsilon(1e-6));
      CHECK(copy->named_parameters()["head1.weight"].is_same(copy->head->weight));  // still one tensor
    }
}

LRY_GPU_SUITE {
  TEST_CASE("Optimizer/clip/EMA on CUDA: auto foreach path matches the CPU loop") {
    LRY_REQUIRE_CUDA();
    const torch::Device cuda(torch::kCUDA);
    for (const char* name : {"SGD", "AdamW"}) {
      CAPTURE(name);
      auto base = make_params(11);
      auto cpu = clone_params(base);
      std::vector<torch::Tensor> gpu;
      for (const auto& p : base) gpu.push_back(p.to(cuda).detach().set_requires_grad(true));
      OptimizerOptions oo;
      oo.name = name;
      Optimizer on_cpu({{"decay", {cpu[0], cpu[2]}, 1e-2, 0}, {"bias", {cpu[1]}, 0, 0}}, oo);
      Optimizer on_gpu({{"decay", {gpu[0], gpu[2]}, 1e-2, 0}, {"bias", {gpu[1]}, 0, 0}}, oo);
      CHECK_FALSE(on_cpu.uses_foreach());
      CHECK(on_gpu.uses_foreach());
      for (int k = 0; k < 8; ++k) {
        auto gs = grads_for(base, k);
        set_grads(cpu, gs);
        std::vector<torch::Tensor> gs_gpu;
        for (const auto& g : gs) gs_gpu.push_back(g.defined() ? g.to(cuda) : g);
        set_grads(gpu, gs_gpu);
        auto n_cpu = clip_grad_norm(cpu, 2.0), n_gpu = clip_grad_norm(gpu, 2.0);
        CHECK(n_gpu.is_cuda());
        CHECK(n_gpu.item<double>() == doctest::Approx(n_cpu.item<double>()).epsilon(1e-5));
        on_cpu.step();
        on_gpu.step();
      }
      for (size_t i = 0; i < cpu.size(); ++i) CHECK(torch::allclose(gpu[i].cpu(), cpu[i], 1e-5, 1e-6));
    }
    Tiny model, copy;
    model->to(cuda);
    copy->to(cuda);
    ModelEMA ema(copy.ptr(), *model, 0.5, 1.0);
    CHECK(ema.uses_foreach());
    {
      torch::NoGradGuard ng;
      model->fc->weight.fill_(3.0);
    }
    const double before = copy->fc->weight[0][0].item<double>();
    ema.update(*model);
    CHECK(copy->fc->weight[0][0].item<double>() ==
          doctest::Approx(0.31606027941 * before + (1 - 0.31606027941) * 3.0));
  }
}
