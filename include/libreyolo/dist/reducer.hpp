#pragma once
// Gradient averaging overlapped with backward, in the manner of DDP's reducer: parameters are grouped
// (in reverse registration order, which is roughly the order their gradients become ready) into flat
// buckets of up to `bucket_bytes`. A hook on each parameter copies its gradient into its bucket as soon
// as autograd produces it; a bucket whose gradients are all in starts its all-reduce at once, while
// backward goes on with the earlier layers. Buckets start strictly in index order, so every rank issues
// the same collectives in the same order even if hooks fire in a different order.
//
// Use: arm() before a backward whose gradients are to be averaged (the last micro-batch of an
// accumulation), finish() after it: it starts the buckets nobody completed (parameters unused in this
// backward take part as their current gradient, or zeros), waits, and writes the means into .grad.
// Hooks of a backward that was not armed do nothing (gradients simply accumulate locally).
#include <libreyolo/dist/process_group.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <mutex>

namespace libreyolo::dist {

class GradReducer {
 public:
  GradReducer(Context& ctx, const std::vector<torch::Tensor>& params, size_t bucket_bytes = 25u << 20) : ctx_(ctx) {
    for (const auto& p : params)
      if (p.requires_grad()) params_.push_back(p);
    slots_.resize(params_.size());
    // Reverse order: the last layers' gradients arrive first.
    for (size_t k = params_.size(); k-- > 0;) {
      const auto& p = params_[k];
      const bool fits = !buckets_.empty() && buckets_.back().dtype == p.scalar_type() &&
                        buckets_.back().device == p.device() &&
                        (buckets_.back().numel + p.numel()) * static_cast<int64_t>(p.element_size()) <=
                            static_cast<int64_t>(bucket_bytes);
      if (!fits) buckets_.push_back(Bucket{p.scalar_type(), p.device()});
      auto& b = buckets_.back();
      slots_[k] = Slot{buckets_.size() - 1, b.numel};
      b.numel += p.numel();
      b.members.push_back(k);
    }
    for (auto& b : buckets_) {
      b.flat = torch::zeros({b.numel}, torch::TensorOptions().dtype(b.dtype).device(b.device));
      b.missing = b.members.size();
    }
    for (size_t k = 0; k < params_.size(); ++k)
      hooks_.push_back(params_[k].register_hook([this, k](const torch::Tensor& g) { on_grad(k, g); }));
  }
  ~GradReducer() {
    for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hooks_[k]);
  }
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void arm() {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = true;
    started_in_backward_ = 0;
  }
  bool armed() const { return armed_; }

  void finish() {
    torch::NoGradGuard ng;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!armed_) return;
      for (auto& b : buckets_) {
        if (b.pending) continue;
        for (size_t k : b.members)
          if (!seen(k)) fill(k, torch::Tensor());
        b.missing = 0;
      }
      launch_ready();
      armed_ = false;
    }
    for (auto& b : buckets_) {
      b.pending();
      b.pending = nullptr;
      b.missing = b.members.size();
      for (size_t k : b.members) {
        auto& p = params_[k];
        auto mean = slice(k);
        if (p.grad().defined()) p.mutable_grad().copy_(mean);
        else p.mutable_grad() = mean.clone();
      }
    }
    std::fill(seen_.begin(), seen_.end(), false);
    next_ = 0;
  }

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets whose all-reduce started inside backward (from a hook) in the last armed step: > 0 means
  // communication overlapped with the rest of backward.
  size_t started_in_backward() const { return started_in_backward_; }

 private:
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
  };
  struct Bucket {
    at::ScalarType dtype;
    torch::Device device;
    int64_t numel = 0;
    std::vector<size_t> members;
    torch::Tensor flat;
    size_t missing = 0;  // gradients not yet copied in this step
    Pending pending;     // set once the all-reduce started
  };

  torch::Tensor slice(size_t k) {
    const auto& s = slots_[k];
    return buckets_[s.bucket].flat.narrow(0, s.offset, params_[k].numel()).view(params_[k].sizes());
  }
  bool seen(size_t k) const { return k < seen_.size() && seen_[k]; }
  // this step's gradient g plus what earlier micro-batches accumulated (.grad before this backward).
  void fill(size_t k, const torch::Tensor& g) {
    if (seen_.size() != params_.size()) seen_.assign(params_.size(), false);
    seen_[k] = true;
    auto dst = slice(k);
    const auto& acc = params_[k].grad();
    if (g.defined() && acc.defined()) torch::add_out(dst, acc, g);
    else if (g.defined()) dst.copy_(g);
    else if (acc.defined()) dst.copy_(acc);
    else dst.zero_();
  }

  void on_grad(size_t k, const torch::Tensor& g) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!armed_ || seen(k)) return;
    torch::NoGradGuard ng;
    fill(k, g);
    auto& b = buckets_[slots_[k].bucket];
    if (--b.missing == 0) started_in_backward_ += launch_ready();
  }
  // Starts complete buckets in index order; stops at the first incomplete one. Returns how many started.
  size_t launch_ready() {
    size_t started = 0;
    while (next_ < buckets_.size() && buckets_[next_].missing == 0) {
      auto& b = buckets_[next_++];
      b.flat.div_(static_cast<double>(ctx_.world()));  // pre-divided: the sum is the mean
      b.pending = ctx_.all_reduce_sum_async(b.flat);
      ++started;
    }
    return started;
  }

  Context& ctx_;
  std::vector<torch::Tensor> params_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;
  std::vector<bool> seen_;
  std::mutex mu_;
  bool armed_ = false;
  size_t next_ = 0;
  size_t started_in_backward_ = 0;
};

// sync_bn=true: every libreyolo::nn::BatchNorm2d in training mode takes its statistics over all ranks
// through this group's all-reduce while this object lives.
class SyncBatchNormGroup : public nn::BatchNormSync {
 public:
  explicit SyncBatchNormGroup(Context& ctx) : ctx_(ctx), scope_(this) {}
  void all_reduce_sum(torch::Tensor& t) override { ctx_.all_reduce_sum(t); }

 private:
  Context& ctx_;
  nn::BatchNormSyncScope scope_;
};

}  // namespace libreyolo::dist
