#pragma once
// The one place where LibTorch version differences live (1.13 on Debian, 2.x from pip with CUDA).
// Everything else in libreyolo calls these wrappers instead of testing TORCH_VERSION_* itself.
#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#if defined(LIBREYOLO_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif
#if defined(LIBREYOLO_WITH_NCCL) && __has_include(<nccl.h>)
#include <nccl.h>
#define LIBREYOLO_COMPAT_NCCL 1
#endif

namespace libreyolo::compat {

inline constexpr int torch_major = TORCH_VERSION_MAJOR;
inline constexpr int torch_minor = TORCH_VERSION_MINOR;
inline constexpr bool torch2 = TORCH_VERSION_MAJOR >= 2;
inline constexpr bool with_cuda =
#if defined(LIBREYOLO_WITH_CUDA)
    true;
#else
    false;
#endif

inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

// ---- autocast --------------------------------------------------------------------------------
// 1.13 only has the CUDA-named calls; 2.x has device-typed ones and keeps the old names deprecated.
inline void set_cuda_autocast(bool enabled, at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}
inline bool cuda_autocast_enabled() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}
inline at::ScalarType cuda_autocast_dtype() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::get_autocast_dtype(at::kCUDA);
#else
  return at::autocast::get_autocast_gpu_dtype();
#endif
}
// ---- attention ------------------------------------------------------------------------------
// Scaled dot-product attention over [B, H, L, D]; `masked` (bool [Lq, Lk], true = may not attend, as
// nn.MultiheadAttention's boolean attn_mask). 2.x: ATen's fused kernel; 1.13: matmul + softmax.
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const std::optional<at::Tensor>& masked) {
#if TORCH_VERSION_MAJOR >= 2
  std::optional<at::Tensor> keep;
  if (masked) keep = masked->logical_not();
  return at::scaled_dot_product_attention(q, k, v, keep, 0.0, false);
#else
  auto attn = at::matmul(q * (1.0 / std::sqrt(static_cast<double>(q.size(-1)))), k.transpose(-2, -1));
  if (masked) attn = attn.masked_fill(*masked, -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(attn, -1).to(v.scalar_type()), v);
#endif
}

inline void set_autocast_cache_enabled(bool on) { at::autocast::set_autocast_cache_enabled(on); }
inline bool autocast_cache_enabled() { return at::autocast::is_autocast_cache_enabled(); }

// ---- devices ---------------------------------------------------------------------------------
// The CUDA device index of `d`, 0 for an unindexed device ("cuda").
inline int device_index(const torch::Device& d) { return d.index() < 0 ? 0 : d.index(); }

inline bool cuda_available() { return with_cuda && torch::cuda::is_available(); }

inline void cuda_synchronize([[maybe_unused]] const torch::Device& d) {
#if defined(LIBREYOLO_WITH_CUDA)
  if (d.is_cuda()) c10::cuda::getCurrentCUDAStream(d.index() < 0 ? 0 : d.index()).synchronize();
#endif
}

// Makes `d` the current CUDA device of this thread (NCCL and the caching allocator follow it).
inline void set_cuda_device([[maybe_unused]] const torch::Device& d) {
#if defined(LIBREYOLO_WITH_CUDA)
  if (d.is_cuda()) c10::cuda::set_device(static_cast<c10::DeviceIndex>(d.index() < 0 ? 0 : d.index()));
#endif
}

// Whether this thread's current CUDA stream on `d` may be being captured into a CUDA graph (its kernels
// are recorded, not run); false on a CPU and in builds without CUDA. cudaStreamIsCapturing is one of the
// calls allowed during a capture; should it fail, its error is cleared (a later launch check would report
// it) and the answer is "capturing", the side on which a caller only gives up a cache.
inline bool cuda_stream_capturing([[maybe_unused]] const torch::Device& d) {
#if defined(LIBREYOLO_WITH_CUDA)
  if (!d.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(d.index()).stream(), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
#else
  return false;
#endif
}

// Whether the device supports bfloat16 natively (compute capability >= 8.0).
inline bool cuda_bf16_supported([[maybe_unused]] int device_index) {
#if defined(LIBREYOLO_WITH_CUDA)
  auto* p = at::cuda::getDeviceProperties(device_index);
  return p->major >= 8;
#else
  return false;
#endif
}

// Peak allocated bytes since the last reset; 0 on CPU.
inline int64_t cuda_peak_allocated([[maybe_unused]] int device_index) {
#if defined(LIBREYOLO_WITH_CUDA)
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
  return s.allocated_bytes[0].peak;
#else
  return 0;
#endif
}
inline void cuda_reset_peak([[maybe_unused]] int device_index) {
#if defined(LIBREYOLO_WITH_CUDA)
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_index);
#endif
}
// ---- versions for `libreyolo checks` -----------------------------------------------------------
// "12.4" from 12040-style numbers (CUDA runtime: major*1000 + minor*10); "" when unknown.
inline std::string cuda_runtime_version() {
  try {
    const long v = at::detail::getCUDAHooks().versionCUDART();
    return v > 0 ? std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) : std::string();
  } catch (...) {
    return {};
  }
}
// cuDNN: 8.9.7 from 8907 (< 9) or 9.1.0 from 90100 (>= 9); "" when there is none.
inline std::string cudnn_version() {
  try {
    if (!at::detail::getCUDAHooks().hasCuDNN()) return {};
    const long v = at::detail::getCUDAHooks().versionCuDNN();
    if (v <= 0) return {};
    if (v >= 90000) return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
  } catch (...) {
    return {};
  }
}
// NCCL linked into this build (data-parallel on CUDA); "" without it.
inline std::string nccl_version() {
#if defined(LIBREYOLO_COMPAT_NCCL)
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v <= 0) return {};
  const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100,
            patch = v % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
#else
  return {};
#endif
}
struct GpuInfo {
  std::string name;
  int major = 0, minor = 0;
  int64_t total_bytes = 0;
  bool bf16 = false;
};
inline std::vector<GpuInfo> cuda_devices() {
  std::vector<GpuInfo> out;
#if defined(LIBREYOLO_WITH_CUDA)
  if (!torch::cuda::is_available()) return out;
  for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
    auto* p = at::cuda::getDeviceProperties(i);
    out.push_back({p->name, p->major, p->minor, static_cast<int64_t>(p->totalGlobalMem), p->major >= 8});
  }
#endif
  return out;
}

// Bytes the caching allocator holds now (what nvidia-smi shows for the process, less the context); 0 on CPU.
inline int64_t cuda_reserved([[maybe_unused]] int device_index) {
#if defined(LIBREYOLO_WITH_CUDA)
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
  return s.reserved_bytes[0].current;
#else
  return 0;
#endif
}
// The device's total memory in bytes; 0 on CPU.
inline int64_t cuda_total_memory([[maybe_unused]] int device_index) {
#if defined(LIBREYOLO_WITH_CUDA)
  return static_cast<int64_t>(at::cuda::getDeviceProperties(device_index)->totalGlobalMem);
#else
  return 0;
#endif
}
// Returns the caching allocator's unused blocks to the device.
inline void cuda_empty_cache() {
#if defined(LIBREYOLO_WITH_CUDA)
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}
// Whether `e` is the allocator's out-of-memory error (c10::OutOfMemoryError from 2.0; its message
// before that).
inline bool is_out_of_memory(const c10::Error& e) {
  return std::string(e.what()).find("out of memory") != std::string::npos;
}
// Number of cudaMalloc calls the caching allocator has made so far; 0 on CPU.
inline int64_t cuda_device_allocs([[maybe_unused]] int device_index) {
#if defined(LIBREYOLO_WITH_CUDA)
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
  return s.num_device_alloc;
#else
  return 0;
#endif
}

}  // namespace libreyolo::compat

// ---- train: multi-tensor scale by a 0-d tensor (added by the train/ optimizer+clip headers) ------
// `_foreach_mul_(TensorList, Tensor)` exists from LibTorch 2.1; 1.13 has only Scalar overloads, so
// there each tensor is scaled on its own (still no host sync: the factor stays a tensor).
namespace libreyolo::compat {
inline void foreach_mul_by_tensor_(at::TensorList tensors, const at::Tensor& factor) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_mul_(tensors, factor);
#else
  for (const auto& t : tensors) t.mul_(factor);
#endif
}

// The same for division and addition by a 0-d tensor (AdamW's multi-tensor device form): ATen's
// multi-tensor kernels from LibTorch 2.2 (the fast route needs the 0-d tensor in the list's dtype),
// else one op per tensor.
inline void foreach_div_by_tensor_(at::TensorList tensors, const at::Tensor& divisor) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  at::_foreach_div_(tensors, divisor);
#else
  for (const auto& t : tensors) t.div_(divisor);
#endif
}

inline void foreach_add_tensor_(at::TensorList tensors, const at::Tensor& other) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  at::_foreach_add_(tensors, other);
#else
  for (const auto& t : tensors) t.add_(other);
#endif
}
}  // namespace libreyolo::compat

// ---- nn: scaled dot-product attention (added for the semantic families) --------------------------
// softmax(q k^T / sqrt(d)) v over the last two dims. LibTorch 2.x has the fused kernel (flash /
// memory-efficient on CUDA); 1.13 computes it in plain ops (softmax in the inputs' dtype, as SDPA's
// math path does).
namespace libreyolo::compat {
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return at::matmul(at::softmax(at::matmul(q, k.transpose(-2, -1)) * scale, -1), v);
#endif
}
}  // namespace libreyolo::compat

// ---- capture: the whole-step graph's optimizer (cuda_graph=step; train/optimizer.hpp, train/ema.hpp) --
// foreach_mul_by_tensor: out of place, as foreach_mul_by_tensor_ above (2.1+ multi-tensor, else one op
// per tensor). Fused SGD taking the LR as a device tensor and skipping the update on the device
// when found_inf is 1 (PyTorch's fused=True optimizers call the same ops): LibTorch >= 2.5 on CUDA; there
// has_fused_optimizers is true. Elsewhere the callers use their generic path, and these throw.
namespace libreyolo::compat {
inline std::vector<at::Tensor> foreach_mul_by_tensor(at::TensorList tensors, const at::Tensor& factor) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return at::_foreach_mul(tensors, factor);
#else
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.mul(factor));
  return out;
#endif
}

inline constexpr bool has_fused_optimizers =
    TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5);

// params -= lr * (momentum SGD direction), dampening 0, not maximising; momentum buffers defined.
inline void fused_sgd_([[maybe_unused]] at::TensorList params, [[maybe_unused]] at::TensorList grads,
                       [[maybe_unused]] at::TensorList momentum_buffers, [[maybe_unused]] double weight_decay,
                       [[maybe_unused]] double momentum, [[maybe_unused]] const at::Tensor& lr,
                       [[maybe_unused]] bool nesterov, [[maybe_unused]] const at::Tensor& found_inf) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  std::optional<at::Tensor> found;
  if (found_inf.defined()) found = found_inf;
  at::_fused_sgd_(params, grads, momentum_buffers, weight_decay, momentum, lr, /*dampening=*/0.0, nesterov,
                  /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/std::optional<at::Tensor>(), found);
#else
  throw std::runtime_error("compat::fused_sgd_: needs LibTorch >= 2.5");
#endif
}

}  // namespace libreyolo::compat
