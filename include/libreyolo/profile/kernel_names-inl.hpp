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
  if (detail::contains_any(n, {"copy", "transpose", "permute", "nchwtonhwc", "nhwctonchw", "cat_", "concat",
                               "im2col", "col2im", "gather", "scatter", "index_elementwise", "indexselect",
                               "index_select", "constant_pad", "reflection_pad", "upsample"}))
    return kernel_categories[3];
  if (detail::contains_any(n, {"gemm", "conv", "cutlass", "xmma", "cublas", "wgrad", "dgrad", "fprop",
                               "matmul", "winograd", "implicit", "hmma", "16816", "s1688", "tensorop",
                               "wmma", "gmma"}))
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
