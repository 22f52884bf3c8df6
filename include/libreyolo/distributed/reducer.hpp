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
#include <libreyolo/core/api.hpp>
#include <libreyolo/distributed/process_group.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <mutex>

namespace libreyolo::dist {

class GradReducer {
 public:
  GradReducer(Context& ctx, const std::vector<torch::Tensor>& params, size_t bucket_bytes = 25u << 20);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void arm();
  bool armed() const { return armed_; }

  void finish();

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

  torch::Tensor slice(size_t k);
  bool seen(size_t k) const { return k < seen_.size() && seen_[k]; }
  // this step's gradient g plus what earlier micro-batches accumulated (.grad before this backward).
  void fill(size_t k, const torch::Tensor& g);

  void on_grad(size_t k, const torch::Tensor& g);
  // Starts complete buckets in index order; stops at the first incomplete one. Returns how many started.
  size_t launch_ready();

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

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/distributed/reducer-inl.hpp>
#endif
