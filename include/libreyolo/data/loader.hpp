#pragma once
// Deterministic multi-threaded batch loader shared by every task.
//
// Worker threads build whole batches (get() for each sample, then collate) and park them in a
// bounded reorder buffer; next() hands them out strictly in batch order. Each sample's RNG is seeded
// from (seed, epoch, position in the epoch), so the batches are bit-identical for any number of
// workers, including workers = 0 (batches built on the calling thread inside next()).
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/rng.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace libreyolo::data {

struct LoaderOptions {
  int batch = 16;
  int workers = 4;
  bool shuffle = true;
  bool drop_last = false;
  // Skip a last batch of exactly one sample (training: BatchNorm cannot normalise over one image).
  bool drop_single = false;
  uint64_t seed = 0;
  int prefetch = 2;  // batches per worker that may be built ahead of the consumer
  bool pin_memory = false;
  // Data-parallel sharding (a distributed sampler): each epoch's order is drawn alike on every rank,
  // padded by wrapping to a multiple of `world`, and rank r takes positions r, r + world, ... So every
  // image is seen once per epoch across ranks (a few twice when the size does not divide).
  int rank = 0, world = 1;
  // Instead of wrapping, leave out the epoch order's last size % world samples (torch's DistributedSampler
  // with drop_last=True, which the originals' training loaders use once the set holds `world` samples).
  bool shard_drop_tail = false;
};

// What the loader needs from a dataset. get() is called concurrently from several threads.
template <class D>
concept LoaderDataset = requires(const D& d, size_t i, std::mt19937_64& rng, int epoch,
                                 std::vector<typename D::Sample>&& samples) {
  typename D::Sample;
  typename D::Batch;
  { d.size() } -> std::convertible_to<size_t>;
  { d.get(i, rng, epoch) } -> std::same_as<typename D::Sample>;
  { D::collate(std::move(samples)) } -> std::same_as<typename D::Batch>;
};

// A batch exposes its tensors with `template <class F> void for_each_tensor(F&& f)` calling
// f(torch::Tensor&) on each; the loader uses it to pin them, the trainer to move them to the device.
template <class B>
concept TensorVisitable = requires(B& b) { b.for_each_tensor([](torch::Tensor&) {}); };

template <class B>
inline constexpr bool pinnable_batch_v = std::is_same_v<B, torch::Tensor> || TensorVisitable<B>;

// Pins a batch's CPU tensors in page-locked memory (so host->device copies can be non-blocking).
template <class B>
void pin_batch(B& batch) {
  auto pin = [](torch::Tensor& t) {
    if (t.defined() && t.device().is_cpu()) t = t.pin_memory();
  };
  if constexpr (std::is_same_v<B, torch::Tensor>) pin(batch);
  else if constexpr (TensorVisitable<B>) batch.for_each_tensor(pin);
}

namespace detail {
template <class D>
concept HasConstSetEpoch = requires(const D& d) { d.set_epoch(0); };
template <class D>
concept HasSetEpoch = requires(D& d) { d.set_epoch(0); };
// Per-batch image size (multi-scale training): the loader asks the dataset for each batch's size,
// a function of (seed, epoch, batch index) only, and builds that batch's samples at it.
template <class D>
concept HasBatchImgsz = requires(const D& d, size_t i, std::mt19937_64& rng, int epoch, uint64_t seed) {
  { d.imgsz_for_batch(seed, epoch, i) } -> std::convertible_to<int>;
  { d.get(i, rng, epoch, 0) } -> std::same_as<typename D::Sample>;
};
// Datasets that want each epoch's order (e.g. to draw mosaic partners near a sample).
template <class D>
concept HasEpochOrder = requires(D& d, const std::vector<size_t>& order, const LoaderOptions& o) {
  d.set_epoch_order(0, order, o);
};
}  // namespace detail

template <class Dataset>
class Loader {
  static_assert(LoaderDataset<Dataset>,
                "Loader<Dataset>: Dataset needs `using Sample`, `using Batch`, `size_t size() const`, "
                "`Sample get(size_t, std::mt19937_64&, int) const` and `static Batch collate(std::vector<Sample>&&)`");

 public:
  using Sample = typename Dataset::Sample;
  using Batch = typename Dataset::Batch;

  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
      : ds_(std::move(dataset)), opt_(options) {
    auto bad = [](const char* key, int v, const char* allowed) {
      throw ConfigError(std::string("LoaderOptions.") + key + " = " + std::to_string(v) + " is invalid (" + allowed + ")");
    };
    if (!ds_) throw ConfigError("Loader: the dataset pointer is null");
    if (opt_.batch < 1) bad("batch", opt_.batch, "must be >= 1");
    if (opt_.workers < 0) bad("workers", opt_.workers, "must be >= 0; 0 loads on the calling thread");
    if (opt_.prefetch < 1) bad("prefetch", opt_.prefetch, "must be >= 1 batch per worker");
    if (opt_.world < 1) bad("world", opt_.world, "must be >= 1 process");
    if (opt_.rank < 0 || opt_.rank >= opt_.world) bad("rank", opt_.rank, "must be in [0, world)");
    if constexpr (!pinnable_batch_v<Batch>) {
      if (opt_.pin_memory)
        throw ConfigError("LoaderOptions.pin_memory = true, but this dataset's Batch type has no "
                          "for_each_tensor(f) to reach its tensors; add one or set pin_memory = false");
    }
    pin_ = opt_.pin_memory && compat::cuda_available();
  }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  ~Loader() { stop_workers(); }

  // Begins an epoch: stops any unfinished one, tells the dataset (set_epoch hook), draws the order
  // (a shuffle seeded from seed and epoch), and starts the workers.
  void start_epoch(int epoch) {
    stop_workers();
    if constexpr (detail::HasConstSetEpoch<Dataset>) {
      ds_->set_epoch(epoch);
    } else if constexpr (detail::HasSetEpoch<Dataset>) {
      // The dataset is shared as const for get(); set_epoch runs while no worker is alive, so the
      // mutation is race-free. The object must not be a genuinely const object (make_shared<T> is fine).
      const_cast<Dataset&>(*ds_).set_epoch(epoch);
    }
    epoch_ = epoch;
    order_.resize(ds_->size());  // the whole set; sharded below when world > 1
    std::iota(order_.begin(), order_.end(), size_t{0});
    if (opt_.shuffle) {
      std::mt19937_64 rng(mix64(opt_.seed ^ 0x5EED5EED5EED5EEDull) ^ mix64(static_cast<uint64_t>(epoch)));
      shuffle_portable(order_, rng);
    }
    // The dataset sees the whole epoch's order (mosaic partners are drawn near a sample in it), so a
    // sample's augmentation is the same however many ranks share the epoch; then this rank's share.
    if constexpr (detail::HasEpochOrder<Dataset>) const_cast<Dataset&>(*ds_).set_epoch_order(epoch, order_, opt_);
    if (opt_.world > 1) order_ = shard_order(order_, opt_.rank, opt_.world, num_samples());
    total_ = num_batches();
    next_out_ = next_claim_ = 0;
    stop_ = false;
    error_ = nullptr;
    error_batch_ = SIZE_MAX;
    const size_t n_threads = std::min(static_cast<size_t>(opt_.workers), total_);
    for (size_t t = 0; t < n_threads; ++t) threads_.emplace_back([this] { worker_loop(); });
  }

  // The next batch of the epoch, in order; nullopt once the epoch is exhausted. A worker's exception
  // is rethrown here (original type and message) after the loader has shut its workers down.
  std::optional<Batch> next() {
    if (epoch_ == kNoEpoch) throw Error("Loader::next() called before start_epoch()");
    if (next_out_ >= total_) {
      stop_workers();
      return std::nullopt;
    }
    if (opt_.workers == 0) {  // build it right here
      try {
        return make_batch(next_out_++);
      } catch (...) {
        next_out_ = total_;
        throw;
      }
    }
    std::unique_lock<std::mutex> lk(mu_);
    ready_cv_.wait(lk, [&] { return ready_.count(next_out_) > 0 || (error_ && error_batch_ == next_out_); });
    auto it = ready_.find(next_out_);
    if (it == ready_.end()) {
      std::exception_ptr err = error_;
      lk.unlock();
      stop_workers();
      next_out_ = total_;
      std::rethrow_exception(err);
    }
    Batch out = std::move(it->second);
    ready_.erase(it);
    ++next_out_;
    lk.unlock();
    space_cv_.notify_all();
    return out;
  }

  // This rank's share of one epoch (see LoaderOptions::rank).
  size_t num_samples() const { return share_size(ds_->size(), opt_.world, opt_.shard_drop_tail); }
  // A rank's share of `n` samples over `world` ranks: padded by wrapping, or the tail dropped (shard_drop_tail).
  static size_t share_size(size_t n, int world, bool drop_tail) {
    const size_t w = static_cast<size_t>(std::max(1, world));
    return drop_tail && n >= w ? n / w : (n + w - 1) / w;
  }
  // Rank `rank`'s `per` samples of the epoch's order: positions rank, rank + world, ... (wrapping past the end).
  static std::vector<size_t> shard_order(const std::vector<size_t>& order, int rank, int world, size_t per) {
    std::vector<size_t> mine;
    if (order.empty()) return mine;
    const size_t w = static_cast<size_t>(world);
    for (size_t k = 0; k < per; ++k) mine.push_back(order[(k * w + static_cast<size_t>(rank)) % order.size()]);
    return mine;
  }
  size_t num_batches() const {
    const size_t n = num_samples(), b = static_cast<size_t>(opt_.batch);
    return opt_.drop_last || drops_single() ? n / b : (n + b - 1) / b;
  }
  // Whether drop_single leaves out this epoch's last sample (this rank's share ends in a batch of one).
  bool drops_single() const {
    const size_t n = num_samples(), b = static_cast<size_t>(opt_.batch);
    return opt_.drop_single && !opt_.drop_last && b > 1 && n > 1 && n % b == 1;
  }
  const Dataset& dataset() const { return *ds_; }
  const LoaderOptions& options() const { return opt_; }
  int epoch() const { return epoch_; }
  // Whether batches come out pinned (pin_memory requested and CUDA available).
  bool pins_memory() const { return pin_; }

 private:
  static constexpr int kNoEpoch = std::numeric_limits<int>::min();

  Batch make_batch(size_t b) const {
    const size_t begin = b * static_cast<size_t>(opt_.batch);
    const size_t end = std::min(begin + static_cast<size_t>(opt_.batch), order_.size());
    std::vector<Sample> samples;
    samples.reserve(end - begin);
    [[maybe_unused]] int imgsz = 0;
    if constexpr (detail::HasBatchImgsz<Dataset>) imgsz = ds_->imgsz_for_batch(opt_.seed, epoch_, b);
    for (size_t pos = begin; pos < end; ++pos) {
      // Seeded by the position in the whole epoch's order, so a sample's augmentation does not depend
      // on how many ranks share the epoch (rank r's position k is the epoch's k * world + r).
      const size_t epoch_pos = opt_.world > 1 ? pos * static_cast<size_t>(opt_.world) + static_cast<size_t>(opt_.rank) : pos;
      std::mt19937_64 rng(sample_seed(opt_.seed, epoch_, epoch_pos));
      if constexpr (detail::HasBatchImgsz<Dataset>) samples.push_back(ds_->get(order_[pos], rng, epoch_, imgsz));
      else samples.push_back(ds_->get(order_[pos], rng, epoch_));
    }
    Batch out = Dataset::collate(std::move(samples));
    if constexpr (pinnable_batch_v<Batch>) {
      if (pin_) pin_batch(out);
    }
    return out;
  }

  void worker_loop() {
    const size_t capacity = static_cast<size_t>(opt_.workers) * static_cast<size_t>(opt_.prefetch);
    for (;;) {
      size_t b = 0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        space_cv_.wait(lk, [&] { return stop_ || error_ || next_claim_ >= total_ || next_claim_ < next_out_ + capacity; });
        if (stop_ || error_ || next_claim_ >= total_) return;
        b = next_claim_++;
      }
      try {
        Batch out = make_batch(b);
        std::lock_guard<std::mutex> lk(mu_);
        ready_.emplace(b, std::move(out));
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_ || b < error_batch_) {  // keep the earliest failure: the one the consumer reaches first
          error_ = std::current_exception();
          error_batch_ = b;
        }
      }
      ready_cv_.notify_all();
      space_cv_.notify_all();  // an error also releases idle workers
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    space_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    ready_.clear();
  }

  std::shared_ptr<const Dataset> ds_;
  LoaderOptions opt_;
  bool pin_ = false;
  int epoch_ = kNoEpoch;
  std::vector<size_t> order_;  // dataset index at each position of the epoch
  size_t total_ = 0;           // batches in this epoch

  // Shared with the workers, guarded by mu_.
  std::mutex mu_;
  std::condition_variable ready_cv_;  // a batch (or an error) arrived
  std::condition_variable space_cv_;  // the consumer took a batch, or stop/error
  size_t next_out_ = 0;               // next batch next() returns
  size_t next_claim_ = 0;             // next batch a worker will build
  std::map<size_t, Batch> ready_;     // built batches waiting for their turn
  std::exception_ptr error_;
  size_t error_batch_ = SIZE_MAX;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace libreyolo::data
