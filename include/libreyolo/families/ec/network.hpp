#pragma once
// EC (EdgeCrafter) as the original builds it (libreyolo/models/ec/nn.py LibreECModel, at c41461e):
//   * backbone: ECViT + adapter (models/ec/backbone.py ViTAdapter): a ViT/16 whose patch embedding is a
//     conv pyramid (three 3x3/2 ConvNorm + ReLU to D/8, D/4, D/2 channels, then a 3x3/2 conv with bias to
//     D), one register token in front of the patch tokens, 12 pre-norm blocks (LayerNorm eps 1e-6, a
//     fused QKV with bias, DINOv3's axial RoPE on the patch tokens, a GELU MLP of ratio 4 (x: 6), no
//     LayerScale, no final norm), the patch tokens of blocks 10 and 11 averaged, reshaped to the H/16 x
//     W/16 grid and resampled bilinearly to strides 8, 16 and 32; a projector of 1x1 ConvNorms (no
//     activation): one per level to proj_dim (l, x: 256), or, without proj_dim (s, m), one on the
//     stride-32 level only, keeping the embed dim;
//   * encoder: D-FINE's hybrid encoder with EC's changes (nn/detr/dfine_encoder.hpp ECEncoder and
//     ec_encoder_options: no input projections, SiLU AIFI, summed FPN / PAN inputs, csp2 fusion blocks
//     without 3x3 convs);
//   * decoder: D-FINE's (nn/detr/dfine_decoder.hpp) with EC's differences (ec_decoder_options): 4
//     layers, points 3/6/3, SiLU everywhere, reg_max 32, reg_scale 4, eval size 640.
// Module names equal the original's state dict (backbone.backbone.blocks.0.attn.qkv.weight,
// backbone.projector.0.conv.weight, encoder.fpn_blocks.0.cv2.0.conv1.conv.weight, decoder.decoder.
// layers.0.norm2.weight, ...).
//
// Input: the original feeds its network ImageNet-normalised RGB (models/ec/postprocess.py and the
// trainer's DFINETrainTransform(imagenet_norm=True)); ours takes [0, 1] RGB and normalises inside
// encode() (ECOptions::imagenet_norm; the fixture test turns it off, as the fixtures feed the network
// directly). Sizes: multiples of 32 (the grid of 16 halved for the stride-32 level).
//
// The encoder boundary (capture/region.hpp): encode(x) = normalisation + backbone + encoder; decode() the
// decoder, as the D-FINE line's (families/dfine/network.hpp).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/dfine_decoder.hpp>
#include <libreyolo/nn/detr/dfine_encoder.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/layers.hpp>
#include <libreyolo/nn/normalize.hpp>
#include <libreyolo/nn/vit.hpp>

#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace libreyolo::families::ec {

namespace detr = libreyolo::nn::detr;

inline constexpr int64_t kPatch = 16;
inline constexpr int64_t kDepth = 12;
inline constexpr std::array<int64_t, 2> kFusedBlocks{10, 11};  // interaction_indexes
inline constexpr double kLayerNormEps = 1e-6;

// One row of the original's SIZE_CONFIGS (models/ec/nn.py).
struct ECSizeConfig {
  int64_t embed_dim, num_heads, proj_dim;  // proj_dim 0: none (the embed dim, stride-32 level projected only)
  double ffn_ratio;
  int64_t enc_hidden, enc_ffn;
  double enc_expansion, enc_depth_mult;
  int64_t dec_hidden, dec_ffn;
};

inline const ECSizeConfig* ec_size(const std::string& size) {
  static const ECSizeConfig s{192, 3, 0, 4.0, 192, 512, 0.34, 0.67, 192, 512};
  static const ECSizeConfig m{256, 4, 0, 4.0, 256, 512, 0.75, 0.67, 256, 1024};
  static const ECSizeConfig l{384, 6, 256, 4.0, 256, 1024, 0.75, 1.0, 256, 1024};
  static const ECSizeConfig x{384, 6, 256, 6.0, 256, 2048, 1.5, 1.0, 256, 2048};
  if (size == "s") return &s;
  if (size == "m") return &m;
  if (size == "l") return &l;
  if (size == "x") return &x;
  return nullptr;
}

struct ECOptions {
  std::string size = "s";  // s | m | l | x
  int64_t num_classes = 80;
  int64_t eval_spatial_size = 640;
  bool imagenet_norm = true;  // normalise [0, 1] RGB inside encode() (see the header comment)
};

// ConvPyramidPatchEmbed: convs.0..2 (ConvNorm 3x3/2 + ReLU) and proj (3x3/2 conv with bias).
class ECPatchEmbedImpl : public torch::nn::Cloneable<ECPatchEmbedImpl> {
 public:
  explicit ECPatchEmbedImpl(int64_t dim) : dim_(dim) { reset(); }
  void reset() override {
    convs = register_module("convs", torch::nn::ModuleList());
    int64_t in = 3;
    for (int64_t r : {8, 4, 2}) {
      convs->push_back(detr::ConvNorm(in, dim_ / r, 3, 2, detr::Act::relu));
      in = dim_ / r;
    }
    proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, dim_, 3).stride(2).padding(1)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (const auto& c : *convs) x = c->as<detr::ConvNormImpl>()->forward(x);
    return proj->forward(x);
  }
  torch::nn::ModuleList convs{nullptr};
  torch::nn::Conv2d proj{nullptr};

 private:
  int64_t dim_;
};
TORCH_MODULE(ECPatchEmbed);

// EC's block (nn/vit.hpp Block): LayerNorm eps 1e-6, a fused QKV with bias, RoPE on the patch tokens (the
// register token unrotated), a GELU MLP of the size's ratio, no LayerScale.
inline nn::vit::BlockOptions ec_block_options(const ECSizeConfig& c) {
  nn::vit::BlockOptions o;
  o.dim = c.embed_dim;
  o.heads = c.num_heads;
  o.ffn_ratio = c.ffn_ratio;
  o.ln_eps = kLayerNormEps;
  return o;
}

// The ViT (`backbone.backbone`): -> the patch tokens [B, h*w, D] of the fused blocks.
class ECViTImpl : public torch::nn::Cloneable<ECViTImpl> {
 public:
  explicit ECViTImpl(const ECSizeConfig& c) : c_(c) { reset(); }
  void reset() override {
    const int64_t D = c_.embed_dim;
    register_token = register_parameter("register_token", torch::zeros({1, 1, D}));
    patch_embed = register_module("patch_embed", ECPatchEmbed(D));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < kDepth; ++i) blocks->push_back(nn::vit::Block(ec_block_options(c_)));
    rope_embed = register_module("rope_embed", nn::vit::RopePositionEmbedding(D, c_.num_heads));
    // The original's init: trunc_normal_(std 0.02) on every Linear weight (cut at +-2, absolute: 100
    // standard deviations out, so a normal) and on the register token, zero Linear biases.
    nn::vit::init_linears_trunc_normal(*this);
    torch::NoGradGuard ng;
    register_token.normal_(0.0, 0.02);
  }
  // x [B, 3, H, W] -> the fused blocks' patch tokens and the grid (h, w).
  std::vector<torch::Tensor> forward(const torch::Tensor& x, int64_t& h, int64_t& w) {
    auto emb = patch_embed->forward(x);
    h = emb.size(2), w = emb.size(3);
    auto tokens = emb.flatten(2).transpose(1, 2);
    tokens = torch::cat({register_token.expand({tokens.size(0), -1, -1}), tokens}, 1);  // promotes as the original's cat
    auto [sin, cos] = rope_embed->forward(h, w);
    const auto rope = nn::vit::token_rope(sin, cos, 1);  // the register token unrotated
    std::vector<torch::Tensor> outs;
    for (int64_t i = 0; i < kDepth; ++i) {
      tokens = blocks[i]->as<nn::vit::BlockImpl>()->forward(tokens, rope);
      if (i == kFusedBlocks[0] || i == kFusedBlocks[1]) outs.push_back(tokens.narrow(1, 1, tokens.size(1) - 1));
    }
    return outs;
  }
  torch::Tensor register_token;
  ECPatchEmbed patch_embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  nn::vit::RopePositionEmbedding rope_embed{nullptr};

 private:
  ECSizeConfig c_;
};
TORCH_MODULE(ECViT);

// ViTAdapter (`backbone`): backbone (the ViT) + projector; -> maps at strides 8, 16, 32.
class ECBackboneImpl : public torch::nn::Cloneable<ECBackboneImpl> {
 public:
  explicit ECBackboneImpl(const ECSizeConfig& c) : c_(c) { reset(); }
  void reset() override {
    backbone = register_module("backbone", ECViT(c_));
    projector = register_module("projector", torch::nn::ModuleList());
    const int64_t n = c_.proj_dim > 0 ? 3 : 1;
    for (int64_t i = 0; i < n; ++i) projector->push_back(detr::ConvNorm(c_.embed_dim, out_channels(), 1, 1));
  }
  int64_t out_channels() const { return c_.proj_dim > 0 ? c_.proj_dim : c_.embed_dim; }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    const int64_t H = x.size(2), W = x.size(3), B = x.size(0);
    if (H % 32 || W % 32)
      throw ConfigError("EC: input " + std::to_string(H) + "x" + std::to_string(W) +
                        " must be a multiple of 32 (the ViT's grid of 16 halved for the stride-32 level; give imgsz= a multiple of 32)");
    int64_t h = 0, w = 0;
    const auto outs = backbone->forward(x, h, w);
    auto fused = torch::stack(outs).mean(0).transpose(1, 2).contiguous().view({B, -1, h, w});
    std::vector<torch::Tensor> feats;
    namespace F = torch::nn::functional;
    for (int64_t i = 0; i < 3; ++i) {
      // scale 2^(1 - i): int(h * scale) as the original.
      const int64_t rh = i == 0 ? 2 * h : (i == 1 ? h : h / 2), rw = i == 0 ? 2 * w : (i == 1 ? w : w / 2);
      feats.push_back(F::interpolate(fused, F::InterpolateFuncOptions()
                                                .size(std::vector<int64_t>{rh, rw})
                                                .mode(torch::kBilinear)
                                                .align_corners(false)));
    }
    if (projector->size() == 1) feats.back() = projector[0]->as<detr::ConvNormImpl>()->forward(feats.back());
    else
      for (size_t i = 0; i < feats.size(); ++i) feats[i] = projector[i]->as<detr::ConvNormImpl>()->forward(feats[i]);
    return feats;
  }
  ECViT backbone{nullptr};
  torch::nn::ModuleList projector{nullptr};

 private:
  ECSizeConfig c_;
};
TORCH_MODULE(ECBackbone);

class ECImpl : public torch::nn::Cloneable<ECImpl> {
 public:
  explicit ECImpl(ECOptions o = {}) : o_(std::move(o)) {
    if (!ec_size(o_.size)) throw ConfigError("EC network size '" + o_.size + "': not available; allowed: s, m, l, x");
    reset();
  }
  void reset() override {
    const ECSizeConfig& c = *ec_size(o_.size);
    backbone = register_module("backbone", ECBackbone(c));
    detr::DFineEncoderOptions eo;
    eo.in_channels = {c.enc_hidden, c.enc_hidden, c.enc_hidden};
    eo.feat_strides = {8, 16, 32};
    eo.hidden_dim = c.enc_hidden;
    eo.dim_feedforward = c.enc_ffn;
    eo.expansion = c.enc_expansion;
    eo.depth_mult = c.enc_depth_mult;
    eo.use_encoder_idx = {2};
    hybrid_encoder = register_module("encoder", detr::ECEncoder(detr::ec_encoder_options(eo)));
    detr::DFineDecoderOptions d;
    d.num_classes = o_.num_classes;
    d.hidden_dim = c.dec_hidden;
    d.feat_channels = {c.dec_hidden, c.dec_hidden, c.dec_hidden};
    d.feat_strides = {8, 16, 32};
    d.num_levels = 3;
    d.num_points = {3, 6, 3};
    d.num_layers = 4;
    d.dim_feedforward = c.dec_ffn;
    d.activation = detr::Act::silu;
    d.mlp_act = detr::Act::silu;
    d.eval_spatial_size = o_.eval_spatial_size;
    d.reg_max = 32;
    d.reg_scale = 4.0;
    decoder = register_module("decoder", detr::DFineDecoder(detr::ec_decoder_options(d)));
    chain_ = std::make_shared<Chain>(backbone, hybrid_encoder);
  }

  // [0, 1] RGB -> ImageNet-normalised (where imagenet_norm), in x's dtype.
  torch::Tensor normalize(const torch::Tensor& x) const {
    if (!o_.imagenet_norm) return x;
    return nn::imagenet_normalize(x);
  }

  torch::nn::Module& encoder() { return *chain_; }
  std::vector<torch::Tensor> encode(const torch::Tensor& x) { return hybrid_encoder->forward(backbone->forward(normalize(x))); }
  detr::DFineNetOutput decode(const std::vector<torch::Tensor>& feats) { return detr::dfine_decode(decoder, feats, 8); }
  detr::DFineNetOutput forward(const torch::Tensor& x) {
    auto out = decode(encode(x));
    out.input_hw = {x.size(2), x.size(3)};
    return out;
  }

  const ECOptions& options() const { return o_; }
  ECBackbone backbone{nullptr};
  detr::ECEncoder hybrid_encoder{nullptr};  // registered as "encoder"
  detr::DFineDecoder decoder{nullptr};

 private:
  ECOptions o_;
  using Chain = detr::EncoderChainImpl<ECBackbone, detr::ECEncoder>;
  std::shared_ptr<Chain> chain_;
};
TORCH_MODULE(EC);

}  // namespace libreyolo::families::ec
