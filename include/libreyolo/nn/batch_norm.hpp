#pragma once
// BatchNorm2d with an optional synchronised mode (SyncBatchNorm): while a BatchNormSync is installed
// (a data-parallel run with sync_bn=true), training-mode batch statistics are taken over the global
// batch of every rank instead of this rank's share, so N ranks normalise exactly as one process on
// the whole batch would. Otherwise it computes what torch::nn::BatchNorm2d does (torch::batch_norm),
// with the same parameter and buffer names, so checkpoints are interchangeable. (It is its own module
// rather than a subclass: Debian's LibTorch does not export the base's pretty_print for a vtable.)
//
// Forward: each rank sums x and x² per channel (in double) and the counts; one all-reduce of
// [sum, sum², n] gives the global mean and biased variance; running statistics take the unbiased one.
// Backward: one all-reduce of [Σdy, Σdy·x̂] per layer; dx = w·invstd·(dy − Σdy/n − x̂·Σdy·x̂/n) with the
// global sums; the weight and bias gradients stay local (the data-parallel gradient average sums them).
#include <torch/torch.h>

#include <memory>
#include <ostream>

namespace libreyolo::nn {

// What a synchronised BatchNorm needs from the data-parallel layer: an in-place sum over the ranks.
struct BatchNormSync {
  virtual ~BatchNormSync() = default;
  virtual void all_reduce_sum(torch::Tensor& t) = 0;
};

// The process-wide sync (one data-parallel group per process); null = every BatchNorm is local.
inline BatchNormSync*& batch_norm_sync() {
  static BatchNormSync* active = nullptr;
  return active;
}

// Installs `s` for its lifetime (the trainer holds one while a sync_bn=true run is alive).
class BatchNormSyncScope {
 public:
  explicit BatchNormSyncScope(BatchNormSync* s) : previous_(batch_norm_sync()) { batch_norm_sync() = s; }
  ~BatchNormSyncScope() { batch_norm_sync() = previous_; }
  BatchNormSyncScope(const BatchNormSyncScope&) = delete;
  BatchNormSyncScope& operator=(const BatchNormSyncScope&) = delete;

 private:
  BatchNormSync* previous_;
};

namespace detail {
inline std::vector<int64_t> stat_dims(const torch::Tensor& x) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}
inline torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& like) {
  std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

struct SyncBatchNormFn : torch::autograd::Function<SyncBatchNormFn> {
  // x (N, C, ...), weight and bias (C); running_mean/var updated in place; momentum < 0 = cumulative.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               torch::Tensor bias, torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps) {
    BatchNormSync* sync = batch_norm_sync();
    TORCH_CHECK(sync != nullptr, "SyncBatchNorm forward without an installed BatchNormSync");
    const auto dims = stat_dims(x);
    const auto xf = x.to(torch::kFloat);
    const double local_n = static_cast<double>(x.numel() / x.size(1));
    auto stats = torch::cat({xf.sum(dims, false, torch::kDouble), xf.square().sum(dims, false, torch::kDouble),
                             torch::full({1}, local_n, xf.options().dtype(torch::kDouble))});
    sync->all_reduce_sum(stats);
    const int64_t c = x.size(1);
    const auto n = stats.narrow(0, 2 * c, 1);
    const auto mean = stats.narrow(0, 0, c) / n;
    const auto var = (stats.narrow(0, c, c) / n - mean.square()).clamp_min(0.0);
    const auto invstd = (var + eps).rsqrt();
    {
      torch::NoGradGuard ng;
      if (running_mean.defined()) {
        running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
        running_var.mul_(1.0 - momentum).add_((var * n / (n - 1).clamp_min(1.0)).to(running_var.scalar_type()), momentum);
      }
    }
    const auto mean_f = mean.to(torch::kFloat), invstd_f = invstd.to(torch::kFloat);
    const auto xhat = (xf - per_channel(mean_f, x)) * per_channel(invstd_f, x);
    ctx->save_for_backward({xhat, weight, invstd_f, n.to(torch::kFloat)});
    return (xhat * per_channel(weight.to(torch::kFloat), x) + per_channel(bias.to(torch::kFloat), x)).to(x.scalar_type());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    BatchNormSync* sync = batch_norm_sync();
    TORCH_CHECK(sync != nullptr, "SyncBatchNorm backward without an installed BatchNormSync");
    const auto saved = ctx->get_saved_variables();
    const auto &xhat = saved[0], &weight = saved[1], &invstd = saved[2], &n = saved[3];
    const auto dy = grads[0].to(torch::kFloat);
    const auto dims = stat_dims(dy);
    const auto sum_dy = dy.sum(dims), sum_dy_xhat = (dy * xhat).sum(dims);  // local: weight/bias gradients
    auto global = torch::cat({sum_dy, sum_dy_xhat});
    sync->all_reduce_sum(global);
    const int64_t c = sum_dy.size(0);
    const auto mean_dy = global.narrow(0, 0, c) / n, mean_dy_xhat = global.narrow(0, c, c) / n;
    const auto dx = (dy - per_channel(mean_dy, dy) - xhat * per_channel(mean_dy_xhat, dy)) *
                    per_channel(invstd * weight.to(torch::kFloat), dy);
    return {dx.to(grads[0].scalar_type()), sum_dy_xhat.to(weight.scalar_type()), sum_dy.to(weight.scalar_type()),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace detail

class BatchNorm2dImpl : public torch::nn::Cloneable<BatchNorm2dImpl> {
 public:
  explicit BatchNorm2dImpl(const torch::nn::BatchNorm2dOptions& o) : options(o) { reset(); }
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(torch::nn::BatchNorm2dOptions(num_features)) {}

  void reset() override {
    const int64_t c = options.num_features();
    if (options.affine()) {
      weight = register_parameter("weight", torch::ones({c}));
      bias = register_parameter("bias", torch::zeros({c}));
    }
    if (options.track_running_stats()) {
      running_mean = register_buffer("running_mean", torch::zeros({c}));
      running_var = register_buffer("running_var", torch::ones({c}));
      num_batches_tracked = register_buffer("num_batches_tracked", torch::tensor(int64_t{0}, torch::kLong));
    }
  }

  // torch::nn::BatchNorm2d's computation (same kernels), or the synchronised one while a sync is
  // installed and the module trains.
  torch::Tensor forward(const torch::Tensor& x) {
    TORCH_CHECK(x.dim() == 4, "BatchNorm2d expects a 4-D input (N, C, H, W), got ", x.dim(), "-D");
    double m = options.momentum().value_or(0.0);
    const bool track = is_training() && options.track_running_stats();
    if (track) {
      torch::NoGradGuard ng;
      num_batches_tracked.add_(1);
      if (!options.momentum().has_value()) m = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    }
    if (track && options.affine() && batch_norm_sync() != nullptr)
      return detail::SyncBatchNormFn::apply(x, weight, bias, running_mean, running_var, m, options.eps());
    return torch::batch_norm(x, weight, bias, running_mean, running_var, is_training() || !options.track_running_stats(),
                             m, options.eps(), at::globalContext().userEnabledCuDNN());
  }

  void pretty_print(std::ostream& os) const override {
    os << "libreyolo::nn::BatchNorm2d(" << options.num_features() << ", eps=" << options.eps()
       << ", momentum=" << options.momentum().value_or(-1) << ", affine=" << options.affine()
       << ", track_running_stats=" << options.track_running_stats() << ")";
  }

  torch::nn::BatchNorm2dOptions options;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};
TORCH_MODULE(BatchNorm2d);

}  // namespace libreyolo::nn
