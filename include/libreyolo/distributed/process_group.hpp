#pragma once
// Data-parallel plumbing on LibTorch's own c10d: TCPStore rendezvous, then ProcessGroupGloo for CPU
// tensors or ProcessGroupNCCL for CUDA tensors, and the collectives the trainer needs — broadcast of
// a module's state from rank 0, all-reduce (blocking or asynchronous), bucketed averaging of
// gradients, and a barrier.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/distributed/env.hpp>

#include <torch/torch.h>

// Gloo's headers come with Debian's libgloo-dev; a LibTorch built without c10d/Gloo (or a machine
// without the headers) still compiles, and a distributed run on the CPU then fails at set-up saying
// why. CUDA builds leave Gloo out (pip LibTorch ships no Gloo headers; that path is not tested).
#if defined(USE_C10D_GLOO) && __has_include(<gloo/rendezvous/store.h>) && !defined(LIBREYOLO_WITH_CUDA)
#define LIBREYOLO_HAS_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#else
#define LIBREYOLO_HAS_GLOO 0
#endif
// NCCL: CMake sets LIBREYOLO_WITH_NCCL when LibTorch has CUDA, ships ProcessGroupNCCL.hpp and nccl.h
// is found (pip's nvidia-nccl or the system's). The header's content is behind USE_C10D_NCCL.
#if defined(LIBREYOLO_WITH_CUDA) && defined(LIBREYOLO_WITH_NCCL) && __has_include(<nccl.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>)
#define LIBREYOLO_HAS_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define LIBREYOLO_HAS_NCCL 0
#endif
#if LIBREYOLO_HAS_GLOO || LIBREYOLO_HAS_NCCL
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace libreyolo::dist {

// A collective failed because another rank is gone (it raised, crashed or was stopped). The CLI exits
// with launch.hpp's peer_lost_exit_code for it, so the launcher reports the rank that failed first.
struct PeerLost : Error {
  using Error::Error;
};

// Waits for an asynchronous collective; throws PeerLost when it failed.
using Pending = std::function<void()>;

#if LIBREYOLO_HAS_GLOO || LIBREYOLO_HAS_NCCL
inline constexpr bool has_backend = true;

class Context {
 public:
  // device: CPU trains on Gloo, CUDA on NCCL (the device must be this rank's GPU).
  // timeout: how long a collective (or the rendezvous) waits for the other ranks before failing; as
  // long as PyTorch's default, since the other ranks wait in one while rank 0 validates.
  Context(const Env& env, torch::Device device, std::chrono::seconds timeout = std::chrono::seconds(1800));

  const Env& env() const { return env_; }
  int rank() const { return env_.rank; }
  int world() const { return env_.world_size; }
  bool is_main() const { return env_.rank == 0; }
  torch::Device device() const { return device_; }
  const char* backend_name() const { return device_.is_cuda() ? "nccl" : "gloo"; }

  // Copies rank 0's parameters and buffers into every rank's module (in place, no autograd).
  void broadcast_module(torch::nn::Module& m);
  void broadcast_buffers(torch::nn::Module& m);

  // Sums `t` over the ranks, in place. The async form starts the collective and returns its waiter:
  // on NCCL, waiting orders the current CUDA stream after it (no host block); on Gloo it blocks.
  void all_reduce_sum(at::Tensor& t) { all_reduce_sum_async(t)(); }
  Pending all_reduce_sum_async(at::Tensor& t);

  // Replaces each defined gradient by its mean over the ranks, after backward: gradients are packed
  // into flat buckets of up to `bucket_bytes` per dtype, all-reduced (sum), divided by the world size
  // and unpacked. A parameter without a gradient on this rank takes part as zeros, so every rank sends
  // the same layout. (The trainer overlaps this with backward instead: dist::GradReducer.)
  void average_gradients(const std::vector<torch::Tensor>& params, size_t bucket_bytes = 25u << 20);

  void barrier();

  // True on every rank when `local` is true on any rank (a blocking all-reduce of one number).
  bool any(bool local);

 private:
  void broadcast(std::vector<at::Tensor>& ts);
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
  // Runs `issue(pg)` on this rank's backend and returns a waiter for the work it started. The work
  // types differ between backends and LibTorch versions; the waiter erases them.
  template <class Issue>
  Pending start(const char* what, Issue&& issue) {
    auto waiter = [this, what](auto work) -> Pending {
      return [this, what, work]() {
        try {
          work->wait();
        } catch (const std::exception& e) {
          throw PeerLost("distributed: " + std::string(what) + " failed on rank " + std::to_string(rank()) +
                         " (another rank may have stopped): " + e.what());
        }
      };
    };
    try {
#if LIBREYOLO_HAS_GLOO
      if (gloo_) return waiter(issue(*gloo_));
#endif
#if LIBREYOLO_HAS_NCCL
      if (nccl_) return waiter(issue(*nccl_));
#endif
    } catch (const PeerLost&) {
      throw;
    } catch (const std::exception& e) {
      throw PeerLost("distributed: " + std::string(what) + " could not start on rank " + std::to_string(rank()) + ": " +
                     e.what());
    }
    throw SetupError("distributed: no process group on rank " + std::to_string(rank()));
  }

  Env env_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
#if LIBREYOLO_HAS_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
#endif
#if LIBREYOLO_HAS_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
#endif
};
#else
inline constexpr bool has_backend = false;

class Context {
 public:
  Context(const Env&, torch::Device, std::chrono::seconds = std::chrono::seconds(1800));
  const Env& env() const { return env_; }
  int rank() const { return 0; }
  int world() const { return 1; }
  bool is_main() const { return true; }
  torch::Device device() const { return torch::kCPU; }
  const char* backend_name() const { return "none"; }
  void broadcast_module(torch::nn::Module&) {}
  void broadcast_buffers(torch::nn::Module&) {}
  void all_reduce_sum(at::Tensor&) {}
  Pending all_reduce_sum_async(at::Tensor&) { return [] {}; }
  void average_gradients(const std::vector<torch::Tensor>&, size_t = 0) {}
  void barrier() {}
  bool any(bool local) { return local; }

 private:
  Env env_;
};
#endif

}  // namespace libreyolo::dist

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/distributed/process_group-inl.hpp>
#endif
