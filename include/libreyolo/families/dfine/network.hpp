#pragma once
// The D-FINE-line networks (D-FINE, DEIM and RT-DETRv4 share one: the original's LibreDFINEModel /
// LibreDEIMModel, models/dfine/nn.py): HGNetv2 backbone -> D-FINE hybrid encoder -> D-FINE decoder with
// Fine-grained Distribution Refinement (nn/detr/hgnetv2.hpp, dfine_encoder.hpp, dfine_decoder.hpp).
// Module names equal the original's state dict (backbone., encoder., decoder.).
//
// Sizes: the original's SIZE_CONFIGS (models/dfine/nn.py; models/deim/nn.py the same but for the
// freezing), as the table dfine_size() below: the HGNetv2 variant (B0 n/s, B2 m, B4 l, B5 x), use_lab
// (n/s/m), the stages returned (n: 2-3 = strides 16/32; the others 1-3 = 8/16/32), freeze_norm (l/x:
// FrozenBatchNorm2d throughout the backbone), the encoder's hidden dim / FFN / CSP expansion / depth
// multiplier, the decoder's layers and points per level. x alone has an encoder wider (384) than its
// decoder (256, so the decoder's input_proj are 384 -> 256 convs) and reg_scale 8; every size reg_max 32,
// eval size 640 (the decoder's anchors are buffers for it).
// Variants: D-FINE (ReLU decoder heads, the backbone's stem frozen), DEIM (SiLU decoder FFN / LQE / MLP
// heads; the stem frozen only at l/x, whose DEIM configs keep freeze_at 0), RT-DETRv4 (D-FINE's table
// built with activation "silu": SiLU as DEIM, stem frozen).
//
// The encoder boundary (capture/region.hpp): encode(x) = backbone + encoder, the chain a CUDA graph
// captures; decode(features) = the decoder. In training mode decode() returns the features with the
// decoder still to run, and the family's loss runs it with the batch's targets (DFineNetOutput::run:
// the denoising queries need them); in eval mode decode() runs the decoder at once.
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/nn/detr/dfine_decoder.hpp>
#include <libreyolo/nn/detr/dfine_encoder.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/hgnetv2.hpp>

#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace libreyolo::families::dfine {

namespace detr = libreyolo::nn::detr;

enum class Variant { dfine, deim, rtdetrv4 };

struct DFineOptions {
  std::string size = "n";  // n | s | m | l | x
  int64_t num_classes = 80;
  Variant variant = Variant::dfine;
  int64_t eval_spatial_size = 640;
};

// One row of the original's SIZE_CONFIGS.
struct DFineSizeConfig {
  const char* backbone;  // HGNetv2 B0 .. B5
  bool use_lab, freeze_norm;
  std::vector<int64_t> return_idx;
  int64_t enc_hidden, enc_ffn;
  double expansion, depth_mult;
  int64_t dec_hidden, dec_ffn, dec_layers;
  std::vector<int64_t> num_points;
  double reg_scale;
  bool deim_freeze_stem;  // DEIM's freeze_at >= 0 (l/x); D-FINE and RT-DETRv4 freeze the stem at every size
};

inline const DFineSizeConfig* dfine_size(const std::string& size) {
  static const SizeTable<DFineSizeConfig, 5> table{{
      {"n", {"B0", true, false, {2, 3}, 128, 512, 0.34, 0.5, 128, 512, 3, {6, 6}, 4.0, false}},
      {"s", {"B0", true, false, {1, 2, 3}, 256, 1024, 0.5, 0.34, 256, 1024, 3, {3, 6, 3}, 4.0, false}},
      {"m", {"B2", true, false, {1, 2, 3}, 256, 1024, 1.0, 0.67, 256, 1024, 4, {3, 6, 3}, 4.0, false}},
      {"l", {"B4", false, true, {1, 2, 3}, 256, 1024, 1.0, 1.0, 256, 1024, 6, {3, 6, 3}, 4.0, true}},
      {"x", {"B5", false, true, {1, 2, 3}, 384, 2048, 1.0, 1.0, 256, 1024, 6, {3, 6, 3}, 8.0, true}},
  }};
  return find_size(table, size);
}

class DFineImpl : public torch::nn::Cloneable<DFineImpl> {
 public:
  explicit DFineImpl(DFineOptions o = {}) : o_(std::move(o)) {
    if (!dfine_size(o_.size)) throw ConfigError("D-FINE network size '" + o_.size + "': not available; allowed: n, s, m, l, x");
    reset();
  }
  void reset() override {
    const DFineSizeConfig& c = *dfine_size(o_.size);
    const bool silu = o_.variant != Variant::dfine;
    detr::HGNetv2Options bo;
    bo.name = c.backbone;
    bo.use_lab = c.use_lab;
    bo.return_idx = c.return_idx;
    bo.freeze_stem = o_.variant != Variant::deim || c.deim_freeze_stem;
    bo.freeze_norm = c.freeze_norm;
    backbone = register_module("backbone", detr::HGNetv2(bo));
    detr::DFineEncoderOptions eo;
    eo.in_channels = backbone->out_channels();
    eo.feat_strides.clear();
    for (auto i : c.return_idx) eo.feat_strides.push_back(int64_t{4} << i);  // stages 0..3: strides 4..32
    eo.hidden_dim = c.enc_hidden;
    eo.dim_feedforward = c.enc_ffn;
    eo.expansion = c.expansion;
    eo.depth_mult = c.depth_mult;
    eo.use_encoder_idx = {static_cast<int64_t>(c.return_idx.size()) - 1};  // the last (stride-32) level
    hybrid_encoder = register_module("encoder", detr::DFineEncoder(eo));
    detr::DFineDecoderOptions d;
    d.num_classes = o_.num_classes;
    d.hidden_dim = c.dec_hidden;
    d.feat_channels = std::vector<int64_t>(eo.in_channels.size(), eo.hidden_dim);
    d.feat_strides = eo.feat_strides;
    d.num_levels = static_cast<int64_t>(eo.in_channels.size());
    d.num_points = c.num_points;
    d.num_layers = c.dec_layers;
    d.dim_feedforward = c.dec_ffn;
    d.activation = silu ? detr::Act::silu : detr::Act::relu;
    d.mlp_act = d.activation;
    d.eval_spatial_size = o_.eval_spatial_size;
    d.reg_scale = c.reg_scale;
    decoder = register_module("decoder", detr::DFineDecoder(d));
    first_stride_ = eo.feat_strides.front();
    chain_ = std::make_shared<Chain>(backbone, hybrid_encoder);
  }

  // The encoder boundary: encoder() owns the captured parameters and buffers (backbone + encoder).
  torch::nn::Module& encoder() { return *chain_; }
  std::vector<torch::Tensor> encode(const torch::Tensor& x) { return hybrid_encoder->forward(backbone->forward(x)); }
  detr::DFineNetOutput decode(const std::vector<torch::Tensor>& feats) { return detr::dfine_decode(decoder, feats, first_stride_); }
  detr::DFineNetOutput forward(const torch::Tensor& x) {
    auto out = decode(encode(x));
    out.input_hw = {x.size(2), x.size(3)};
    return out;
  }

  const DFineOptions& options() const { return o_; }
  detr::HGNetv2 backbone{nullptr};
  detr::DFineEncoder hybrid_encoder{nullptr};  // registered as "encoder"
  detr::DFineDecoder decoder{nullptr};

 private:
  DFineOptions o_;
  int64_t first_stride_ = 16;
  using Chain = detr::EncoderChainImpl<detr::HGNetv2, detr::DFineEncoder>;
  std::shared_ptr<Chain> chain_;
};
TORCH_MODULE(DFine);

}  // namespace libreyolo::families::dfine
