#pragma once
// Definitions of process_group.hpp (core/api.hpp): included by process_group.hpp when header-only, compiled once otherwise.
#include <libreyolo/distributed/process_group.hpp>

namespace libreyolo::dist {

#if LIBREYOLO_HAS_GLOO || LIBREYOLO_HAS_NCCL
LIBREYOLO_INLINE Context::Context(const Env& env, torch::Device device, std::chrono::seconds timeout)
    : env_(env), device_(device) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  if (device.is_cpu() && !LIBREYOLO_HAS_GLOO)
    throw SetupError("distributed training on device=cpu needs Gloo (LibTorch's c10d with Gloo and Debian's libgloo-dev "
                     "in a CPU build); this build has NCCL only: use CUDA devices");
  if (device.is_cuda() && !LIBREYOLO_HAS_NCCL)
    throw SetupError("distributed training on CUDA needs NCCL (a CUDA LibTorch with ProcessGroupNCCL and nccl.h); "
                     "this build has Gloo only: use device=cpu");
  if (!device.is_cpu() && !device.is_cuda())
    throw SetupError("distributed training runs on device=cpu (Gloo) or CUDA devices (NCCL), not " + device.str());
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.timeout = ms;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
#if LIBREYOLO_HAS_GLOO
    if (device.is_cpu()) {
      auto opts = c10d::ProcessGroupGloo::Options::create(ms);
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
          env.master_addr == "localhost" ? std::string("127.0.0.1") : env.master_addr));
      gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env.rank, env.world_size, opts);
    }
#endif
#if LIBREYOLO_HAS_NCCL
    if (device.is_cuda()) {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = ms;
      nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env.rank, env.world_size, opts);
    }
#endif
  } catch (const std::exception& e) {
    throw SetupError("distributed: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                     " could not join the group at " + env.master_addr + ":" + std::to_string(env.master_port) +
                     " (" + e.what() + ")");
  }
}

LIBREYOLO_INLINE void Context::broadcast_module(torch::nn::Module& m) {
  std::vector<at::Tensor> ts;
  for (auto& p : m.parameters()) ts.push_back(p);
  for (auto& b : m.buffers()) ts.push_back(b);
  broadcast(ts);
}

LIBREYOLO_INLINE void Context::broadcast_buffers(torch::nn::Module& m) {
  std::vector<at::Tensor> ts;
  for (auto& b : m.buffers()) ts.push_back(b);
  broadcast(ts);
}

LIBREYOLO_INLINE Pending Context::all_reduce_sum_async(at::Tensor& t) {
  return start("all-reduce", [&](auto& pg) {
    std::vector<at::Tensor> v{t};
    return pg.allreduce(v);
  });
}

LIBREYOLO_INLINE void Context::average_gradients(const std::vector<torch::Tensor>& params, size_t bucket_bytes) {
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
                   all_reduce_sum(flat);
                   flat.div_(static_cast<double>(world()));
                 });
    i = j;
  }
}

LIBREYOLO_INLINE void Context::barrier() {
  start("barrier", [&](auto& pg) { return pg.barrier(); })();
}

LIBREYOLO_INLINE bool Context::any(bool local) {
  auto t = torch::full({1}, local ? 1.0f : 0.0f, torch::TensorOptions().device(device_));
  all_reduce_sum(t);
  return t.item<float>() > 0.5f;
}

LIBREYOLO_INLINE void Context::broadcast(std::vector<at::Tensor>& ts) {
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
      start("broadcast from rank 0", [&](auto& pg) {
        std::vector<at::Tensor> v{flat};
        c10d::BroadcastOptions o;
        o.rootRank = 0;
        return pg.broadcast(v, o);
      })();
    });
  }
}

#else
LIBREYOLO_INLINE Context::Context(const Env&, torch::Device, std::chrono::seconds) {
  throw SetupError("distributed training needs LibTorch's c10d with Gloo (device=cpu; Debian: libgloo-dev) or NCCL "
                   "(CUDA); this build has neither");
}
#endif

}  // namespace libreyolo::dist
