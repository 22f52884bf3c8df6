#pragma once
// The DEIMv2 network (the original's models/deimv2/nn.py LibreDEIMv2Model) for the HGNetv2 sizes:
// atto / femto / pico (HGNetv2 Atto / Femto / Pico, its stride-16 stage only, DEIMv2's lite encoder) and n
// (HGNetv2 B0 stages 2-3, the D-FINE hybrid encoder with DEIMv2's summed fusion and CSPLayer2 blocks),
// then the D-FINE decoder with DEIMv2's changes (nn/detr/dfine_decoder.hpp deimv2_decoder_options: RMSNorm, SwiGLU FFN,
// no enc_output, a 3-layer query_pos_head; atto..pico: no gateway and one box head shared by the layers).
// Every size: the backbone trains whole (freeze_at -1, no frozen norms), use_lab, SiLU decoder, two
// decoder levels (strides 16 / 32), 3 layers, reg_max 32, reg_scale 4 (n: int64, as the original's); the
// decoder's anchors are buffers
// for the size's eval size (atto 320, femto 416, the others 640: SIZE_CONFIGS' input_size).
// The s..x sizes (DINOv3-style ViT backbones with the spatial-tuning adapter) are not here yet.
// Module names equal the original's state dict (backbone., encoder., decoder.).
//
// The encoder boundary (capture/region.hpp): encode(x) = backbone + encoder, decode(features) = the
// decoder, as families/dfine/network.hpp.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/dfine_decoder.hpp>
#include <libreyolo/nn/detr/dfine_encoder.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/hgnetv2.hpp>
#include <libreyolo/nn/detr/lite_encoder.hpp>

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace libreyolo::families::deimv2 {

namespace detr = libreyolo::nn::detr;

struct DEIMv2Options {
  std::string size = "atto";  // atto | femto | pico | n
  int64_t num_classes = 80;
  int64_t eval_spatial_size = 0;  // 0: the size's own (atto 320, femto 416, pico / n 640)
};

// One row of the original's SIZE_CONFIGS (the HGNetv2 sizes).
struct DEIMv2SizeConfig {
  const char* backbone;  // HGNetv2 Atto, Femto, Pico, B0
  bool lite;             // the lite encoder (else the hybrid encoder)
  int64_t input_size;
  int64_t hidden, enc_ffn, dec_ffn, num_queries;
  std::vector<int64_t> num_points;
  bool share_bbox_head_no_gateway;  // atto..pico: share_bbox_head true, use_gateway false
};

inline const DEIMv2SizeConfig* deimv2_size(const std::string& size) {
  static const DEIMv2SizeConfig atto{"Atto", true, 320, 64, 0, 160, 100, {4, 2}, true};
  static const DEIMv2SizeConfig femto{"Femto", true, 416, 96, 0, 256, 150, {4, 2}, true};
  static const DEIMv2SizeConfig pico{"Pico", true, 640, 112, 0, 320, 200, {4, 2}, true};
  static const DEIMv2SizeConfig n{"B0", false, 640, 128, 512, 512, 300, {6, 6}, false};
  if (size == "atto") return &atto;
  if (size == "femto") return &femto;
  if (size == "pico") return &pico;
  if (size == "n") return &n;
  return nullptr;
}

class DEIMv2Impl : public torch::nn::Cloneable<DEIMv2Impl> {
 public:
  explicit DEIMv2Impl(DEIMv2Options o = {}) : o_(std::move(o)) {
    if (!deimv2_size(o_.size)) throw ConfigError("DEIMv2 network size '" + o_.size + "': not available; allowed: atto, femto, pico, n");
    reset();
  }
  void reset() override {
    const DEIMv2SizeConfig& c = *deimv2_size(o_.size);
    const int64_t d = c.hidden;
    detr::HGNetv2Options bo;
    bo.name = c.backbone;
    bo.use_lab = true;
    bo.return_idx = c.lite ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3};
    bo.freeze_stem = false;  // freeze_at -1
    bo.freeze_norm = false;
    backbone = register_module("backbone", detr::HGNetv2(bo));
    std::shared_ptr<torch::nn::Module> enc;
    if (c.lite) {
      detr::LiteEncoderOptions lo;
      lo.in_channels = backbone->out_channels();
      lo.feat_strides = {16};
      lo.hidden_dim = d;
      lo.expansion = 0.34;
      lo.depth_mult = 0.5;
      lite_encoder = register_module("encoder", detr::LiteEncoder(lo));
      enc = lite_encoder.ptr();
    } else {
      detr::DFineEncoderOptions eo;
      eo.in_channels = backbone->out_channels();
      eo.feat_strides = {16, 32};
      eo.hidden_dim = d;
      eo.dim_feedforward = c.enc_ffn;
      eo.expansion = 0.34;
      eo.depth_mult = 0.5;
      eo.use_encoder_idx = {1};
      eo.fuse_sum = true;
      eo.csp2 = true;
      hybrid_encoder = register_module("encoder", detr::DFineEncoder(eo));
      enc = hybrid_encoder.ptr();
    }
    detr::DFineDecoderOptions dd;
    dd.num_classes = o_.num_classes;
    dd.hidden_dim = d;
    dd.num_queries = c.num_queries;
    dd.feat_channels = {d, d};
    dd.feat_strides = {16, 32};
    dd.num_levels = 2;
    dd.num_points = c.num_points;
    dd.num_layers = 3;
    dd.dim_feedforward = c.dec_ffn;
    dd.activation = detr::Act::silu;
    dd.mlp_act = detr::Act::silu;
    dd.eval_spatial_size = eval_size();
    dd.reg_max = 32;
    dd.reg_scale = 4.0;
    dd.use_gateway = !c.share_bbox_head_no_gateway;
    dd.share_bbox_head = c.share_bbox_head_no_gateway;
    dd.integer_reg_scale = !c.lite;  // n: SIZE_CONFIGS' reg_scale 4 (an int); atto..pico: the default 4.0
    decoder = register_module("decoder", detr::DFineDecoder(detr::deimv2_decoder_options(dd)));
    chain_ = std::make_shared<Chain>(backbone, enc);
  }

  int64_t eval_size() const { return o_.eval_spatial_size > 0 ? o_.eval_spatial_size : deimv2_size(o_.size)->input_size; }

  // The encoder boundary: encoder() owns the captured parameters and buffers (backbone + encoder).
  torch::nn::Module& encoder() { return *chain_; }
  std::vector<torch::Tensor> encode(const torch::Tensor& x) {
    auto f = backbone->forward(x);
    return lite_encoder ? lite_encoder->forward(f) : hybrid_encoder->forward(f);
  }
  detr::DFineNetOutput decode(const std::vector<torch::Tensor>& feats) { return detr::dfine_decode(decoder, feats, 16); }
  detr::DFineNetOutput forward(const torch::Tensor& x) {
    auto out = decode(encode(x));
    out.input_hw = {x.size(2), x.size(3)};
    return out;
  }

  const DEIMv2Options& options() const { return o_; }
  detr::HGNetv2 backbone{nullptr};
  detr::LiteEncoder lite_encoder{nullptr};      // atto..pico, registered as "encoder"
  detr::DFineEncoder hybrid_encoder{nullptr};   // n, registered as "encoder"
  detr::DFineDecoder decoder{nullptr};

 private:
  DEIMv2Options o_;
  // The captured chain (backbone + the lite or hybrid encoder, type-erased), owning no modules of its own.
  using Chain = detr::EncoderChainImpl<detr::HGNetv2, std::shared_ptr<torch::nn::Module>>;
  std::shared_ptr<Chain> chain_;
};
TORCH_MODULE(DEIMv2);

}  // namespace libreyolo::families::deimv2
