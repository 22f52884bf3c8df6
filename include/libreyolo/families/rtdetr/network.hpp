#pragma once
// RT-DETR (v1 and v2) networks: PResNet-18/34/50/101-vd backbone -> hybrid encoder -> DETR decoder
// (nn/detr/). Module names equal the original's state dict (backbone., encoder., decoder.). The sizes
// are the original's RTDETR_CONFIGS (models/rtdetr/model.py) for its PResNet variants (sizes below).
//
// The encoder boundary (capture/region.hpp): encode(x) = backbone + hybrid encoder, the chain a CUDA
// graph captures; decode(features) = the decoder. The decoder's training forward needs the batch's
// ground truth (contrastive denoising), which the network's forward does not see: in training mode
// decode() returns the features with the decoder still to run, and the family's loss runs it with the
// batch's targets (RTDETROutput::run). In eval mode decode() runs the decoder at once.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/decoder.hpp>
#include <libreyolo/nn/detr/hybrid_encoder.hpp>
#include <libreyolo/nn/detr/presnet.hpp>

#include <torch/torch.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::families::rtdetr {

namespace detr = libreyolo::nn::detr;

// One size of the original's RTDETR_CONFIGS (every size: decoder hidden_dim 256, dim_feedforward 1024;
// the backbone's stem frozen, freeze_at 0; the decoder's input projections take the encoder's
// hidden_dim channels). Its backbone_pretrained (an ImageNet download) is not followed: the networks
// are built from scratch. r50m is PResNet-50 with the encoder at expansion 0.5 and the decoder's eval
// output taken from its third of six layers (eval_idx 2); r101 is PResNet-101 with a 384-wide encoder
// (feed-forward 2048) feeding the 256-wide decoder.
struct RTDETRSize {
  std::string_view name;
  int depth;                   // PResNet depth: 18/34 BasicBlocks, 50/101 BottleNecks (x4 channels)
  bool freeze_norm;            // the backbone's norms as FrozenBatchNorm2d (buffers only)
  int64_t encoder_hidden_dim;  // the hybrid encoder's width (= the decoder's input channels)
  int64_t encoder_dim_feedforward;
  double encoder_expansion;    // the CSPRepLayers' hidden width / their output width
  int64_t num_decoder_layers;
  int64_t eval_idx;            // the decoder layer whose output is the eval output (-1: the last)
};
inline constexpr std::array<RTDETRSize, 5> kRTDETRSizes{{
    {"r18", 18, false, 256, 1024, 0.5, 3, -1},
    {"r34", 34, false, 256, 1024, 0.5, 4, -1},
    {"r50", 50, true, 256, 1024, 1.0, 6, -1},
    {"r50m", 50, true, 256, 1024, 0.5, 6, 2},
    {"r101", 101, true, 384, 2048, 1.0, 6, -1},
}};
inline const RTDETRSize* find_rtdetr_size(std::string_view size) {
  for (const auto& s : kRTDETRSizes)
    if (s.name == size) return &s;
  return nullptr;
}

struct RTDETROptions {
  std::string size = "r18";       // r18 | r34 | r50 | r50m | r101 (kRTDETRSizes)
  int64_t num_classes = 80;
  bool v2 = false;                // RT-DETRv2's decoder
  int64_t eval_spatial_size = 0;  // v2: 640 (anchors kept as buffers)
};

// The network's output: eval = the decoder's result; training = the encoder's maps and the decoder to
// run on them with the batch's targets.
struct RTDETROutput {
  std::vector<torch::Tensor> features;
  std::shared_ptr<detr::DetrDecoderImpl> decoder;
  std::array<int64_t, 2> input_hw{0, 0};            // the network input's height and width (box scale)
  mutable std::optional<detr::DetrOutput> result;

  bool pending() const { return !result.has_value(); }
  // The decoder's output; runs it (with denoising queries from `targets` when given, training) once.
  // fixed: the denoising part at its fixed capacity for the targets' M slots (a recorded step's form).
  const detr::DetrOutput& run(const detr::PaddedTargets* targets = nullptr, bool fixed = false) const {
    if (!result) result = decoder->forward(features, targets, fixed);
    return *result;
  }
  // The same for per-image targets (padded on the features' device).
  const detr::DetrOutput& run(const std::vector<detr::DetrTarget>* targets) const {
    if (result || !targets) return run();
    const auto t = detr::pad_targets(*targets, features.front().device());
    return run(&t);
  }
};

// The captured chain (backbone + encoder), owning no modules of its own: it registers the network's
// backbone and encoder again so that capture sees exactly their parameters and buffers.
struct RTDETREncoderChainImpl : torch::nn::Module {
  RTDETREncoderChainImpl(detr::PResNet b, detr::HybridEncoder e) {
    backbone = register_module("backbone", std::move(b));
    encoder = register_module("encoder", std::move(e));
  }
  detr::PResNet backbone{nullptr};
  detr::HybridEncoder encoder{nullptr};
};

class RTDETRImpl : public torch::nn::Cloneable<RTDETRImpl> {
 public:
  explicit RTDETRImpl(RTDETROptions o = {}) : o_(std::move(o)) {
    if (!find_rtdetr_size(o_.size))
      throw ConfigError("RT-DETR size '" + o_.size + "': not available; allowed: r18, r34, r50, r50m, r101");
    reset();
  }
  void reset() override {
    const RTDETRSize& sz = *find_rtdetr_size(o_.size);
    detr::PResNetOptions bo;
    bo.depth = sz.depth;
    bo.freeze_norm = sz.freeze_norm;
    backbone = register_module("backbone", detr::PResNet(bo));
    detr::HybridEncoderOptions eo;
    eo.in_channels = backbone->out_channels();
    eo.hidden_dim = sz.encoder_hidden_dim;
    eo.dim_feedforward = sz.encoder_dim_feedforward;
    eo.expansion = sz.encoder_expansion;
    hybrid_encoder = register_module("encoder", detr::HybridEncoder(eo));
    detr::DetrDecoderOptions dopt;
    dopt.num_classes = o_.num_classes;
    dopt.feat_channels = std::vector<int64_t>(3, sz.encoder_hidden_dim);
    dopt.num_layers = sz.num_decoder_layers;
    dopt.eval_idx = sz.eval_idx;
    dopt.v2 = o_.v2;
    dopt.eval_spatial_size = o_.eval_spatial_size;
    decoder = register_module("decoder", detr::DetrDecoder(dopt));
    chain_ = std::make_shared<RTDETREncoderChainImpl>(backbone, hybrid_encoder);
  }

  // The encoder boundary: encoder() owns the captured parameters and buffers (backbone + encoder).
  torch::nn::Module& encoder() { return *chain_; }
  std::vector<torch::Tensor> encode(const torch::Tensor& x) { return hybrid_encoder->forward(backbone->forward(x)); }
  RTDETROutput decode(const std::vector<torch::Tensor>& feats) {
    RTDETROutput out;
    out.features = feats;
    out.decoder = decoder.ptr();
    out.input_hw = {feats.front().size(2) * 8, feats.front().size(3) * 8};  // the first map is stride 8
    if (!is_training()) out.result = decoder->forward(feats);
    return out;
  }
  RTDETROutput forward(const torch::Tensor& x) {
    auto out = decode(encode(x));
    out.input_hw = {x.size(2), x.size(3)};
    return out;
  }

  const RTDETROptions& options() const { return o_; }
  detr::PResNet backbone{nullptr};
  detr::HybridEncoder hybrid_encoder{nullptr};  // registered as "encoder"
  detr::DetrDecoder decoder{nullptr};

 private:
  RTDETROptions o_;
  std::shared_ptr<RTDETREncoderChainImpl> chain_;
};
TORCH_MODULE(RTDETR);

}  // namespace libreyolo::families::rtdetr
