#pragma once
// Classification of GPU kernels by name: category (gemm/conv, elementwise, reduction/norm,
// layout/copy, other), Tensor-Core use, and a short display name without template arguments.
#include <libreyolo/core/api.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <initializer_list>
#include <string>
#include <string_view>

namespace libreyolo::profile {

inline constexpr std::array<std::string_view, 5> kernel_categories = {"gemm/conv", "elementwise",
                                                                      "reduction/norm", "layout/copy", "other"};

namespace detail {
LIBREYOLO_INLINE std::string lowercase(std::string_view s);
LIBREYOLO_INLINE bool contains_any(const std::string& haystack, std::initializer_list<std::string_view> needles);
}  // namespace detail

// Tensor-Core kernels are recognised by the instruction/tile names vendors put into kernel names;
// "warpgroup" marks Hopper's warpgroup-MMA (wgmma) cuBLAS kernels (sm90_xmma_..._warpgroupsize...).
LIBREYOLO_INLINE bool is_tensorcore_kernel(std::string_view name);

// The name up to its parameter list (template arguments kept: a copy often shows only there, as in
// unrolled_elementwise_kernel<direct_copy_kernel_cuda...>); parameter types such as
// cudnn::reduced_divisor would otherwise mislead the patterns below.
LIBREYOLO_INLINE std::string without_parameter_list(std::string_view raw);

// Checked in this order because names overlap: a cuDNN layout transform or a copy runs through
// kernels named like convolutions or elementwise templates; cuBLAS split-K "reduce" kernels are gemm.
LIBREYOLO_INLINE std::string_view kernel_category(std::string_view raw_name);

// A convolution kernel's algorithm as its name tells it (cuDNN, CUTLASS and ATen kernel names): the pass
// ("fprop", "dgrad", "wgrad", "?" for an FFT kernel; empty for a kernel that is no convolution, e.g. a cuBLAS gemm), the
// algorithm family (implicit GEMM on Tensor Cores or not, Winograd, FFT, direct depthwise/grouped, cuDNN's
// legacy engines, the first-layer special), whether the GEMM's K reduction is split across thread blocks
// (its partial sums are added in an order the launch decides), and the arithmetic the name states.
struct ConvAlgorithm {
  std::string pass, family, math;
  bool split_k = false;
  bool is_conv() const { return !pass.empty(); }
};
LIBREYOLO_INLINE ConvAlgorithm conv_algorithm(std::string_view raw_name);

// "void at::native::foo<float, 4>(int, float*)" -> "at::native::foo": template arguments and the
// parameter list removed, so kernels read like function names in reports.
LIBREYOLO_INLINE std::string short_kernel_name(std::string_view raw);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/kernel_names-inl.hpp>
#endif
