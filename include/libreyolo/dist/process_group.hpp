#pragma once
// Data-parallel plumbing on LibTorch's own c10d: TCPStore rendezvous, ProcessGroupGloo for CPU
// tensors, and the three collectives the trainer needs — broadcast of a module's state from rank 0,
// bucketed averaging of gradients, and a barrier. NCCL (CUDA tensors) is not wired up yet: a CUDA
// device in a distributed run is a SetupError rather than an unverified path.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/dist/env.hpp>

#include <torch/torch.h>

// Gloo's headers come with Debian's libgloo-dev; a LibTorch built without c10d/Gloo (or a machine
// without the headers) still compiles, and a distributed run then fails at set-up saying why. CUDA
// builds (LibTorch 2.x) leave it out until the c10d path is built and run there.
#if defined(USE_C10D_GLOO) && __has_include(<gloo/rendezvous/store.h>) && !defined(LIBREYOLO_WITH_CUDA)
#define LIBREYOLO_HAS_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define LIBREYOLO_HAS_GLOO 0
#endif

#include <chrono>
#include <memory>
#include <vector>

namespace libreyolo::dist {

// A collective failed because another rank is gone (it raised, crashed or was stopped). The CLI exits
// with launch.hpp's peer_lost_exit_code for it, so the launcher reports the rank that failed first.
struct PeerLost : Error {
  using Error::Error;
};

#if LIBREYOLO_HAS_GLOO
class Context {
 public:
  // timeout: how long a collective (or the rendezvous) waits for the other ranks before failing.
  Context(const Env& env, torch::Device device, std::chrono::seconds timeout = std::chrono::seconds(300)) : env_(env) {
    if (!device.is_cpu())
      throw SetupError("distributed training on " + std::string(device.is_cuda() ? "CUDA" : "this device") +
                       " (NCCL) is not available yet; this version trains data-parallel on device=cpu (Gloo)");
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = static_cast<std::size_t>(env.world_size);
    so.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
      auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
          env.master_addr == "localhost" ? std::string("127.0.0.1") : env.master_addr));
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env.rank, env.world_size, opts);
    } catch (const std::exception& e) {
      throw SetupError("distributed: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                       " could not join the group at " + env.master_addr + ":" + std::to_string(env.master_port) +
                       " (" + e.what() + ")");
    }
  }

  const Env& env() const { return env_; }
  int rank() const { return env_.rank; }
  int world() const { return env_.world_size; }
  bool is_main() const { return env_.rank == 0; }

  // Copies rank 0's parameters and buffers into every rank's module (in place, no autograd).
  void broadcast_module(torch::nn::Module& m) {
    std::vector<at::Tensor> ts;
    for (auto& p : m.parameters()) ts.push_back(p);
    for (auto& b : m.buffers()) ts.push_back(b);
    broadcast(ts);
  }
  void broadcast_buffers(torch::nn::Module& m) {
    std::vector<at::Tensor> ts;
    for (auto& b : m.buffers()) ts.push_back(b);
    broadcast(ts);
  }

  // Replaces each defined gradient by its mean over the ranks: gradients are packed into flat buckets
  // of up to `bucket_bytes` per dtype, all-reduced (sum), divided by the world size and unpacked.
  // A parameter without a gradient on this rank takes part as zeros, so every rank sends the same layout.
  void average_gradients(const std::vector<torch::Tensor>& params, size_t bucket_bytes = 25u << 20) {
    torch::NoGradGuard ng;
    std::vector<torch::Tensor> grads;
    for (const auto& p : params) {
      if (!p.requires_grad()) continue;
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    size_t i = 0;
    while (i < grads.size()) {
      const auto dtype = grads[i].scalar_type();
      size_t j = i, bytes = 0;
      while (j < grads.size() && grads[j].scalar_type() == dtype && (j == i || bytes + grads[j].nbytes() <= bucket_bytes))
        bytes += grads[j++].nbytes();
      through_flat({grads.begin() + static_cast<std::ptrdiff_t>(i), grads.begin() + static_cast<std::ptrdiff_t>(j)},
                   [&](torch::Tensor& flat) {
                     std::vector<at::Tensor> v{flat};
                     wait(pg_->allreduce(v), "all-reduce of gradients");
                     flat.div_(static_cast<double>(world()));
                   });
      i = j;
    }
  }

  void barrier() { wait(pg_->barrier(), "barrier"); }

 private:
  void broadcast(std::vector<at::Tensor>& ts) {
    torch::NoGradGuard ng;
    if (ts.empty()) return;
    // One flat tensor per dtype: a handful of collectives instead of one per tensor.
    std::vector<bool> done(ts.size(), false);
    for (size_t i = 0; i < ts.size(); ++i) {
      if (done[i]) continue;
      std::vector<torch::Tensor> group;
      for (size_t k = i; k < ts.size(); ++k)
        if (!done[k] && ts[k].scalar_type() == ts[i].scalar_type()) group.push_back(ts[k]), done[k] = true;
      through_flat(group, [&](torch::Tensor& flat) {
        std::vector<at::Tensor> v{flat};
        c10d::BroadcastOptions o;
        o.rootRank = 0;
        wait(pg_->broadcast(v, o), "broadcast from rank 0");
      });
    }
  }
  // Packs `group` (tensors of one dtype) into one flat tensor, runs the collective `op` on it, and copies
  // the result back into each tensor.
  template <class Op>
  static void through_flat(const std::vector<torch::Tensor>& group, Op&& op) {
    std::vector<torch::Tensor> parts;
    for (const auto& t : group) parts.push_back(t.reshape({-1}));
    auto flat = torch::cat(parts);
    op(flat);
    int64_t off = 0;
    for (auto t : group) {
      const int64_t n = t.numel();
      t.copy_(flat.narrow(0, off, n).view_as(t));
      off += n;
    }
  }
  template <class W>
  void wait(const W& work, const char* what) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      throw PeerLost("distributed: " + std::string(what) + " failed on rank " + std::to_string(rank()) +
                  " (another rank may have stopped): " + e.what());
    }
  }

  Env env_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};
#else
class Context {
 public:
  Context(const Env&, torch::Device, std::chrono::seconds = std::chrono::seconds(300)) {
    throw SetupError("distributed training needs LibTorch's c10d with Gloo and Gloo's headers (Debian: libgloo-dev) "
                     "in a CPU build of libreyolo; this build does not have them");
  }
  const Env& env() const { return env_; }
  int rank() const { return 0; }
  int world() const { return 1; }
  bool is_main() const { return true; }
  void broadcast_module(torch::nn::Module&) {}
  void broadcast_buffers(torch::nn::Module&) {}
  void average_gradients(const std::vector<torch::Tensor>&, size_t = 0) {}
  void barrier() {}

 private:
  Env env_;
};
#endif

}  // namespace libreyolo::dist
