#pragma once
// D-FINE's hybrid encoder (the original's models/dfine/encoder.py HybridEncoder; DEIM and RT-DETRv4 use
// the same): RT-DETR's layout (1x1 conv + BN input projections, AIFI = one post-norm transformer encoder
// layer with the 2-D sin-cos position embedding on the coarsest map, a top-down FPN and a bottom-up PAN)
// with D-FINE's blocks: the fusion blocks are RepNCSPELAN4 (GELAN: a 1x1 conv split in two halves, two
// CSP(RepVgg) + 3x3 conv branches chained on the second half, all four concatenated and fused by a 1x1
// conv), the lateral convs carry no activation, and the PAN downsamples with SCDown (1x1 conv, then a
// depthwise 3x3/2 conv, neither activated). Reuses nn/detr/hybrid_encoder.hpp's transformer encoder,
// position embedding, CSPRepLayer (= the original's CSPLayer with VGGBlock bottlenecks) and its layout
// (HybridEncoderTImpl, over DFineEncoderBlocks).
#include <libreyolo/nn/detr/hybrid_encoder.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace libreyolo::nn::detr {

// SCDown: 1x1 ConvNorm (c1 -> c2), then a depthwise k x k / s ConvNorm; no activation.
class SCDownImpl : public torch::nn::Cloneable<SCDownImpl> {
 public:
  SCDownImpl(int64_t c1, int64_t c2, int64_t k, int64_t s) : c1_(c1), c2_(c2), k_(k), s_(s) { reset(); }
  void reset() override {
    cv1 = register_module("cv1", ConvNorm(c1_, c2_, 1, 1, Act::none));
    cv2 = register_module("cv2", ConvNorm(c2_, c2_, k_, s_, Act::none, -1, c2_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return cv2->forward(cv1->forward(x)); }
  ConvNorm cv1{nullptr}, cv2{nullptr};

 private:
  int64_t c1_, c2_, k_, s_;
};
TORCH_MODULE(SCDown);

// CSPLayer2 (EC's and DEIMv2's csp_type "csp2", RepC3-like): conv1 1x1 in -> 2 hidden split in halves
// a, b; conv3(a + bottlenecks(b)), conv3 a 1x1 ConvNorm only where hidden != out (hidden = out x expansion).
class CSPLayer2Impl : public torch::nn::Cloneable<CSPLayer2Impl> {
 public:
  CSPLayer2Impl(int64_t in, int64_t out, int64_t blocks, double expansion, Act act)
      : in_(in), out_(out), n_(blocks), hidden_(static_cast<int64_t>(out * expansion)), act_(act) {
    reset();
  }
  void reset() override {
    conv1 = register_module("conv1", ConvNorm(in_, 2 * hidden_, 1, 1, act_));
    bottlenecks = register_module("bottlenecks", torch::nn::Sequential());
    for (int64_t i = 0; i < n_; ++i) bottlenecks->push_back(RepVggBlock(hidden_, hidden_, act_));
    if (hidden_ != out_) conv3 = register_module("conv3", ConvNorm(hidden_, out_, 1, 1, act_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv1->forward(x).chunk(2, 1);
    auto z = y[0] + bottlenecks->forward(y[1]);
    return conv3 ? conv3->forward(z) : z;
  }
  ConvNorm conv1{nullptr}, conv3{nullptr};
  torch::nn::Sequential bottlenecks{nullptr};

 private:
  int64_t in_, out_, n_, hidden_;
  Act act_;
};
TORCH_MODULE(CSPLayer2);

// RepNCSPELAN4(c1, c2, c3, c4, n): cv1 1x1 c1 -> c3, split into two c3/2 halves a, b;
// cv2 = CSP(c3/2 -> c4, n RepVgg blocks) + 3x3 ConvNorm, on b; cv3 = CSP(c4 -> c4, n) + 3x3 ConvNorm, on
// cv2's output; cv4 1x1 (c3 + 2 c4) -> c2 over [a, b, cv2, cv3]. Every conv SiLU-activated.
// csp2: the CSP layers are CSPLayer2 (EC, DEIMv2); conv3x3 false: no 3x3 ConvNorm after them (EC's).
class RepNCSPELAN4Impl : public torch::nn::Cloneable<RepNCSPELAN4Impl> {
 public:
  RepNCSPELAN4Impl(int64_t c1, int64_t c2, int64_t c3, int64_t c4, int64_t n, Act act = Act::silu, bool csp2 = false,
                   bool conv3x3 = true)
      : c1_(c1), c2_(c2), c3_(c3), c4_(c4), n_(n), act_(act), csp2_(csp2), conv3x3_(conv3x3) {
    reset();
  }
  void reset() override {
    auto branch = [&](int64_t in) {
      torch::nn::Sequential s;
      if (csp2_) s->push_back(CSPLayer2(in, c4_, n_, 1.0, act_));
      else s->push_back(CSPRepLayer(in, c4_, n_, 1.0, act_));
      if (conv3x3_) s->push_back(ConvNorm(c4_, c4_, 3, 1, act_));
      return s;
    };
    cv1 = register_module("cv1", ConvNorm(c1_, c3_, 1, 1, act_));
    cv2 = register_module("cv2", branch(c3_ / 2));
    cv3 = register_module("cv3", branch(c4_));
    cv4 = register_module("cv4", ConvNorm(c3_ + 2 * c4_, c2_, 1, 1, act_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = cv1->forward(x).split_with_sizes({c3_ / 2, c3_ / 2}, 1);
    auto y2 = cv2->forward(y[1]);
    auto y3 = cv3->forward(y2);
    return cv4->forward(torch::cat({y[0], y[1], y2, y3}, 1));
  }
  ConvNorm cv1{nullptr}, cv4{nullptr};
  torch::nn::Sequential cv2{nullptr}, cv3{nullptr};

 private:
  int64_t c1_, c2_, c3_, c4_, n_;
  Act act_;
  bool csp2_, conv3x3_;
};
TORCH_MODULE(RepNCSPELAN4);

// HybridEncoderOptions with D-FINE-n's encoder as the defaults.
struct DFineEncoderOptions : HybridEncoderOptions {
  DFineEncoderOptions() {
    in_channels = {512, 1024};
    feat_strides = {16, 32};
    hidden_dim = 128;
    dim_feedforward = 512;
    use_encoder_idx = {1};
    expansion = 0.34;
    depth_mult = 0.5;
  }
  bool csp2 = false;          // the fusion blocks' CSP layers are CSPLayer2 (EC's, DEIMv2's csp_type "csp2")
  bool fusion_conv3x3 = true;  // the 3x3 ConvNorm after each of them (EC: none)
};

// D-FINE's blocks: projection children named conv / norm, lateral convs without activation,
// RepNCSPELAN4 fusion (c4 = round(expansion · hidden // 2), round(3 · depth_mult) RepVgg blocks, Python's
// rounding: half to even), SCDown downsampling (inside a Sequential: downsample_convs.N.0).
struct DFineEncoderBlocks {
  using Options = DFineEncoderOptions;
  static constexpr const char* name = "DFineEncoder";
  static constexpr bool input_projection = true;
  static torch::nn::Sequential input_proj(int64_t c, int64_t d) {
    torch::nn::Sequential s;
    s->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(c, d, 1).bias(false)));
    s->push_back("norm", BatchNorm2d(d));
    return s;
  }
  static constexpr Act lateral_act = Act::none;
  using Fusion = RepNCSPELAN4Impl;
  static RepNCSPELAN4 fusion(const Options& o) {
    const int64_t d = o.hidden_dim;
    return RepNCSPELAN4(o.fuse_sum ? d : 2 * d, d, 2 * d, c4(o), n(o), Act::silu, o.csp2, o.fusion_conv3x3);
  }
  using Down = torch::nn::SequentialImpl;
  static torch::nn::Sequential downsample(int64_t d) { return torch::nn::Sequential(SCDown(d, d, 3, 2)); }
  static int64_t c4(const Options& o) {
    return static_cast<int64_t>(std::nearbyint(std::floor(o.expansion * static_cast<double>(o.hidden_dim) / 2.0)));
  }
  static int64_t n(const Options& o) { return static_cast<int64_t>(std::nearbyint(3.0 * o.depth_mult)); }
};

using DFineEncoderImpl = HybridEncoderTImpl<DFineEncoderBlocks>;
TORCH_MODULE(DFineEncoder);

// EC's encoder (the original's models/ec/encoder.py HybridEncoder): D-FINE's with no input projections
// (the backbone's projector gives hidden_dim channels), an AIFI layer with SiLU, the FPN / PAN inputs
// summed (fuse_op "sum": the fusion blocks take hidden_dim channels) and csp2 fusion blocks without the
// 3x3 convs. The type holds the first (no input projections); ec_encoder_options sets the others.
struct ECEncoderBlocks : DFineEncoderBlocks {
  static constexpr const char* name = "ECEncoder";
  static constexpr bool input_projection = false;
};

inline DFineEncoderOptions ec_encoder_options(DFineEncoderOptions o) {
  o.enc_act = Act::silu;
  o.fuse_sum = true;
  o.csp2 = true;
  o.fusion_conv3x3 = false;
  o.cloned_blocks = true;  // models/ec/encoder.py:153-164
  return o;
}

using ECEncoderImpl = HybridEncoderTImpl<ECEncoderBlocks>;
TORCH_MODULE(ECEncoder);

}  // namespace libreyolo::nn::detr
