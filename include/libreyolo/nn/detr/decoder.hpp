#pragma once
// The RT-DETR decoder head (the original's RTDETRTransformer, models/rtdetr/nn.py, and its v2
// RTDETRTransformerv2): input projections of the encoder maps, anchors per cell, query selection (the
// top-num_queries encoder tokens by their best class score), contrastive denoising queries (training),
// and num_layers decoder layers (self-attention, multi-scale deformable cross-attention, FFN) with
// iterative box refinement. DetrDecoderOptions::v2 switches to the v2 differences (state-dict names
// enc_output.proj/norm, the num_points_scale buffer, no clamp before norm3, anchors stored as buffers
// for the fixed eval size, xavier-initialised FFN and input projections). The input projections, the
// query selection and the denoising queries are the core it shares with D-FINE's decoder
// (nn/detr/decoder_core.hpp).
#include <libreyolo/nn/detr/anchors.hpp>
#include <libreyolo/nn/detr/decoder_core.hpp>
#include <libreyolo/nn/detr/deformable_attention.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

namespace libreyolo::nn::detr {

// What the decoder returns. Eval: the last layer only. Training: every layer (aux), the encoder's
// top-k proposals, and the denoising part split off.
struct DetrOutput {
  torch::Tensor pred_logits;  // [B, Q, C]
  torch::Tensor pred_boxes;   // [B, Q, 4] cx, cy, w, h in [0, 1]
  std::vector<std::pair<torch::Tensor, torch::Tensor>> aux;     // decoder layers 0 .. L-2 (logits, boxes)
  std::vector<std::pair<torch::Tensor, torch::Tensor>> enc_aux; // the selected encoder proposals
  std::vector<std::pair<torch::Tensor, torch::Tensor>> dn_aux;  // every layer's denoising part
  std::optional<DenoisingMeta> dn_meta;
};

struct DetrDecoderOptions {
  int64_t num_classes = 80;
  int64_t hidden_dim = 256;
  int64_t num_queries = 300;
  std::vector<int64_t> feat_channels{256, 256, 256};
  std::vector<int64_t> feat_strides{8, 16, 32};
  int64_t num_levels = 3;
  int64_t num_points = 4;
  int64_t nhead = 8;
  int64_t num_layers = 3;
  int64_t dim_feedforward = 1024;
  int64_t num_denoising = 100;
  double label_noise_ratio = 0.5;
  double box_noise_scale = 1.0;
  bool abs_noised_boxes = false;  // RT-DETR's denoising keeps crossed negative boxes (the D-FINE line's does not)
  int64_t eval_idx = -1;
  double eps = 1e-2;
  int64_t eval_spatial_size = 0;  // > 0: anchors for this square size kept (v2 registers them as buffers)
  bool v2 = false;
  bool discrete = false;          // v2 cross_attn_method='discrete'
};

class DetrDecoderLayerImpl : public DecoderLayerCore<DetrDecoderLayerImpl, DetrDecoderOptions> {
 public:
  explicit DetrDecoderLayerImpl(const DetrDecoderOptions& o) : DecoderLayerCore(o) { reset(); }
  void reset() override {
    register_self_attention();
    MSDeformableAttentionOptions mo;
    mo.embed_dim = o_.hidden_dim, mo.num_heads = o_.nhead, mo.num_levels = o_.num_levels, mo.num_points = o_.num_points;
    mo.points_scale_buffer = o_.v2;
    mo.discrete = o_.discrete;
    cross_attn = register_module("cross_attn", MSDeformableAttention(mo));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o_.hidden_dim})));
    register_ffn(/*xavier=*/o_.v2);
  }
  torch::Tensor forward(torch::Tensor tgt, const torch::Tensor& ref, const torch::Tensor& memory, const SpatialShapes& shapes,
                        const std::optional<torch::Tensor>& attn_mask, const torch::Tensor& pos) {
    tgt = self_attention(tgt, pos, attn_mask);
    tgt = norm2->forward(tgt + cross_attn->forward(tgt + pos, ref, memory, shapes));
    return ffn(tgt, Act::relu, /*clamp=*/!o_.v2);
  }
  MSDeformableAttention cross_attn{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
};
TORCH_MODULE(DetrDecoderLayer);

// The layer stack (`decoder.decoder.layers.N` in the state dict).
class DetrDecoderStackImpl : public torch::nn::Cloneable<DetrDecoderStackImpl> {
 public:
  explicit DetrDecoderStackImpl(const DetrDecoderOptions& o) : o_(o) { reset(); }
  void reset() override {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) layers->push_back(DetrDecoderLayer(o_));
    start_as_copies(layers);  // deep copies of one layer (rtdetr/nn.py:615, rtdetrv2/decoder.py:265)
  }
  DetrDecoderLayerImpl& layer(int64_t i) { return *layers[i]->as<DetrDecoderLayerImpl>(); }
  torch::nn::ModuleList layers{nullptr};

 private:
  DetrDecoderOptions o_;
};
TORCH_MODULE(DetrDecoderStack);

class DetrDecoderImpl : public DetrDecoderCore<DetrDecoderImpl, DetrDecoderOptions> {
 public:
  explicit DetrDecoderImpl(DetrDecoderOptions o = {}) : DetrDecoderCore(std::move(o)) { reset(); }

  void reset() override {
    const int64_t d = o_.hidden_dim;
    register_input_proj(/*identity_at_hidden=*/false);
    decoder = register_module("decoder", DetrDecoderStack(o_));
    register_selection_heads(Act::relu, /*named_enc_output=*/o_.v2);
    dec_score_head = register_module("dec_score_head", torch::nn::ModuleList());
    dec_bbox_head = register_module("dec_bbox_head", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      dec_score_head->push_back(torch::nn::Linear(d, o_.num_classes));
      dec_bbox_head->push_back(MLP(d, d, 4, 3));
    }
    if (o_.v2 && o_.eval_spatial_size > 0) register_eval_anchors();
    reset_parameters();
  }

  // The same for per-image targets (padded here).
  DetrOutput forward(const std::vector<torch::Tensor>& feats, const std::vector<DetrTarget>* targets) {
    if (!targets) return forward(feats);
    const auto t = pad_targets(*targets, feats.front().device());
    return forward(feats, &t);
  }
  // feats: the encoder's maps; targets: the batch's ground truth in [B, M] slots (training: denoising
  // queries); fixed: the denoising part at its fixed capacity for M (select_queries).
  DetrOutput forward(const std::vector<torch::Tensor>& feats, const PaddedTargets* targets = nullptr, bool fixed = false) {
    // Query selection: boxes by enc_bbox_head over every token, then gathered.
    const auto sel = select_queries(feats, targets, fixed);
    auto enc_coord_unact = enc_bbox_head->forward(sel.output_memory) + sel.anchors;
    auto ref_unact = sel.gather(enc_coord_unact);
    auto enc_topk_bboxes = torch::sigmoid(ref_unact);
    auto enc_topk_logits = sel.gather(sel.enc_logits);
    auto target = sel.gather(sel.output_memory).detach();
    ref_unact = ref_unact.detach();
    const auto attn_mask = prepend_denoising(sel, ref_unact, target);
    const auto& memory = sel.memory;

    // Decoder layers with iterative refinement.
    const bool training = is_training();
    const int64_t eval_idx = eval_index();
    std::vector<torch::Tensor> out_boxes, out_logits;
    auto ref_detach = torch::sigmoid(ref_unact);
    if (!o_.v2) ref_detach = ref_detach.to(target.scalar_type());
    torch::Tensor ref_points = ref_detach;
    auto output = target;
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      auto pos = query_pos_head->forward(ref_detach);
      output = decoder->layer(i).forward(output, ref_detach.unsqueeze(2), memory, sel.shapes, attn_mask, pos);
      auto delta = bbox_head(i)->forward(output);
      // Training, after layer 0: ref_detach is ref_points detached, so one inverse sigmoid serves both
      // boxes (the same values; only the returned one lets gradients reach the previous layer).
      const bool shared = training && i > 0;
      auto inv_ref = shared ? inverse_sigmoid(ref_points) : inverse_sigmoid(ref_detach);
      auto inter = torch::sigmoid(delta + (shared ? inv_ref.detach() : inv_ref));
      if (training) {
        out_logits.push_back(linear(*score_head(i), output));
        out_boxes.push_back(i == 0 ? inter : torch::sigmoid(delta + inv_ref));
      } else if (i == eval_idx) {
        out_logits.push_back(linear(*score_head(i), output));
        out_boxes.push_back(inter);
        break;
      }
      ref_points = inter;
      ref_detach = training || o_.v2 ? inter.detach() : inter;
    }

    DetrOutput out;
    const int64_t ndn = sel.dn ? sel.dn->meta.num_denoising : 0;
    auto split = [&](const torch::Tensor& t, bool dn_part) { return dn_part ? t.narrow(1, 0, ndn) : t.narrow(1, ndn, t.size(1) - ndn); };
    out.pred_logits = split(out_logits.back(), false);
    out.pred_boxes = split(out_boxes.back(), false);
    if (training) {
      for (size_t i = 0; i + 1 < out_logits.size(); ++i) out.aux.emplace_back(split(out_logits[i], false), split(out_boxes[i], false));
      out.enc_aux.emplace_back(enc_topk_logits, enc_topk_bboxes);
      if (sel.dn) {
        for (size_t i = 0; i < out_logits.size(); ++i) out.dn_aux.emplace_back(split(out_logits[i], true), split(out_boxes[i], true));
        out.dn_meta = sel.dn->meta;
      }
    }
    return out;
  }

  DetrDecoderStack decoder{nullptr};

 private:
  // The core's initialisation (nn/detr/decoder_core.hpp), then v2's xavier on every input projection's conv.
  void reset_parameters() {
    init_selection_heads();
    torch::NoGradGuard ng;
    if (o_.v2)
      for (const auto& m : *input_proj)
        torch::nn::init::xavier_uniform_(m->as<torch::nn::Sequential>()->ptr(0)->as<torch::nn::Conv2dImpl>()->weight);
  }
};
TORCH_MODULE(DetrDecoder);

}  // namespace libreyolo::nn::detr
