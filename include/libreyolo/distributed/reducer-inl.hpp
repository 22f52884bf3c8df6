#pragma once
// Definitions of reducer.hpp (core/api.hpp): included by reducer.hpp when header-only, compiled once otherwise.
#include <libreyolo/distributed/reducer.hpp>

namespace libreyolo::dist {

LIBREYOLO_INLINE GradReducer::GradReducer(Context& ctx, const std::vector<torch::Tensor>& params, size_t bucket_bytes) : ctx_(ctx) {
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

LIBREYOLO_INLINE GradReducer::~GradReducer() {
  for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hooks_[k]);
}

LIBREYOLO_INLINE void GradReducer::arm() {
  std::lock_guard<std::mutex> lk(mu_);
  armed_ = true;
  started_in_backward_ = 0;
}

LIBREYOLO_INLINE void GradReducer::finish() {
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

LIBREYOLO_INLINE torch::Tensor GradReducer::slice(size_t k) {
  const auto& s = slots_[k];
  return buckets_[s.bucket].flat.narrow(0, s.offset, params_[k].numel()).view(params_[k].sizes());
}

LIBREYOLO_INLINE void GradReducer::fill(size_t k, const torch::Tensor& g) {
  if (seen_.size() != params_.size()) seen_.assign(params_.size(), false);
  seen_[k] = true;
  auto dst = slice(k);
  const auto& acc = params_[k].grad();
  if (g.defined() && acc.defined()) torch::add_out(dst, acc, g);
  else if (g.defined()) dst.copy_(g);
  else if (acc.defined()) dst.copy_(acc);
  else dst.zero_();
}

LIBREYOLO_INLINE void GradReducer::on_grad(size_t k, const torch::Tensor& g) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!armed_ || seen(k)) return;
  torch::NoGradGuard ng;
  fill(k, g);
  auto& b = buckets_[slots_[k].bucket];
  if (--b.missing == 0) started_in_backward_ += launch_ready();
}

LIBREYOLO_INLINE size_t GradReducer::launch_ready() {
  size_t started = 0;
  while (next_ < buckets_.size() && buckets_[next_].missing == 0) {
    auto& b = buckets_[next_++];
    b.flat.div_(static_cast<double>(ctx_.world()));  // pre-divided: the sum is the mean
    b.pending = ctx_.all_reduce_sum_async(b.flat);
    ++started;
  }
  return started;
}

}  // namespace libreyolo::dist
