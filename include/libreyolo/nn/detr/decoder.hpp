#pragma once
// The RT-DETR decoder head (the original's RTDETRTransformer, models/rtdetr/nn.py, and its v2
// RTDETRTransformerv2): input projections of the encoder maps, anchors per cell, query selection (the
// top-num_queries encoder tokens by their best class score), contrastive denoising queries (training),
// and num_layers decoder layers (self-attention, multi-scale deformable cross-attention, FFN) with
// iterative box refinement. DetrDecoderOptions::v2 switches to the v2 differences (state-dict names
// enc_output.proj/norm, the num_points_scale buffer, no clamp before norm3, anchors stored as buffers
// for the fixed eval size, xavier-initialised FFN and input projections).
#include <libreyolo/nn/detr/anchors.hpp>
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
  int64_t eval_idx = -1;
  double eps = 1e-2;
  int64_t eval_spatial_size = 0;  // > 0: anchors for this square size kept (v2 registers them as buffers)
  bool v2 = false;
  bool discrete = false;          // v2 cross_attn_method='discrete'
};

class DetrDecoderLayerImpl : public torch::nn::Cloneable<DetrDecoderLayerImpl> {
 public:
  explicit DetrDecoderLayerImpl(const DetrDecoderOptions& o) : o_(o) { reset(); }
  void reset() override {
    const int64_t d = o_.hidden_dim;
    self_attn = register_module("self_attn", MultiheadAttention(d, o_.nhead));
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    MSDeformableAttentionOptions mo;
    mo.embed_dim = d, mo.num_heads = o_.nhead, mo.num_levels = o_.num_levels, mo.num_points = o_.num_points;
    mo.points_scale_buffer = o_.v2;
    mo.discrete = o_.discrete;
    cross_attn = register_module("cross_attn", MSDeformableAttention(mo));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    linear1 = register_module("linear1", torch::nn::Linear(d, o_.dim_feedforward));
    linear2 = register_module("linear2", torch::nn::Linear(o_.dim_feedforward, d));
    norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    if (o_.v2) {
      torch::NoGradGuard ng;
      torch::nn::init::xavier_uniform_(linear1->weight);
      torch::nn::init::xavier_uniform_(linear2->weight);
    }
  }
  torch::Tensor forward(torch::Tensor tgt, const torch::Tensor& ref, const torch::Tensor& memory, const SpatialShapes& shapes,
                        const std::optional<torch::Tensor>& attn_mask, const torch::Tensor& pos) {
    auto q = tgt + pos;
    tgt = norm1->forward(tgt + self_attn->forward(q, q, tgt, attn_mask));
    tgt = norm2->forward(tgt + cross_attn->forward(tgt + pos, ref, memory, shapes));
    auto y = tgt + linear(linear2, torch::relu(linear(linear1, tgt)));
    return norm3->forward(o_.v2 ? y : y.clamp(-65504, 65504));
  }
  MultiheadAttention self_attn{nullptr};
  MSDeformableAttention cross_attn{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};

 private:
  DetrDecoderOptions o_;
};
TORCH_MODULE(DetrDecoderLayer);

// The layer stack (`decoder.decoder.layers.N` in the state dict).
class DetrDecoderStackImpl : public torch::nn::Cloneable<DetrDecoderStackImpl> {
 public:
  explicit DetrDecoderStackImpl(const DetrDecoderOptions& o) : o_(o) { reset(); }
  void reset() override {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) layers->push_back(DetrDecoderLayer(o_));
  }
  DetrDecoderLayerImpl& layer(int64_t i) { return *layers[i]->as<DetrDecoderLayerImpl>(); }
  torch::nn::ModuleList layers{nullptr};

 private:
  DetrDecoderOptions o_;
};
TORCH_MODULE(DetrDecoderStack);

class DetrDecoderImpl : public torch::nn::Cloneable<DetrDecoderImpl> {
 public:
  explicit DetrDecoderImpl(DetrDecoderOptions o = {}) : o_(std::move(o)) { reset(); }

  void reset() override {
    const int64_t d = o_.hidden_dim;
    input_proj = register_module("input_proj", torch::nn::ModuleList());
    for (auto c : o_.feat_channels) input_proj->push_back(proj_layer(c, 1, 1, 0));
    int64_t in = o_.feat_channels.back();
    for (int64_t i = static_cast<int64_t>(o_.feat_channels.size()); i < o_.num_levels; ++i) {
      input_proj->push_back(proj_layer(in, 3, 2, 1));
      in = d;
    }
    decoder = register_module("decoder", DetrDecoderStack(o_));
    if (o_.num_denoising > 0)
      denoising_class_embed = register_module(
          "denoising_class_embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(o_.num_classes + 1, d).padding_idx(o_.num_classes)));
    query_pos_head = register_module("query_pos_head", MLP(4, 2 * d, d, 2));
    enc_output = register_module("enc_output", torch::nn::Sequential());
    if (o_.v2) {
      enc_output->push_back("proj", torch::nn::Linear(d, d));
      enc_output->push_back("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    } else {
      enc_output->push_back(torch::nn::Linear(d, d));
      enc_output->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    }
    enc_score_head = register_module("enc_score_head", torch::nn::Linear(d, o_.num_classes));
    enc_bbox_head = register_module("enc_bbox_head", MLP(d, d, 4, 3));
    dec_score_head = register_module("dec_score_head", torch::nn::ModuleList());
    dec_bbox_head = register_module("dec_bbox_head", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      dec_score_head->push_back(torch::nn::Linear(d, o_.num_classes));
      dec_bbox_head->push_back(MLP(d, d, 4, 3));
    }
    if (o_.v2 && o_.eval_spatial_size > 0) {
      auto [a, m] = make_anchors(eval_shapes(), torch::kCPU);
      // The stored copy holds a large finite value where the original holds +inf (invalid cells): a
      // checkpoint may not hold non-finite values (train/checkpoint.hpp rejects them as divergence), and
      // sigmoid(1e4 + x) is exactly 1 as sigmoid(inf) is, in float32 and float16 alike.
      a = torch::where(m, a, torch::full_like(a, kInvalidAnchor));
      anchors = register_buffer("anchors", a);
      valid_mask = register_buffer("valid_mask", m);
    }
    reset_parameters();
  }

  // feats: the encoder's maps; targets: the batch's ground truth (training: denoising queries).
  DetrOutput forward(const std::vector<torch::Tensor>& feats, const std::vector<DetrTarget>* targets = nullptr) {
    SpatialShapes shapes;
    auto memory = encoder_input(feats, shapes);
    std::optional<DenoisingGroup> dn;
    if (is_training() && o_.num_denoising > 0 && targets != nullptr)
      dn = contrastive_denoising_group(*targets, o_.num_classes, o_.num_queries, denoising_class_embed, o_.num_denoising,
                                       o_.label_noise_ratio, o_.box_noise_scale);

    // Query selection.
    auto [anc, valid] = anchors_for(shapes, memory.device());
    anc = anc.to(memory.scalar_type());
    // The selection reads the memory with invalid (border) cells zeroed; the decoder layers read it whole.
    auto output_memory = enc_output->forward(valid.to(memory.scalar_type()) * memory);
    auto enc_class = enc_score_head->forward(output_memory);
    auto enc_coord_unact = enc_bbox_head->forward(output_memory) + anc;
    const int64_t k = std::min<int64_t>(o_.num_queries, memory.size(1));  // the original needs >= num_queries tokens
    auto topk_ind = forced_topk_indices.defined() ? forced_selection(forced_topk_indices, memory, k)
                                                  : std::get<1>(std::get<0>(enc_class.max(-1)).topk(k, 1));
    auto gather = [&](const torch::Tensor& t) { return t.gather(1, topk_ind.unsqueeze(-1).expand({-1, -1, t.size(-1)})); };
    auto ref_unact = gather(enc_coord_unact);
    auto enc_topk_bboxes = torch::sigmoid(ref_unact);
    auto enc_topk_logits = gather(enc_class);
    auto target = gather(output_memory).detach();
    ref_unact = ref_unact.detach();
    std::optional<torch::Tensor> attn_mask;
    if (dn) {
      // Type promotion as torch.concat (under AMP the float32 denoising boxes keep their precision).
      const auto bt = torch::promote_types(dn->query_bbox.scalar_type(), ref_unact.scalar_type());
      const auto ct = torch::promote_types(dn->query_class.scalar_type(), target.scalar_type());
      ref_unact = torch::cat({dn->query_bbox.to(bt), ref_unact.to(bt)}, 1);
      target = torch::cat({dn->query_class.to(ct), target.to(ct)}, 1);
      attn_mask = dn->attn_mask;
      if (k != o_.num_queries)  // fewer tokens than queries: the mask's matching part shrinks with them
        attn_mask = denoising_attn_mask(dn->meta.max_gt, dn->meta.num_group, k, memory.device());
    }

    // Decoder layers with iterative refinement.
    const bool training = is_training();
    const int64_t eval_idx = o_.eval_idx >= 0 ? o_.eval_idx : o_.num_layers + o_.eval_idx;
    std::vector<torch::Tensor> out_boxes, out_logits;
    auto ref_detach = torch::sigmoid(ref_unact);
    if (!o_.v2) ref_detach = ref_detach.to(target.scalar_type());
    torch::Tensor ref_points = ref_detach;
    auto output = target;
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      auto pos = query_pos_head->forward(ref_detach);
      output = decoder->layer(i).forward(output, ref_detach.unsqueeze(2), memory, shapes, attn_mask, pos);
      auto delta = dec_bbox_head[i]->as<MLPImpl>()->forward(output);
      // Training, after layer 0: ref_detach is ref_points detached, so one inverse sigmoid serves both
      // boxes (the same values; only the returned one lets gradients reach the previous layer).
      const bool shared = training && i > 0;
      auto inv_ref = shared ? inverse_sigmoid(ref_points) : inverse_sigmoid(ref_detach);
      auto inter = torch::sigmoid(delta + (shared ? inv_ref.detach() : inv_ref));
      if (training) {
        out_logits.push_back(linear(*dec_score_head[i]->as<torch::nn::LinearImpl>(), output));
        out_boxes.push_back(i == 0 ? inter : torch::sigmoid(delta + inv_ref));
      } else if (i == eval_idx) {
        out_logits.push_back(linear(*dec_score_head[i]->as<torch::nn::LinearImpl>(), output));
        out_boxes.push_back(inter);
        break;
      }
      ref_points = inter;
      ref_detach = training || o_.v2 ? inter.detach() : inter;
    }

    DetrOutput out;
    const int64_t ndn = dn ? dn->meta.num_denoising : 0;
    auto split = [&](const torch::Tensor& t, bool dn_part) { return dn_part ? t.narrow(1, 0, ndn) : t.narrow(1, ndn, t.size(1) - ndn); };
    out.pred_logits = split(out_logits.back(), false);
    out.pred_boxes = split(out_boxes.back(), false);
    if (training) {
      for (size_t i = 0; i + 1 < out_logits.size(); ++i) out.aux.emplace_back(split(out_logits[i], false), split(out_boxes[i], false));
      out.enc_aux.emplace_back(enc_topk_logits, enc_topk_bboxes);
      if (dn) {
        for (size_t i = 0; i < out_logits.size(); ++i) out.dn_aux.emplace_back(split(out_logits[i], true), split(out_boxes[i], true));
        out.dn_meta = dn->meta;
      }
    }
    return out;
  }

  const DetrDecoderOptions& options() const { return o_; }

  // Test hook, not a setting: when defined (int64 [B, k], token indices into the flattened encoder
  // memory, best first), the query selection takes these instead of its top-k, so a fixture test can
  // replay the original's selection among near-tied scores (tests/detr_topk/README.md). Undefined, the
  // default: no effect. Not a parameter or buffer (never saved).
  torch::Tensor forced_topk_indices;

  torch::nn::ModuleList input_proj{nullptr}, dec_score_head{nullptr}, dec_bbox_head{nullptr};
  DetrDecoderStack decoder{nullptr};
  torch::nn::Embedding denoising_class_embed{nullptr};
  MLP query_pos_head{nullptr}, enc_bbox_head{nullptr};
  torch::nn::Sequential enc_output{nullptr};
  torch::nn::Linear enc_score_head{nullptr};
  torch::Tensor anchors, valid_mask;  // v2 with a fixed eval size: buffers

 private:
  torch::nn::Sequential proj_layer(int64_t in, int64_t k, int64_t s, int64_t p) {
    torch::nn::Sequential seq;
    seq->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, o_.hidden_dim, k).stride(s).padding(p).bias(false)));
    seq->push_back("norm", BatchNorm2d(o_.hidden_dim));
    return seq;
  }

  void reset_parameters() {
    torch::NoGradGuard ng;
    const double bias = bias_init_with_prob(0.01);
    enc_score_head->bias.fill_(bias);
    torch::nn::init::zeros_(enc_bbox_head->layer(2)->weight);
    torch::nn::init::zeros_(enc_bbox_head->layer(2)->bias);
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      dec_score_head[i]->as<torch::nn::LinearImpl>()->bias.fill_(bias);
      auto reg = dec_bbox_head[i]->as<MLPImpl>();
      torch::nn::init::zeros_(reg->layer(2)->weight);
      torch::nn::init::zeros_(reg->layer(2)->bias);
    }
    torch::nn::init::xavier_uniform_(enc_output[0]->as<torch::nn::LinearImpl>()->weight);
    torch::nn::init::xavier_uniform_(query_pos_head->layer(0)->weight);
    torch::nn::init::xavier_uniform_(query_pos_head->layer(1)->weight);
    if (denoising_class_embed) {  // N(0, 1), the padding row zero (nn.Embedding's init)
      torch::nn::init::normal_(denoising_class_embed->weight);
      denoising_class_embed->weight[o_.num_classes].zero_();
    }
    if (o_.v2)
      for (const auto& m : *input_proj)
        torch::nn::init::xavier_uniform_(m->as<torch::nn::Sequential>()->ptr(0)->as<torch::nn::Conv2dImpl>()->weight);
  }

  torch::Tensor encoder_input(const std::vector<torch::Tensor>& feats, SpatialShapes& shapes) {
    std::vector<torch::Tensor> proj;
    const auto nf = static_cast<int64_t>(feats.size());
    for (int64_t i = 0; i < nf; ++i) proj.push_back(input_proj[i]->as<torch::nn::Sequential>()->forward(feats[i]));
    for (int64_t i = nf; i < o_.num_levels; ++i)
      proj.push_back(input_proj[i]->as<torch::nn::Sequential>()->forward(i == nf ? feats.back() : proj.back()));
    return flatten_levels(proj, shapes);
  }

  SpatialShapes eval_shapes() const { return square_level_shapes(o_.feat_strides, o_.num_levels, o_.eval_spatial_size); }
  std::pair<torch::Tensor, torch::Tensor> make_anchors(const SpatialShapes& shapes, torch::Device dev) const {
    return query_anchors(shapes, o_.eps, dev);
  }
  std::pair<torch::Tensor, torch::Tensor> anchors_for(const SpatialShapes& shapes, torch::Device dev) {
    if (!is_training() && anchors.defined() && shapes == eval_shapes()) return {anchors.to(dev), valid_mask.to(dev)};
    return anchor_cache_.get(shapes, o_.eps, dev);
  }

  static constexpr float kInvalidAnchor = 1e4f;
  DetrDecoderOptions o_;
  AnchorCache anchor_cache_;
};
TORCH_MODULE(DetrDecoder);

}  // namespace libreyolo::nn::detr
