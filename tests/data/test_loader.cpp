// The threaded loader: determinism across worker counts, coverage, shuffling, drop_last, bounded
// prefetch, error propagation and prompt shutdown.
#include <doctest/doctest.h>
#include <libreyolo/data/loader.hpp>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "support.hpp"

using namespace libreyolo;
using namespace libreyolo::data;

namespace {

// Sample = (dataset index, first draw of the sample's RNG). Uneven sleeps make workers finish out
// of order, so in-order delivery is really exercised.
struct ProbeDataset {
  struct Sample {
    int64_t index;
    int64_t draw;
  };
  struct Batch {
    torch::Tensor index, draw;
    template <class F>
    void for_each_tensor(F&& f) {
      f(index);
      f(draw);
    }
  };
  size_t n = 23;
  int sleep_ms_mod = 0;                // sleep (index % mod) ms in get()
  int64_t throw_at = -1;               // get(throw_at) throws
  mutable std::atomic<int> calls{0};
  int last_epoch_seen = -1;            // set through the non-const set_epoch hook

  size_t size() const { return n; }
  Sample get(size_t i, std::mt19937_64& rng, int /*epoch*/) const {
    ++calls;
    if (sleep_ms_mod > 0) std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(i) % sleep_ms_mod));
    if (static_cast<int64_t>(i) == throw_at) throw DataError("boom: sample " + std::to_string(i) + " is broken");
    return {static_cast<int64_t>(i), static_cast<int64_t>(rng() >> 1)};
  }
  static Batch collate(std::vector<Sample>&& s) {
    std::vector<int64_t> idx, draw;
    for (auto& x : s) idx.push_back(x.index), draw.push_back(x.draw);
    return {torch::tensor(idx), torch::tensor(draw)};
  }
  void set_epoch(int e) { last_epoch_seen = e; }
};

struct Epoch {
  std::vector<std::vector<int64_t>> index, draw;
};
Epoch run_epoch(Loader<ProbeDataset>& loader, int epoch) {
  Epoch out;
  loader.start_epoch(epoch);
  while (auto b = loader.next()) {
    auto i = b->index.contiguous(), d = b->draw.contiguous();
    out.index.emplace_back(i.data_ptr<int64_t>(), i.data_ptr<int64_t>() + i.numel());
    out.draw.emplace_back(d.data_ptr<int64_t>(), d.data_ptr<int64_t>() + d.numel());
  }
  return out;
}

std::shared_ptr<ProbeDataset> make_ds(size_t n, int sleep_mod = 0, int64_t throw_at = -1) {
  auto ds = std::make_shared<ProbeDataset>();
  ds->n = n;
  ds->sleep_ms_mod = sleep_mod;
  ds->throw_at = throw_at;
  return ds;
}

}  // namespace

TEST_CASE("loader: identical batches for workers = 0, 1, 3, every sample once per epoch") {
  auto ds = make_ds(23, 3);
  std::vector<Epoch> per_workers;
  for (int workers : {0, 1, 3}) {
    LoaderOptions o;
    o.batch = 4, o.workers = workers, o.seed = 42, o.prefetch = 1;
    Loader<ProbeDataset> loader(ds, o);
    CHECK(loader.num_batches() == 6);
    Epoch e0 = run_epoch(loader, 0);
    Epoch e1 = run_epoch(loader, 1);
    CHECK(ds->last_epoch_seen == 1);
    REQUIRE(e0.index.size() == 6);
    CHECK(e0.index.back().size() == 3);  // 23 = 5 * 4 + 3, the short batch is kept
    std::multiset<int64_t> seen;
    for (auto& b : e0.index) seen.insert(b.begin(), b.end());
    CHECK(seen.size() == 23);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 23);
    CHECK(*seen.begin() == 0);
    CHECK(*seen.rbegin() == 22);
    CHECK(e0.index != e1.index);  // a new shuffle each epoch
    CHECK(e0.draw != e1.draw);    // and fresh augmentation randomness
    per_workers.push_back(e0);
    per_workers.push_back(e1);
  }
  for (size_t k = 2; k < per_workers.size(); ++k) {
    CAPTURE(k);
    CHECK(per_workers[k].index == per_workers[k % 2].index);
    CHECK(per_workers[k].draw == per_workers[k % 2].draw);
  }
}

TEST_CASE("loader: seed changes the order; shuffle = false keeps dataset order; drop_last") {
  auto ds = make_ds(23);
  LoaderOptions o;
  o.batch = 4, o.workers = 2, o.seed = 1;
  Loader<ProbeDataset> a(ds, o);
  o.seed = 2;
  Loader<ProbeDataset> b(ds, o);
  CHECK(run_epoch(a, 0).index != run_epoch(b, 0).index);

  o.shuffle = false;
  Loader<ProbeDataset> plain(ds, o);
  Epoch e = run_epoch(plain, 5);
  std::vector<int64_t> flat;
  for (auto& v : e.index) flat.insert(flat.end(), v.begin(), v.end());
  std::vector<int64_t> expect(23);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(flat == expect);

  o.shuffle = true, o.drop_last = true;
  Loader<ProbeDataset> dl(ds, o);
  CHECK(dl.num_batches() == 5);
  Epoch d = run_epoch(dl, 0);
  REQUIRE(d.index.size() == 5);
  std::set<int64_t> uniq;
  for (auto& v : d.index) {
    CHECK(v.size() == 4);
    uniq.insert(v.begin(), v.end());
  }
  CHECK(uniq.size() == 20);
}

TEST_CASE("loader: workers build at most workers * prefetch batches ahead of the consumer") {
  auto ds = make_ds(40);
  LoaderOptions o;
  o.batch = 2, o.workers = 2, o.prefetch = 1;
  Loader<ProbeDataset> loader(ds, o);
  // Waits until the count reaches `target` (the machine may be busy), then gives the workers extra
  // time to overshoot if the bound were not enforced.
  auto settle = [&](int target) {
    for (int i = 0; i < 200 && ds->calls.load() < target; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return ds->calls.load();
  };
  loader.start_epoch(0);
  CHECK(settle(4) == 4);  // 2 batches of 2 samples, then the workers wait
  REQUIRE(loader.next());
  CHECK(settle(6) == 6);
}

TEST_CASE("loader: an exception in get() surfaces from next() with its message, then the epoch ends") {
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    auto ds = make_ds(40, 2, /*throw_at=*/13);
    LoaderOptions o;
    o.batch = 4, o.workers = workers, o.shuffle = false;
    Loader<ProbeDataset> loader(ds, o);
    loader.start_epoch(0);
    int good = 0;
    std::string message;
    try {
      while (loader.next()) ++good;
    } catch (const DataError& e) {
      message = e.what();
    }
    CHECK(good == 3);  // batches 0..2 (samples 0..11) come out before the failing batch 3
    CHECK(message == "boom: sample 13 is broken");
    CHECK_FALSE(loader.next().has_value());
    loader.start_epoch(1);  // the loader is reusable after a failure
    CHECK_THROWS_AS(([&] { while (loader.next()) {} })(), DataError);
  }
}

TEST_CASE("loader: destroying mid-epoch joins the workers promptly") {
  auto ds = make_ds(400, 5);
  auto t0 = std::chrono::steady_clock::now();
  {
    LoaderOptions o;
    o.batch = 8, o.workers = 4, o.prefetch = 2;
    Loader<ProbeDataset> loader(ds, o);
    loader.start_epoch(0);
    REQUIRE(loader.next());
    REQUIRE(loader.next());
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms < 2000);
  CHECK(ds->calls.load() < 400);  // it did not quietly finish the epoch before returning
  {
    LoaderOptions o;
    o.workers = 3;
    Loader<ProbeDataset> never_started(ds, o);  // no epoch: nothing to join, no hang
    CHECK_THROWS_AS(never_started.next(), Error);
  }
}

TEST_CASE("loader: option validation and pin_memory without CUDA") {
  auto ds = make_ds(10);
  LoaderOptions o;
  o.batch = 0;
  CHECK_THROWS_WITH_AS(Loader<ProbeDataset>(ds, o), doctest::Contains("batch = 0"), ConfigError);
  o.batch = 2, o.workers = -1;
  CHECK_THROWS_WITH_AS(Loader<ProbeDataset>(ds, o), doctest::Contains("workers = -1"), ConfigError);
  o.workers = 1, o.prefetch = 0;
  CHECK_THROWS_WITH_AS(Loader<ProbeDataset>(ds, o), doctest::Contains("prefetch = 0"), ConfigError);
  o.prefetch = 2, o.pin_memory = true;
  Loader<ProbeDataset> loader(ds, o);
  CHECK(loader.pins_memory() == lry_test::have_cuda());
  loader.start_epoch(0);
  auto b = loader.next();
  REQUIRE(b);
  CHECK(b->index.is_pinned() == lry_test::have_cuda());
}

LRY_GPU_SUITE {
  TEST_CASE("loader: pin_memory pins every tensor of the batch when CUDA is available") {
    LRY_REQUIRE_CUDA();
    LoaderOptions o;
    o.batch = 4, o.workers = 2, o.pin_memory = true;
    Loader<ProbeDataset> loader(make_ds(10), o);
    loader.start_epoch(0);
    while (auto b = loader.next()) {
      CHECK(b->index.is_pinned());
      CHECK(b->draw.is_pinned());
      auto on_gpu = b->index.to(torch::Device(torch::kCUDA), /*non_blocking=*/true);
      CHECK(on_gpu.cpu().equal(b->index));
    }
  }
}
