#pragma once
// Building blocks shared by the encoder-decoder detectors (RT-DETR v1/v2 now; D-FINE, DEIM, RT-DETRv4
// later): Conv + BatchNorm + activation (the original's ConvNormLayer), the MLP head, multi-head
// attention with PyTorch's parameter names (in_proj_weight, in_proj_bias, out_proj), the box
// conversions and IoU/GIoU of the set losses, inverse_sigmoid and the prior-probability bias.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

enum class Act { none, relu, silu, gelu };

inline torch::Tensor activate(const torch::Tensor& x, Act a) {
  switch (a) {
    case Act::relu: return torch::relu(x);
    case Act::silu: return torch::silu(x);
    case Act::gelu: return torch::gelu(x);
    default: return x;
  }
}

// log(x / (1 - x)) with x clipped to [0, 1] and both terms to >= eps (the original's inverse_sigmoid).
inline torch::Tensor inverse_sigmoid(const torch::Tensor& x, double eps = 1e-5) {
  auto c = x.clamp(0.0, 1.0);
  return torch::log(c.clamp_min(eps) / (1 - c).clamp_min(eps));
}

// The originals build one module and deep-copy it into a list (copy.deepcopy: the decoder and encoder layers
// of every DETR family, DEIMv2's and EC's heads and encoder blocks), so the copies start with equal weights;
// ours builds each afresh. This gives `mods[1..]` the parameters and buffers of `mods[0]` (names and shapes
// must agree; a module listed twice, a shared one, is left as it is). `only`, when given, picks the tensors
// (by name within the module and value) that are copied. Construction only: loaded weights replace it.
using TensorFilter = std::function<bool(const std::string&, const torch::Tensor&)>;
// (A braced list of module pointers is ambiguous between this and the ModuleList overload on LibTorch 2.x, whose
// ModuleList constructs from modules: name the vector, ModulePtrs{a.ptr(), b.ptr()}.)
using ModulePtrs = std::vector<std::shared_ptr<torch::nn::Module>>;
inline void start_as_copies(const ModulePtrs& mods, const TensorFilter& only = {}) {
  if (mods.size() < 2) return;
  torch::NoGradGuard ng;
  const auto params = mods[0]->named_parameters(/*recurse=*/true);
  const auto buffers = mods[0]->named_buffers(/*recurse=*/true);
  auto copy_all = [&only](const torch::OrderedDict<std::string, torch::Tensor>& from, torch::OrderedDict<std::string, torch::Tensor> to,
                          size_t i) {
    TORCH_CHECK(from.size() == to.size(), "start_as_copies: module ", i, " has ", to.size(), " tensors, the first ", from.size());
    for (auto& item : to) {
      if (only && !only(item.key(), item.value())) continue;
      const auto* src = from.find(item.key());
      TORCH_CHECK(src && src->sizes() == item.value().sizes(), "start_as_copies: module ", i, "'s ", item.key(),
                  " has no equal in the first module");
      item.value().copy_(*src);
    }
  };
  for (size_t i = 1; i < mods.size(); ++i) {
    if (mods[i].get() == mods[0].get()) continue;
    copy_all(params, mods[i]->named_parameters(true), i);
    copy_all(buffers, mods[i]->named_buffers(true), i);
  }
}
// The same over a ModuleList's members [begin, end).
inline void start_as_copies(const torch::nn::ModuleList& list, size_t begin = 0, size_t end = SIZE_MAX) {
  std::vector<std::shared_ptr<torch::nn::Module>> mods;
  for (size_t i = begin; i < std::min(end, list->size()); ++i) mods.push_back(list->ptr(i));
  start_as_copies(mods);
}

// A Linear module applied as one operator: at::linear (addmm on a contiguous input, as PyTorch's F.linear).
// LibTorch 1.13's LinearImpl::forward dispatches t + matmul + add_ for inputs of more than two dimensions,
// three operators and three autograd nodes where this is one (or two).
inline torch::Tensor linear(const torch::nn::LinearImpl& l, const torch::Tensor& x) { return torch::linear(x, l.weight, l.bias); }
inline torch::Tensor linear(const torch::nn::Linear& l, const torch::Tensor& x) { return linear(*l, x); }

// The two-element tensor (a, b) made where `o` says, without a host-to-device copy: torch::tensor({a, b}, o)
// builds it on the CPU and copies it over, which a CUDA graph cannot capture from pageable memory. Two fills
// and a stack give the same values (exact for the integer sizes this is used for).
inline torch::Tensor device_pair(double a, double b, const torch::TensorOptions& o) {
  return torch::stack({torch::full({}, a, o), torch::full({}, b, o)});
}

// The bias whose sigmoid is prior_prob.
inline double bias_init_with_prob(double prior_prob = 0.01) { return -std::log((1 - prior_prob) / prior_prob); }

// ---- boxes -------------------------------------------------------------------------------------
// (The conversions work on the coordinate pairs, (cx, cy) and (w, h) or the two corners, each value
// computed as the per-coordinate formula: cx - 0.5 * w, (x0 + x1) / 2, ...; half the operators.)
inline torch::Tensor box_cxcywh_to_xyxy(const torch::Tensor& b) {
  auto c = b.narrow(-1, 0, 2), half = 0.5 * b.narrow(-1, 2, 2);
  return torch::cat({c - half, c + half}, -1);
}
inline torch::Tensor box_xyxy_to_cxcywh(const torch::Tensor& b) {
  auto p0 = b.narrow(-1, 0, 2), p1 = b.narrow(-1, 2, 2);
  return torch::cat({(p0 + p1) / 2, p1 - p0}, -1);
}

// Pairwise IoU [..., N, M] and union of xyxy boxes a [..., N, 4], b [..., M, 4] (union + 1e-6 in the
// denominator, as the original). Leading dimensions are a batch: [B, Q, 4] x [B, M, 4] -> [B, Q, M].
inline std::pair<torch::Tensor, torch::Tensor> box_iou_union(const torch::Tensor& a, const torch::Tensor& b) {
  auto area1 = (a.select(-1, 2) - a.select(-1, 0)) * (a.select(-1, 3) - a.select(-1, 1));
  auto area2 = (b.select(-1, 2) - b.select(-1, 0)) * (b.select(-1, 3) - b.select(-1, 1));
  auto lt = torch::max(a.unsqueeze(-2).narrow(-1, 0, 2), b.unsqueeze(-3).narrow(-1, 0, 2));
  auto rb = torch::min(a.unsqueeze(-2).narrow(-1, 2, 2), b.unsqueeze(-3).narrow(-1, 2, 2));
  auto wh = (rb - lt).clamp_min(0);
  auto inter = wh.select(-1, 0) * wh.select(-1, 1);
  auto uni = area1.unsqueeze(-1) + area2.unsqueeze(-2) - inter;
  return {inter / (uni + 1e-6), uni};
}
// Pairwise generalized IoU [..., N, M] of xyxy boxes (leading dimensions a batch, as box_iou_union).
inline torch::Tensor generalized_box_iou(const torch::Tensor& a, const torch::Tensor& b) {
  auto [iou, uni] = box_iou_union(a, b);
  auto lt = torch::min(a.unsqueeze(-2).narrow(-1, 0, 2), b.unsqueeze(-3).narrow(-1, 0, 2));
  auto rb = torch::max(a.unsqueeze(-2).narrow(-1, 2, 2), b.unsqueeze(-3).narrow(-1, 2, 2));
  auto wh = (rb - lt).clamp_min(0);
  auto area = wh.select(-1, 0) * wh.select(-1, 1);
  return iou - (area - uni) / (area + 1e-6);
}
// Element-wise IoU and GIoU of matched pairs a[i] <-> b[i] (xyxy, [N, 4]): the diagonals of the
// pairwise versions, without the N x N matrices.
inline torch::Tensor paired_iou(const torch::Tensor& a, const torch::Tensor& b) {
  auto area1 = (a.select(1, 2) - a.select(1, 0)) * (a.select(1, 3) - a.select(1, 1));
  auto area2 = (b.select(1, 2) - b.select(1, 0)) * (b.select(1, 3) - b.select(1, 1));
  auto wh = (torch::min(a.narrow(1, 2, 2), b.narrow(1, 2, 2)) - torch::max(a.narrow(1, 0, 2), b.narrow(1, 0, 2))).clamp_min(0);
  auto inter = wh.select(1, 0) * wh.select(1, 1);
  return inter / (area1 + area2 - inter + 1e-6);
}
inline torch::Tensor paired_giou(const torch::Tensor& a, const torch::Tensor& b) {
  auto area1 = (a.select(1, 2) - a.select(1, 0)) * (a.select(1, 3) - a.select(1, 1));
  auto area2 = (b.select(1, 2) - b.select(1, 0)) * (b.select(1, 3) - b.select(1, 1));
  auto wh = (torch::min(a.narrow(1, 2, 2), b.narrow(1, 2, 2)) - torch::max(a.narrow(1, 0, 2), b.narrow(1, 0, 2))).clamp_min(0);
  auto inter = wh.select(1, 0) * wh.select(1, 1);
  auto uni = area1 + area2 - inter;
  auto iou = inter / (uni + 1e-6);
  auto cwh = (torch::max(a.narrow(1, 2, 2), b.narrow(1, 2, 2)) - torch::min(a.narrow(1, 0, 2), b.narrow(1, 0, 2))).clamp_min(0);
  auto area = cwh.select(1, 0) * cwh.select(1, 1);
  return iou - (area - uni) / (area + 1e-6);
}

// FrozenBatchNorm2d (the original's, models/dfine/common.py and models/rtdetr/backbone.py): a BatchNorm
// with fixed statistics and affine, all four as buffers (HGNetv2 at L/X, PResNet-50); x * scale + shift
// with scale = weight * rsqrt(running_var + eps) and shift = bias - running_mean * scale, computed as the
// original does (the same rounding), in training too.
class FrozenBatchNorm2dImpl : public torch::nn::Cloneable<FrozenBatchNorm2dImpl> {
 public:
  explicit FrozenBatchNorm2dImpl(int64_t n, double eps = 1e-5) : n_(n), eps_(eps) { reset(); }
  void reset() override {
    weight = register_buffer("weight", torch::ones({n_}));
    bias = register_buffer("bias", torch::zeros({n_}));
    running_mean = register_buffer("running_mean", torch::zeros({n_}));
    running_var = register_buffer("running_var", torch::ones({n_}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto t = x.scalar_type();
    auto scale = weight.view({1, -1, 1, 1}) * (running_var.view({1, -1, 1, 1}) + eps_).rsqrt();
    auto shift = bias.view({1, -1, 1, 1}) - running_mean.view({1, -1, 1, 1}) * scale;
    return x * scale.to(t) + shift.to(t);
  }
  torch::Tensor weight, bias, running_mean, running_var;

 private:
  int64_t n_;
  double eps_;
};
TORCH_MODULE(FrozenBatchNorm2d);

// ---- ConvNormLayer: Conv2d (padding (k-1)/2, no bias, `groups` groups) + BatchNorm2d + activation --
class ConvNormImpl : public torch::nn::Cloneable<ConvNormImpl> {
 public:
  ConvNormImpl(int64_t in, int64_t out, int64_t k, int64_t stride, Act act = Act::none, int64_t padding = -1, int64_t groups = 1)
      : in_(in), out_(out), k_(k), stride_(stride), padding_(padding < 0 ? (k - 1) / 2 : padding), groups_(groups), act_(act) {
    reset();
  }
  void reset() override {
    conv = register_module(
        "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(stride_).padding(padding_).groups(groups_).bias(false)));
    norm = register_module("norm", BatchNorm2d(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return activate(norm->forward(conv->forward(x)), act_); }
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d norm{nullptr};

 private:
  int64_t in_, out_, k_, stride_, padding_, groups_;
  Act act_;
};
TORCH_MODULE(ConvNorm);

// ---- MLP: num_layers Linear layers, ReLU (or `act`) between them (layers.0, layers.1, ...) -------
class MLPImpl : public torch::nn::Cloneable<MLPImpl> {
 public:
  MLPImpl(int64_t in, int64_t hidden, int64_t out, int64_t num_layers, Act act = Act::relu)
      : in_(in), hidden_(hidden), out_(out), n_(num_layers), act_(act) {
    reset();
  }
  void reset() override {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < n_; ++i)
      layers->push_back(torch::nn::Linear(i == 0 ? in_ : hidden_, i == n_ - 1 ? out_ : hidden_));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (int64_t i = 0; i < n_; ++i) {
      x = linear(*layers[i]->as<torch::nn::Linear>(), x);
      if (i < n_ - 1) x = activate(x, act_);
    }
    return x;
  }
  torch::nn::Linear layer(int64_t i) { return torch::nn::Linear(layers->ptr<torch::nn::LinearImpl>(i)); }
  torch::nn::ModuleList layers{nullptr};

 private:
  int64_t in_, hidden_, out_, n_;
  Act act_;
};
TORCH_MODULE(MLP);

// ---- nn.MultiheadAttention (batch_first, no dropout): in_proj_weight [3E, E], in_proj_bias, out_proj
class MultiheadAttentionImpl : public torch::nn::Cloneable<MultiheadAttentionImpl> {
 public:
  MultiheadAttentionImpl(int64_t embed, int64_t heads) : e_(embed), h_(heads) { reset(); }
  void reset() override {
    in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * e_, e_}));
    in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * e_}));
    out_proj = register_module("out_proj", torch::nn::Linear(e_, e_));
    torch::NoGradGuard ng;
    torch::nn::init::xavier_uniform_(in_proj_weight);
    torch::nn::init::zeros_(out_proj->bias);
  }
  // query/key/value [B, L, E]; masked: bool [Lq, Lk] (true = blocked).
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                        const std::optional<torch::Tensor>& masked = std::nullopt) {
    const int64_t B = query.size(0), Lq = query.size(1), Lk = key.size(1), D = e_ / h_;
    const auto w = in_proj_weight.chunk(3), b = in_proj_bias.chunk(3);  // rows [0, E), [E, 2E), [2E, 3E)
    auto q = torch::linear(query, w[0], b[0]);
    auto k = torch::linear(key, w[1], b[1]);
    auto v = torch::linear(value, w[2], b[2]);
    q = q.view({B, Lq, h_, D}).transpose(1, 2);
    k = k.view({B, Lk, h_, D}).transpose(1, 2);
    v = v.view({B, Lk, h_, D}).transpose(1, 2);
    auto o = compat::scaled_dot_product_attention(q, k, v, masked);
    // LinearImpl::forward, not linear(): the hybrid encoder (the captured region) runs this module too, and
    // its maps decide the decoder's query selection, where rounding changes can flip near-ties.
    return out_proj->forward(o.transpose(1, 2).reshape({B, Lq, e_}));
  }
  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  int64_t e_, h_;
};
TORCH_MODULE(MultiheadAttention);

}  // namespace libreyolo::nn::detr
