#pragma once
// Definitions of kernel_names.hpp (core/api.hpp): included by kernel_names.hpp when header-only, compiled once otherwise.
#include <libreyolo/profile/kernel_names.hpp>

namespace libreyolo::profile {

namespace detail {
LIBREYOLO_INLINE std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}
LIBREYOLO_INLINE bool contains_any(const std::string& haystack, std::initializer_list<std::string_view> needles) {
  for (auto n : needles)
    if (haystack.find(n) != std::string::npos) return true;
  return false;
}
}  // namespace detail

LIBREYOLO_INLINE bool is_tensorcore_kernel(std::string_view name) {
  return detail::contains_any(detail::lowercase(name),
                              {"hmma", "16816", "s1688", "tensorop", "wmma", "gmma", "warpgroup"});
}

LIBREYOLO_INLINE std::string without_parameter_list(std::string_view raw) {
  std::string s(raw);
  for (auto pos = s.find("(anonymous namespace)"); pos != std::string::npos; pos = s.find("(anonymous namespace)"))
    s.replace(pos, 21, "anon");
  int angle = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++angle;
    if (s[i] == '>' && angle > 0) --angle;
    if (s[i] == '(' && angle == 0) return s.substr(0, i);
  }
  return s;
}

LIBREYOLO_INLINE std::string_view kernel_category(std::string_view raw_name) {
  const std::string n = detail::lowercase(without_parameter_list(raw_name));
  // Layout conversions whose names also hold a convolution or gemm token (cuDNN's tensor converters).
  if (detail::contains_any(n, {"nchwtonhwc", "nhwctonchw", "converttensor", "nhwcslicec", "nchwslicec", "addpadding"}))
    return kernel_categories[3];
  // Convolution and gemm kernels before the generic layout words: a mangled CUTLASS convolution's template
  // arguments hold words such as NoPermute, and Hopper's cuBLAS kernels are named nvjet_*.
  if (detail::contains_any(n, {"implicitgemm", "implicit_gemm", "xmma", "cutlass", "wgrad", "dgrad", "fprop",
                               "nvjet", "winograd", "convolve", "conv2d", "conv_depthwise"}))
    return kernel_categories[0];
  if (detail::contains_any(n, {"copy", "transpose", "permute", "cat_", "concat",
                               "im2col", "col2im", "gather", "scatter", "index_elementwise", "indexselect",
                               "index_select", "constant_pad", "reflection_pad", "upsample"}))
    return kernel_categories[3];
  if (detail::contains_any(n, {"gemm", "conv", "cublas", "matmul", "implicit", "hmma", "16816", "s1688", "tensorop",
                               "wmma", "gmma", "fft"}))
    return kernel_categories[0];
  if (detail::contains_any(n, {"reduce", "norm", "bn_fw", "bn_bw", "softmax", "welford", "pool",
                               "cross_entropy", "nll_loss", "cumsum", "argmax", "topk", "sort"}))
    return kernel_categories[2];
  if (detail::contains_any(n, {"elementwise", "pointwise", "vectorized", "unrolled", "foreach", "fill",
                               "add", "mul", "div", "relu", "silu", "sigmoid", "tanh", "gelu", "clamp",
                               "where", "activation", "triton_poi"}))
    return kernel_categories[1];
  return kernel_categories[4];
}

LIBREYOLO_INLINE ConvAlgorithm conv_algorithm(std::string_view raw_name) {
  ConvAlgorithm a;
  if (kernel_category(raw_name) != kernel_categories[0]) return a;
  const std::string n = detail::lowercase(without_parameter_list(raw_name));
  using detail::contains_any;
  // Which pass: forward, backward data (dgrad) or backward filter (wgrad); the weight-gradient names first
  // (CUTLASS's wgrad iterators are named after the output gradient too).
  if (contains_any(n, {"wgrad", "grad_weight", "bwd_filter", "backward_weight"})) a.pass = "wgrad";
  else if (contains_any(n, {"dgrad", "grad_input", "bwd_data", "backward_input"})) a.pass = "dgrad";
  else if (contains_any(n, {"fprop", "convolve", "conv2d", "conv_depthwise", "winograd", "forward"}) &&
           !contains_any(n, {"gemm_f32f32_tf32", "splitkreduce", "nvjet", "cublas"}))
    a.pass = "fprop";
  else if (contains_any(n, {"fft"})) a.pass = "?";  // cuDNN's FFT kernels serve every pass; the name does not say which
  else return a;  // a gemm, not a convolution
  if (contains_any(n, {"winograd"})) a.family = "winograd";
  else if (contains_any(n, {"fft"})) a.family = "fft";
  else if (contains_any(n, {"depthwise", "grouped_direct", "c1_k1"})) a.family = "direct (depthwise/grouped)";
  else if (contains_any(n, {"image_first_layer"})) a.family = "first-layer special";
  else if (contains_any(n, {"implicitgemm", "implicit_gemm", "s16816", "s1688", "_optimized_"}))
    a.family = is_tensorcore_kernel(raw_name) || contains_any(n, {"_f16f16_", "tensor16x8", "warpgroup", "tensorop"})
                   ? "implicit GEMM, Tensor Cores"
                   : "implicit GEMM";
  else if (contains_any(n, {"implicit_convolve_sgemm", "convolve_common_engine", "wgrad_alg", "dgrad_alg", "dgrad_engine",
                            "wgrad2d", "dgrad2d"}))
    a.family = "cuDNN legacy engine (no Tensor Cores)";
  else a.family = "other convolution";
  // The reduction over the GEMM's K dimension split across thread blocks: partial sums added in an order the
  // launch decides (split-K / segment-K kernels, or a separate split-K reduction).
  a.split_k = contains_any(n, {"split_k", "splitk", "segment_k_on", "reducesplitk"});
  // The arithmetic as the name states it (cuDNN: <A><B>_<C><accumulator>; CUTLASS: s16816 = fp32 accumulation,
  // h16816 = fp16); a name that gives the input type only says so.
  if (contains_any(n, {"tf32", "tfloat32"})) a.math = "tf32";
  else if (contains_any(n, {"f16f16_f16f16", "h16816", "h884", "h1688"})) a.math = "fp16 accumulate";
  else if (contains_any(n, {"bf16"})) a.math = contains_any(n, {"bf16bf16_bf16f32", "s16816"}) ? "bf16 in, fp32 accumulate" : "bf16";
  else if (contains_any(n, {"f16f16_f16f32", "f16f16_f32", "_s16816"})) a.math = "fp16 in, fp32 accumulate";
  else if (contains_any(n, {"f16", "half"})) a.math = "fp16 (accumulator not named)";
  else if (contains_any(n, {"f32", "float", "ffma", "sgemm"})) a.math = "fp32";
  return a;
}

LIBREYOLO_INLINE std::string short_kernel_name(std::string_view raw) {
  std::string s(raw);
  for (std::string_view anon : {"(anonymous namespace)", "(anonymous)"})
    for (auto pos = s.find(anon); pos != std::string::npos; pos = s.find(anon))
      s.replace(pos, anon.size(), "anon");
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  std::string out;
  int angle = 0;
  for (char c : s) {
    if (c == '<') {
      ++angle;
      continue;
    }
    if (c == '>') {
      angle = std::max(0, angle - 1);
      continue;
    }
    if (angle > 0) continue;
    if (c == '(') break;  // the parameter list
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? std::string(raw) : out;
}

}  // namespace libreyolo::profile
