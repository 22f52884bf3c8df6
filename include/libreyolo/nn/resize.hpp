#pragma once
// nn::bilinear_resize: F.interpolate(x, size, mode="bilinear", align_corners=False) (half-pixel centres, source
// indices clamped at 0, no antialiasing) written as two matrix products, out = A_h · x · A_wᵀ, with A the
// interpolation weights per output row / column. The same function as the built-in op to float rounding, but
// its backward is two matrix products as well: on CUDA the built-in upsample_bilinear2d_backward adds every
// output gradient into its four sources with atomicAdd, in no fixed order, so a loss on upsampled logits (the
// semantic families' cross-entropy at the masks' size) gave gradients that differ from run to run by a few ulp
// (session 39-40: LingBot's eager runs agreed once and not once, and its graph run could not be compared to
// the bit). The products run in float32 with autocast off (under AMP they would drop to float16).
#include <torch/torch.h>

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace libreyolo::nn {

// The [out, in] weights of a 1-D half-pixel linear resize from `in` to `out` samples (PyTorch's
// area_pixel_compute_source_index with align_corners false and the scale in / out; lerp between floor and the
// next index, clamped to the last one).
inline torch::Tensor linear_resize_weights(int64_t in, int64_t out, const torch::TensorOptions& opt) {
  std::vector<float> w(static_cast<size_t>(out * in), 0.0f);
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    // float arithmetic, as the CUDA and CPU kernels compute the source index (accscalar_t = float for float).
    float src = static_cast<float>(scale) * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    const auto i0 = static_cast<int64_t>(src);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const float l1 = src - static_cast<float>(i0), l0 = 1.0f - l1;
    w[static_cast<size_t>(o * in + i0)] += l0;
    w[static_cast<size_t>(o * in + i1)] += l1;
  }
  return torch::from_blob(w.data(), {out, in}, torch::kFloat32).clone().to(opt);
}

// x [..., h, w] (float) resized to [..., H, W].
inline torch::Tensor bilinear_resize(const torch::Tensor& x, int64_t H, int64_t W) {
  const int64_t h = x.size(-2), w = x.size(-1);
  if (h == H && w == W) return x;
  c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::autocast_dispatch_keyset};
  const auto opt = x.options().dtype(torch::kFloat32);
  const auto ah = linear_resize_weights(h, H, opt);      // [H, h]
  const auto awt = linear_resize_weights(w, W, opt).t();  // [w, W]
  return torch::matmul(torch::matmul(ah, x.to(torch::kFloat32)), awt);
}

}  // namespace libreyolo::nn
