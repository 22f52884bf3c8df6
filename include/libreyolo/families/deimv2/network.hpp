#pragma once
// The DEIMv2 network (the original's models/deimv2/nn.py LibreDEIMv2Model), every size:
//   * atto / femto / pico: HGNetv2 Atto / Femto / Pico (its stride-16 stage only), DEIMv2's lite encoder;
//   * n: HGNetv2 B0 stages 2-3, the D-FINE hybrid encoder with DEIMv2's summed fusion and CSPLayer2 blocks;
//   * s / m / l / x: a ViT with the spatial-tuning adapter (DINOv3STAs, engine/backbone/dinov3_adapter.py;
//     DEIMv2ViTBackbone below): the ViT's patch tokens of three blocks (s, m: ViT-Tiny / Tiny+, blocks 3, 7,
//     11; l, x: DINOv3 ViT-S/16 / S/16+, blocks 5, 8, 11 through its final norm) as H/16 x W/16 maps,
//     resampled bilinearly to strides 8, 16, 32, each concatenated with the matching map of a small conv
//     branch (`sta`, SpatialPriorModulev2) and projected by a 1x1 conv + BN to the hidden width; then
//     the hybrid encoder of version "deim" (no input projections, summed fusion, RepNCSPELAN5 = csp2
//     blocks without the 3x3 convs: nn/detr/dfine_encoder.hpp's ECEncoder, with the default GELU AIFI).
//     Input: ImageNet-normalised RGB (the original's DEIMTrainTransform(imagenet_norm=True) for these
//     sizes); ours takes [0, 1] RGB and normalises inside encode() (DEIMv2Options::imagenet_norm; the
//     fixture test turns it off). Sizes: multiples of 32.
// Then the D-FINE decoder with DEIMv2's changes (nn/detr/dfine_decoder.hpp deimv2_decoder_options: RMSNorm,
// SwiGLU FFN, no enc_output, a 3-layer query_pos_head; atto..pico: no gateway and one box head shared by
// the layers). Every HGNetv2 size: the backbone trains whole (freeze_at -1, no frozen norms), use_lab. Every
// size: SiLU decoder, reg_max 32, reg_scale 4 (n..x: int64, as the original's); atto..n two decoder levels
// (strides 16 / 32) and 3 layers, s..x three levels (8 / 16 / 32) and 4 layers (x: 6); the decoder's anchors
// are buffers for the size's eval size (atto 320, femto 416, the others 640: SIZE_CONFIGS' input_size).
// Module names equal the original's state dict (backbone., encoder., decoder.; backbone.dinov3._model.
// blocks.0.attn.qkv.weight (s, m), backbone.dinov3.blocks.0.ls1.gamma (l, x), backbone.sta.conv2.0.weight).
//
// From scratch: the ViTs are initialised as the original's (Linear weights normal(0, 0.02), zero biases,
// [CLS] / storage tokens normal(0, 0.02), LayerScale 1e-5); the DINOv3 QKV's bias_mask is ones with the K
// third zeroed (the value DINOv3's checkpoints hold; the original builds it as NaN, so its own from-scratch
// l / x forward is NaN until a checkpoint is loaded). The original means s..x to start from its
// pretrained ViT weights (DINOv3 / distilled ViT-Tiny checkpoints), loaded here through weights=.
//
// The encoder boundary (capture/region.hpp): encode(x) = (normalisation +) backbone + encoder,
// decode(features) = the decoder, as families/dfine/network.hpp.
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/nn/detr/dfine_decoder.hpp>
#include <libreyolo/nn/detr/dfine_encoder.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/hgnetv2.hpp>
#include <libreyolo/nn/detr/lite_encoder.hpp>
#include <libreyolo/nn/normalize.hpp>
#include <libreyolo/nn/vit.hpp>

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace libreyolo::families::deimv2 {

namespace detr = libreyolo::nn::detr;

struct DEIMv2Options {
  std::string size = "atto";  // atto | femto | pico | n | s | m | l | x
  int64_t num_classes = 80;
  int64_t eval_spatial_size = 0;  // 0: the size's own (atto 320, femto 416, the others 640)
  bool imagenet_norm = true;      // s..x: normalise [0, 1] RGB inside encode() (see the header comment)
};

// The ViT backbone of a size s..x (SIZE_CONFIGS' backbone, DINOv3STAs' arguments, and the ViT's own
// configuration: vit_tiny.py's VisionTransformer or dinov3/vision_transformer.py's configs).
struct DEIMv2ViTConfig {
  bool dinov3;                 // l, x: DINOv3 ViT-S/16 (+) (4 storage tokens, LayerScale, final norm)
  int64_t embed_dim, heads;    // the ViT's width and heads
  double ffn_ratio;
  bool swiglu;                 // x: SwiGLU FFN
  std::vector<int64_t> layers;  // interaction_indexes
  int64_t conv_inplane;        // the conv branch's width (its maps: 2x, 4x, 4x that)
  int64_t hidden;              // the adapter's output width
};

// One row of the original's SIZE_CONFIGS.
struct DEIMv2SizeConfig {
  const char* backbone;  // HGNetv2 Atto, Femto, Pico, B0; "" for the ViT sizes
  bool lite;             // the lite encoder (else the hybrid encoder)
  int64_t input_size;
  int64_t hidden, enc_ffn, dec_ffn, num_queries;
  std::vector<int64_t> num_points;
  bool share_bbox_head_no_gateway;  // atto..pico: share_bbox_head true, use_gateway false
  double enc_expansion = 0.34, enc_depth_mult = 0.5;
  int64_t dec_layers = 3;
  std::optional<DEIMv2ViTConfig> vit;  // s..x
};

// The row of a size; an unknown size is refused naming the sizes (families/sizes.hpp require_row).
inline const DEIMv2SizeConfig& deimv2_size(const std::string& size) {
  static const SizeTable<DEIMv2SizeConfig, 8> table{{
      {"atto", {"Atto", true, 320, 64, 0, 160, 100, {4, 2}, true}},
      {"femto", {"Femto", true, 416, 96, 0, 256, 150, {4, 2}, true}},
      {"pico", {"Pico", true, 640, 112, 0, 320, 200, {4, 2}, true}},
      {"n", {"B0", false, 640, 128, 512, 512, 300, {6, 6}, false}},
      {"s", {"", false, 640, 192, 512, 512, 300, {3, 6, 3}, false, 0.34, 0.67, 4,
             DEIMv2ViTConfig{false, 192, 3, 4.0, false, {3, 7, 11}, 16, 192}}},
      {"m", {"", false, 640, 256, 512, 512, 300, {3, 6, 3}, false, 0.67, 1.0, 4,
             DEIMv2ViTConfig{false, 256, 4, 4.0, false, {3, 7, 11}, 16, 256}}},
      {"l", {"", false, 640, 224, 896, 1792, 300, {3, 6, 3}, false, 1.0, 1.0, 4,
             DEIMv2ViTConfig{true, 384, 6, 4.0, false, {5, 8, 11}, 32, 224}}},
      {"x", {"", false, 640, 256, 1024, 2048, 300, {3, 6, 3}, false, 1.25, 1.37, 6,
             DEIMv2ViTConfig{true, 384, 6, 6.0, true, {5, 8, 11}, 64, 256}}},
  }};
  return require_row(table, "deimv2", size);
}

// The ViT of a size s..x (nn/vit.hpp ViT). ViT-Tiny (s, m; vit_tiny.py): [CLS] + patch tokens, LayerNorm
// eps 1e-6, plain QKV with bias, GELU MLP of ratio 4, no LayerScale, no final norm. DINOv3 ViT-S/16 (l) /
// S/16+ (x): [CLS] + 4 storage tokens (+ the mask token), LayerNorm eps 1e-5, the masked-K-bias QKV,
// LayerScale 1e-5, MLP 4 (l) / SwiGLU 6 (x), the final norm, RoPE coordinates rescaled in training by a
// factor in [1/2, 2] (rescale_coords 2).
inline nn::vit::ViTOptions deimv2_vit_options(const DEIMv2ViTConfig& c) {
  nn::vit::ViTOptions o;
  o.block.dim = c.embed_dim;
  o.block.heads = c.heads;
  o.block.ffn_ratio = c.ffn_ratio;
  o.block.swiglu = c.swiglu;
  o.block.qkv_bias = true;
  o.block.mask_k_bias = c.dinov3;
  o.block.layer_scale = c.dinov3 ? 1e-5 : 0.0;
  o.block.ln_eps = c.dinov3 ? 1e-5 : 1e-6;
  o.depth = 12;
  o.patch = 16;
  o.storage_tokens = c.dinov3 ? 4 : 0;
  o.mask_token = c.dinov3;
  o.final_norm = c.dinov3;
  o.rope_rescale = c.dinov3 ? 2.0 : 0.0;
  o.owner = "DEIMv2";
  return o;
}

// vit_tiny.py's VisionTransformer: its ViT under `_model` (backbone.dinov3._model.*).
class DEIMv2TinyViTImpl : public torch::nn::Cloneable<DEIMv2TinyViTImpl> {
 public:
  explicit DEIMv2TinyViTImpl(nn::vit::ViTOptions o) : o_(std::move(o)) { reset(); }
  void reset() override { _model = register_module("_model", nn::vit::ViT(o_)); }
  nn::vit::ViT _model{nullptr};

 private:
  nn::vit::ViTOptions o_;
};
TORCH_MODULE(DEIMv2TinyViT);

// SpatialPriorModulev2 (`sta`): stem (3x3/2 conv, BN, GELU, 3x3/2 max pool; stride 4), conv2 (3x3/2 conv,
// BN; stride 8), conv3 and conv4 (GELU, 3x3/2 conv, BN; strides 16, 32); every conv without bias;
// widths c, 2c, 4c, 4c. -> the maps at strides 8, 16, 32.
class DEIMv2SpatialPriorImpl : public torch::nn::Cloneable<DEIMv2SpatialPriorImpl> {
 public:
  explicit DEIMv2SpatialPriorImpl(int64_t c) : c_(c) { reset(); }
  void reset() override {
    auto conv = [](int64_t in, int64_t out) {
      return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(2).padding(1).bias(false));
    };
    using torch::nn::GELU;
    stem = register_module("stem", torch::nn::Sequential(conv(3, c_), libreyolo::nn::BatchNorm2d(c_), GELU(),
                                                         torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1))));
    conv2 = register_module("conv2", torch::nn::Sequential(conv(c_, 2 * c_), libreyolo::nn::BatchNorm2d(2 * c_)));
    conv3 = register_module("conv3", torch::nn::Sequential(GELU(), conv(2 * c_, 4 * c_), libreyolo::nn::BatchNorm2d(4 * c_)));
    conv4 = register_module("conv4", torch::nn::Sequential(GELU(), conv(4 * c_, 4 * c_), libreyolo::nn::BatchNorm2d(4 * c_)));
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto c2 = conv2->forward(stem->forward(x));
    auto c3 = conv3->forward(c2);
    auto c4 = conv4->forward(c3);
    return {c2, c3, c4};
  }
  torch::nn::Sequential stem{nullptr}, conv2{nullptr}, conv3{nullptr}, conv4{nullptr};

 private:
  int64_t c_;
};
TORCH_MODULE(DEIMv2SpatialPrior);

// DINOv3STAs (`backbone`): dinov3 (the ViT), sta (the conv branch), convs + norms (1x1 conv without bias
// + BN per level over [the ViT map, the branch's map]). -> the maps at strides 8, 16, 32.
class DEIMv2ViTBackboneImpl : public torch::nn::Cloneable<DEIMv2ViTBackboneImpl> {
 public:
  explicit DEIMv2ViTBackboneImpl(DEIMv2ViTConfig c) : c_(std::move(c)) { reset(); }
  void reset() override {
    const auto vo = deimv2_vit_options(c_);
    if (c_.dinov3) {
      vit = register_module("dinov3", nn::vit::ViT(vo));
    } else {
      tiny = register_module("dinov3", DEIMv2TinyViT(vo));
    }
    sta = register_module("sta", DEIMv2SpatialPrior(c_.conv_inplane));
    convs = register_module("convs", torch::nn::ModuleList());
    norms = register_module("norms", torch::nn::ModuleList());
    for (int64_t branch : {2, 4, 4}) {
      convs->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(c_.embed_dim + branch * c_.conv_inplane, c_.hidden, 1).bias(false)));
      norms->push_back(libreyolo::nn::BatchNorm2d(c_.hidden));
    }
    // The original's ViT init (vit_tiny.py init_weights / DINOv3's init_weights_vit): Linear weights
    // trunc_normal_(std 0.02) (cut at +-2 absolute: a normal), zero biases; [CLS] and storage tokens
    // normal(0, 0.02); the mask token zero; LayerScale 1e-5 (ViT's own); LayerNorms ones / zeros; the patch
    // conv as LibTorch's (= PyTorch's) default.
    auto& v = vit_model();
    nn::vit::init_linears_trunc_normal(v);
    torch::NoGradGuard ng;
    v.cls_token.normal_(0.0, 0.02);
    if (v.storage_tokens.defined()) v.storage_tokens.normal_(0.0, 0.02);
  }
  // The ViT: the "dinov3" child (l, x) or the wrapper's "_model" (s, m). Looked up on use, never cached: a
  // clone() moves a cloned wrapper into the copy's, whose cached handle would keep the ViT reset() built.
  nn::vit::ViTImpl& vit_model() { return c_.dinov3 ? *vit : *tiny->_model; }
  std::vector<int64_t> out_channels() const { return {c_.hidden, c_.hidden, c_.hidden}; }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
    if (H % 32 || W % 32)
      throw ConfigError("DEIMv2: input " + std::to_string(H) + "x" + std::to_string(W) +
                        " must be a multiple of 32 (the ViT's grid of 16 halved for the stride-32 level; give imgsz= a multiple of 32)");
    const int64_t h = H / 16, w = W / 16;
    const auto layers = vit_model().forward_layers(x, c_.layers, /*normed=*/c_.dinov3);
    const auto detail = sta->forward(x);
    namespace F = torch::nn::functional;
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < 3; ++i) {
      auto sem = layers[static_cast<size_t>(i)].transpose(1, 2).reshape({B, -1, h, w}).contiguous();
      // int(h * 2^(1 - i)), as the original.
      const int64_t rh = i == 0 ? 2 * h : (i == 1 ? h : h / 2), rw = i == 0 ? 2 * w : (i == 1 ? w : w / 2);
      sem = F::interpolate(sem, F::InterpolateFuncOptions().size(std::vector<int64_t>{rh, rw}).mode(torch::kBilinear).align_corners(false));
      auto fused = torch::cat({sem, detail[static_cast<size_t>(i)]}, 1);
      out.push_back(norms[i]->as<libreyolo::nn::BatchNorm2dImpl>()->forward(convs[i]->as<torch::nn::Conv2dImpl>()->forward(fused)));
    }
    return out;
  }
  nn::vit::ViT vit{nullptr};          // l, x: registered as "dinov3" (s, m: vit_model() is "dinov3._model")
  DEIMv2TinyViT tiny{nullptr};        // s, m: the wrapper registered as "dinov3"
  DEIMv2SpatialPrior sta{nullptr};
  torch::nn::ModuleList convs{nullptr}, norms{nullptr};

 private:
  DEIMv2ViTConfig c_;
};
TORCH_MODULE(DEIMv2ViTBackbone);

class DEIMv2Impl : public torch::nn::Cloneable<DEIMv2Impl> {
 public:
  explicit DEIMv2Impl(DEIMv2Options o = {}) : o_(std::move(o)) { reset(); }
  void reset() override {
    const DEIMv2SizeConfig& c = deimv2_size(o_.size);
    const int64_t d = c.hidden;
    std::shared_ptr<torch::nn::Module> bb, enc;
    std::vector<int64_t> in_channels;
    if (c.vit) {
      vit_backbone = register_module("backbone", DEIMv2ViTBackbone(*c.vit));
      bb = vit_backbone.ptr();
      in_channels = vit_backbone->out_channels();
    } else {
      detr::HGNetv2Options bo;
      bo.name = c.backbone;
      bo.use_lab = true;
      bo.return_idx = c.lite ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3};
      bo.freeze_stem = false;  // freeze_at -1
      bo.freeze_norm = false;
      backbone = register_module("backbone", detr::HGNetv2(bo));
      bb = backbone.ptr();
      in_channels = backbone->out_channels();
    }
    const std::vector<int64_t> strides = c.vit ? std::vector<int64_t>{8, 16, 32} : std::vector<int64_t>{16, 32};
    if (c.lite) {
      detr::LiteEncoderOptions lo;
      lo.in_channels = in_channels;
      lo.feat_strides = {16};
      lo.hidden_dim = d;
      lo.expansion = 0.34;
      lo.depth_mult = 0.5;
      lite_encoder = register_module("encoder", detr::LiteEncoder(lo));
      enc = lite_encoder.ptr();
    } else {
      detr::DFineEncoderOptions eo;
      eo.in_channels = in_channels;
      eo.feat_strides = strides;
      eo.hidden_dim = d;
      eo.dim_feedforward = c.enc_ffn;
      eo.expansion = c.enc_expansion;
      eo.depth_mult = c.enc_depth_mult;
      eo.use_encoder_idx = {static_cast<int64_t>(strides.size()) - 1};
      eo.fuse_sum = true;
      eo.csp2 = true;
      eo.cloned_blocks = true;  // one Lateral_Conv, SCDown_Conv and Fuse_Block deep-copied (hybrid_encoder.py:491-526)
      if (c.vit) {
        // version "deim": RepNCSPELAN5 (csp2, no 3x3 convs); every input already hidden_dim wide (identity
        // projections); the AIFI layer keeps the default GELU.
        eo = detr::ec_encoder_options(eo);
        eo.enc_act = detr::Act::gelu;
        vit_encoder = register_module("encoder", detr::ECEncoder(eo));
        enc = vit_encoder.ptr();
      } else {
        hybrid_encoder = register_module("encoder", detr::DFineEncoder(eo));
        enc = hybrid_encoder.ptr();
      }
    }
    detr::DFineDecoderOptions dd;
    dd.num_classes = o_.num_classes;
    dd.hidden_dim = d;
    dd.num_queries = c.num_queries;
    dd.feat_channels = std::vector<int64_t>(strides.size(), d);
    dd.feat_strides = strides;
    dd.num_levels = static_cast<int64_t>(strides.size());
    dd.num_points = c.num_points;
    dd.num_layers = c.dec_layers;
    dd.dim_feedforward = c.dec_ffn;
    dd.activation = detr::Act::silu;
    dd.mlp_act = detr::Act::silu;
    dd.eval_spatial_size = eval_size();
    dd.reg_max = 32;
    dd.reg_scale = 4.0;
    dd.use_gateway = !c.share_bbox_head_no_gateway;
    dd.share_bbox_head = c.share_bbox_head_no_gateway;
    dd.integer_reg_scale = !c.lite;  // n..x: SIZE_CONFIGS' reg_scale 4 (an int); atto..pico: the default 4.0
    decoder = register_module("decoder", detr::DFineDecoder(detr::deimv2_decoder_options(dd)));
    chain_ = std::make_shared<Chain>(bb, enc);
  }

  int64_t eval_size() const { return o_.eval_spatial_size > 0 ? o_.eval_spatial_size : deimv2_size(o_.size).input_size; }
  bool uses_vit() const { return static_cast<bool>(vit_backbone); }

  // [0, 1] RGB -> ImageNet-normalised (the ViT sizes, where imagenet_norm), in x's dtype (nn/normalize.hpp:
  // no host tensor copied to the device, so it runs inside a CUDA-graph capture).
  torch::Tensor normalize(const torch::Tensor& x) const { return vit_backbone && o_.imagenet_norm ? nn::imagenet_normalize(x) : x; }
  // The backbone's maps (no normalisation).
  std::vector<torch::Tensor> backbone_features(const torch::Tensor& x) {
    return vit_backbone ? vit_backbone->forward(x) : backbone->forward(x);
  }

  // The encoder boundary: encoder() owns the captured parameters and buffers (backbone + encoder).
  torch::nn::Module& encoder() { return *chain_; }
  std::vector<torch::Tensor> encode(const torch::Tensor& x) {
    auto f = backbone_features(normalize(x));
    if (lite_encoder) return lite_encoder->forward(f);
    return hybrid_encoder ? hybrid_encoder->forward(f) : vit_encoder->forward(f);
  }
  detr::DFineNetOutput decode(const std::vector<torch::Tensor>& feats) {
    return detr::dfine_decode(decoder, feats, vit_backbone ? 8 : 16);
  }
  detr::DFineNetOutput forward(const torch::Tensor& x) {
    auto out = decode(encode(x));
    out.input_hw = {x.size(2), x.size(3)};
    return out;
  }

  const DEIMv2Options& options() const { return o_; }
  detr::HGNetv2 backbone{nullptr};              // atto..n, registered as "backbone"
  DEIMv2ViTBackbone vit_backbone{nullptr};      // s..x, registered as "backbone"
  detr::LiteEncoder lite_encoder{nullptr};      // atto..pico, registered as "encoder"
  detr::DFineEncoder hybrid_encoder{nullptr};   // n, registered as "encoder"
  detr::ECEncoder vit_encoder{nullptr};         // s..x (version "deim"), registered as "encoder"
  detr::DFineDecoder decoder{nullptr};

 private:
  DEIMv2Options o_;
  // The captured chain (the backbone and the encoder, type-erased), owning no modules of its own.
  using Chain = detr::EncoderChainImpl<std::shared_ptr<torch::nn::Module>, std::shared_ptr<torch::nn::Module>>;
  std::shared_ptr<Chain> chain_;
};
TORCH_MODULE(DEIMv2);

}  // namespace libreyolo::families::deimv2
