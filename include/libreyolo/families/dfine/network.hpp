#pragma once
// The D-FINE-line networks (D-FINE, DEIM and RT-DETRv4 share one: the original's LibreDFINEModel /
// LibreDEIMModel, models/dfine/nn.py): HGNetv2 backbone -> D-FINE hybrid encoder -> D-FINE decoder with
// Fine-grained Distribution Refinement (nn/detr/hgnetv2.hpp, dfine_encoder.hpp, dfine_decoder.hpp).
// Module names equal the original's state dict (backbone., encoder., decoder.).
//
// Sizes (the original's SIZE_CONFIGS): n = HGNetv2-B0 stages 2-3 (strides 16/32), hidden 128, FFN 512,
// expansion 0.34, depth 0.5, 3 decoder layers with 6/6 points; s = B0 stages 1-3 (strides 8/16/32),
// hidden 256, FFN 1024, expansion 0.5, depth 0.34, 3 layers with 3/6/3 points. reg_max 32, reg_scale 4,
// eval size 640 (the decoder's anchors are buffers for it).
// Variants: D-FINE (ReLU decoder heads, the backbone's stem frozen), DEIM (SiLU decoder FFN / LQE / MLP
// heads, nothing frozen), RT-DETRv4 (D-FINE built with activation "silu": SiLU as DEIM, stem frozen).
//
// The encoder boundary (capture/region.hpp): encode(x) = backbone + encoder, the chain a CUDA graph
// captures; decode(features) = the decoder. In training mode decode() returns the features with the
// decoder still to run, and the family's loss runs it with the batch's targets (DFineNetOutput::run:
// the denoising queries need them); in eval mode decode() runs the decoder at once.
#include <libreyolo/core/error.hpp>
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
  std::string size = "n";  // n | s
  int64_t num_classes = 80;
  Variant variant = Variant::dfine;
  int64_t eval_spatial_size = 640;
};

// The captured chain (backbone + encoder), owning no modules of its own: it registers the network's
// backbone and encoder again so that capture sees exactly their parameters and buffers.
struct DFineEncoderChainImpl : torch::nn::Module {
  DFineEncoderChainImpl(detr::HGNetv2 b, detr::DFineEncoder e) {
    backbone = register_module("backbone", std::move(b));
    encoder = register_module("encoder", std::move(e));
  }
  detr::HGNetv2 backbone{nullptr};
  detr::DFineEncoder encoder{nullptr};
};

class DFineImpl : public torch::nn::Cloneable<DFineImpl> {
 public:
  explicit DFineImpl(DFineOptions o = {}) : o_(std::move(o)) {
    if (o_.size != "n" && o_.size != "s") throw ConfigError("D-FINE network size '" + o_.size + "': not available; allowed: n, s");
    reset();
  }
  void reset() override {
    const bool n = o_.size == "n";
    const bool silu = o_.variant != Variant::dfine;
    detr::HGNetv2Options bo;
    bo.name = "B0";
    bo.use_lab = true;
    bo.return_idx = n ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{1, 2, 3};
    bo.freeze_stem = o_.variant != Variant::deim;
    backbone = register_module("backbone", detr::HGNetv2(bo));
    detr::DFineEncoderOptions eo;
    eo.in_channels = backbone->out_channels();
    eo.feat_strides = n ? std::vector<int64_t>{16, 32} : std::vector<int64_t>{8, 16, 32};
    eo.hidden_dim = n ? 128 : 256;
    eo.dim_feedforward = n ? 512 : 1024;
    eo.expansion = n ? 0.34 : 0.5;
    eo.depth_mult = n ? 0.5 : 0.34;
    eo.use_encoder_idx = {n ? 1 : 2};
    hybrid_encoder = register_module("encoder", detr::DFineEncoder(eo));
    detr::DFineDecoderOptions d;
    d.num_classes = o_.num_classes;
    d.hidden_dim = eo.hidden_dim;
    d.feat_channels = std::vector<int64_t>(eo.in_channels.size(), eo.hidden_dim);
    d.feat_strides = eo.feat_strides;
    d.num_levels = static_cast<int64_t>(eo.in_channels.size());
    d.num_points = n ? std::vector<int64_t>{6, 6} : std::vector<int64_t>{3, 6, 3};
    d.num_layers = 3;
    d.dim_feedforward = eo.dim_feedforward;
    d.activation = silu ? detr::Act::silu : detr::Act::relu;
    d.mlp_act = d.activation;
    d.eval_spatial_size = o_.eval_spatial_size;
    d.reg_scale = 4.0;
    decoder = register_module("decoder", detr::DFineDecoder(d));
    first_stride_ = eo.feat_strides.front();
    chain_ = std::make_shared<DFineEncoderChainImpl>(backbone, hybrid_encoder);
  }

  // The encoder boundary: encoder() owns the captured parameters and buffers (backbone + encoder).
  torch::nn::Module& encoder() { return *chain_; }
  std::vector<torch::Tensor> encode(const torch::Tensor& x) { return hybrid_encoder->forward(backbone->forward(x)); }
  detr::DFineNetOutput decode(const std::vector<torch::Tensor>& feats) {
    detr::DFineNetOutput out;
    out.features = feats;
    out.decoder = [d = decoder.ptr()](const std::vector<torch::Tensor>& f, const std::vector<detr::DetrTarget>* t) { return d->forward(f, t); };
    out.input_hw = {feats.front().size(2) * first_stride_, feats.front().size(3) * first_stride_};
    if (!is_training()) out.result = decoder->forward(feats, nullptr);
    return out;
  }
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
  std::shared_ptr<DFineEncoderChainImpl> chain_;
};
TORCH_MODULE(DFine);

}  // namespace libreyolo::families::dfine
