#pragma once
// The core the DETR decoders share: RT-DETR's DetrDecoder (nn/detr/decoder.hpp) and the D-FINE line's
// DFineDecoder (nn/detr/dfine_decoder.hpp), which adds its refinements (FDR boxes, LQE, the gated
// decoder layer, pre_bbox_head) on top. DecoderLayerCore: the layers' self-attention and FFN.
// DetrDecoderCore holds the input projections of the encoder maps, the
// query-selection heads (enc_output, enc_score_head, enc_bbox_head, query_pos_head), the denoising class
// embedding and the per-layer heads, and does what both do with them: their registration and
// initialisation, anchors per cell (buffers for a fixed eval size), the query selection (the
// top-num_queries encoder tokens by their best class score, or the test hook's) and the contrastive
// denoising queries (training) put in front of the selected ones.
//
// Derived (CRTP: the decoder's module type, for Cloneable) registers its modules with the helpers here in
// its own order: the registration order is the state dict's and the random initialisation's.
// Options holds at least the fields read here (both decoders' options do).
#include <libreyolo/nn/detr/anchors.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// What both decoder layers share: their options (hidden_dim, nhead, dim_feedforward, ...), post-norm
// self-attention (self_attn, norm1) and the FFN (linear1, linear2, norm3). Derived (CRTP, for Cloneable)
// registers its cross-attention block between the two, in the originals' order.
template <class Derived, class Options>
class DecoderLayerCore : public torch::nn::Cloneable<Derived> {
 public:
  explicit DecoderLayerCore(Options o) : o_(std::move(o)) {}
  MultiheadAttention self_attn{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm3{nullptr};
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};

 protected:
  void register_self_attention() {
    self_attn = this->register_module("self_attn", MultiheadAttention(o_.hidden_dim, o_.nhead));
    norm1 = this->register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o_.hidden_dim})));
  }
  // linear1, linear2, norm3 (registered as `norm_name`: EC's layer calls it norm2); xavier: xavier-uniform
  // linear1's and linear2's weights (v2, D-FINE).
  void register_ffn(bool xavier, const char* norm_name = "norm3") {
    const int64_t d = o_.hidden_dim, dim_feedforward = o_.dim_feedforward;
    linear1 = this->register_module("linear1", torch::nn::Linear(d, dim_feedforward));
    linear2 = this->register_module("linear2", torch::nn::Linear(dim_feedforward, d));
    norm3 = this->register_module(norm_name, torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    if (xavier) {
      torch::NoGradGuard ng;
      torch::nn::init::xavier_uniform_(linear1->weight);
      torch::nn::init::xavier_uniform_(linear2->weight);
    }
  }
  // norm1(tgt + self_attn(tgt + pos, tgt + pos, tgt)).
  torch::Tensor self_attention(const torch::Tensor& tgt, const torch::Tensor& pos, const std::optional<torch::Tensor>& attn_mask) {
    auto q = tgt + pos;
    return norm1->forward(tgt + self_attn->forward(q, q, tgt, attn_mask));
  }
  // norm3(tgt + linear2(act(linear1(tgt)))), the sum clamped to +-65504 first where clamp.
  torch::Tensor ffn(const torch::Tensor& tgt, Act act, bool clamp) {
    auto y = tgt + linear(linear2, activate(linear(linear1, tgt), act));
    return norm3->forward(clamp ? y.clamp(-65504, 65504) : y);
  }
  Options o_;
};

// What the stored eval anchors hold where the original's hold +inf (register_eval_anchors says why).
inline constexpr float kInvalidAnchor = 1e4f;

template <class Derived, class Options>
class DetrDecoderCore : public torch::nn::Cloneable<Derived> {
 public:
  // The denoising part's fixed token count for every batch (0: 2 * G * groups, the original's size): a
  // fixed-shape step pads the part to denoising_capacity(M, num_denoising) for its target slots M; the
  // padding tokens see only the matching queries, are seen by none and carry no loss (denoising.hpp).
  void set_denoising_capacity(int64_t tokens) { denoising_capacity_ = tokens; }

  explicit DetrDecoderCore(Options o) : o_(std::move(o)) {}

  const Options& options() const { return o_; }
  int64_t eval_index() const { return o_.eval_idx >= 0 ? o_.eval_idx : o_.num_layers + o_.eval_idx; }

  // Test hook, not a setting: when defined (int64 [B, k], token indices into the flattened encoder
  // memory, best first), the query selection takes these instead of its top-k, so a fixture test can
  // replay the original's selection among near-tied scores (tests/detr_topk/README.md). Undefined, the
  // default: no effect. Not a parameter or buffer (never saved).
  torch::Tensor forced_topk_indices;

  torch::nn::ModuleList input_proj{nullptr}, dec_score_head{nullptr}, dec_bbox_head{nullptr};
  torch::nn::Embedding denoising_class_embed{nullptr};
  MLP query_pos_head{nullptr}, enc_bbox_head{nullptr};
  torch::nn::Sequential enc_output{nullptr};
  torch::nn::Linear enc_score_head{nullptr};
  torch::Tensor anchors, valid_mask;  // with a fixed eval size: buffers

 protected:
  // The selected queries of one forward (select_queries).
  struct Selection {
    SpatialShapes shapes;
    torch::Tensor memory;         // [B, N, hidden] the projected maps, flattened
    torch::Tensor anchors;        // [1, N, 4] the cells' anchors (inverse-sigmoid space), memory's dtype
    torch::Tensor output_memory;  // [B, N, hidden] enc_output of the memory with invalid cells zeroed (no enc_output: that memory)
    torch::Tensor enc_logits;     // [B, N, C] enc_score_head of output_memory
    torch::Tensor topk_ind;       // [B, k] the selected tokens, best first
    int64_t k = 0;                // min(num_queries, N)
    std::optional<DenoisingGroup> dn;
    // t [B, N, X] -> the selected rows [B, k, X].
    torch::Tensor gather(const torch::Tensor& t) const {
      return t.gather(1, topk_ind.unsqueeze(-1).expand({-1, -1, t.size(-1)}));
    }
  };

  // input_proj: per encoder map a 1x1 conv + BN to hidden_dim, then 3x3/2 ones for the extra levels up to
  // num_levels. identity_at_hidden: an Identity where the channels already equal hidden_dim (D-FINE's
  // _build_input_proj_layer; RT-DETR projects every map).
  void register_input_proj(bool identity_at_hidden) {
    input_proj = this->register_module("input_proj", torch::nn::ModuleList());
    for (auto c : o_.feat_channels) input_proj->push_back(proj_layer(c, 1, 1, 0, identity_at_hidden));
    int64_t in = o_.feat_channels.back();
    for (int64_t i = static_cast<int64_t>(o_.feat_channels.size()); i < o_.num_levels; ++i) {
      input_proj->push_back(proj_layer(in, 3, 2, 1, identity_at_hidden));
      in = o_.hidden_dim;
    }
  }

  // denoising_class_embed (when num_denoising > 0), query_pos_head (MLP 4 -> pos_hidden -> hidden_dim in
  // pos_layers layers; pos_hidden 0: 2 hidden_dim), enc_output (Linear + LayerNorm, the children named
  // proj / norm where named_enc_output, else 0 / 1; none where !with_enc_output: EC and DEIMv2 score the
  // memory itself), enc_score_head, enc_bbox_head. Without enc_output query_pos_head comes after the two
  // encoder heads, in EC's and DEIMv2's order.
  void register_selection_heads(Act mlp_act, bool named_enc_output, bool with_enc_output = true, int64_t pos_hidden = 0,
                                int64_t pos_layers = 2) {
    const int64_t d = o_.hidden_dim;
    if (o_.num_denoising > 0)
      denoising_class_embed = this->register_module(
          "denoising_class_embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(o_.num_classes + 1, d).padding_idx(o_.num_classes)));
    auto pos_head = [&] {
      query_pos_head = this->register_module("query_pos_head", MLP(4, pos_hidden > 0 ? pos_hidden : 2 * d, d, pos_layers, mlp_act));
    };
    if (with_enc_output) {
      pos_head();
      enc_output = this->register_module("enc_output", torch::nn::Sequential());
      if (named_enc_output) {
        enc_output->push_back("proj", torch::nn::Linear(d, d));
        enc_output->push_back("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
      } else {
        enc_output->push_back(torch::nn::Linear(d, d));
        enc_output->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
      }
    }
    enc_score_head = this->register_module("enc_score_head", torch::nn::Linear(d, o_.num_classes));
    enc_bbox_head = this->register_module("enc_bbox_head", MLP(d, d, 4, 3, mlp_act));
    if (!with_enc_output) pos_head();
  }

  // The anchors of the fixed eval size as buffers `anchors` / `valid_mask`. The stored copy holds a large
  // finite value where the original holds +inf (invalid cells): a checkpoint may not hold non-finite
  // values (train/checkpoint.hpp rejects them as divergence), and sigmoid(1e4 + x) is exactly 1 as
  // sigmoid(inf) is, in float32 and float16 alike.
  void register_eval_anchors() {
    auto [a, m] = query_anchors(eval_shapes(), o_.eps, torch::kCPU);
    a = torch::where(m, a, torch::full_like(a, kInvalidAnchor));
    anchors = this->register_buffer("anchors", a);
    valid_mask = this->register_buffer("valid_mask", m);
  }

  // The initialisation both decoders give the selection heads and the per-layer heads (class biases at
  // prior 0.01, the box heads' last layers zero), then, drawing from the generator in this order, xavier
  // on enc_output's Linear (where there is one) and query_pos_head's layers and N(0, 1) on the denoising
  // embedding (its padding row zero, nn.Embedding's init).
  void init_selection_heads() {
    torch::NoGradGuard ng;
    const double bias = bias_init_with_prob(0.01);
    enc_score_head->bias.fill_(bias);
    torch::nn::init::zeros_(enc_bbox_head->layer(2)->weight);
    torch::nn::init::zeros_(enc_bbox_head->layer(2)->bias);
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      score_head(i)->bias.fill_(bias);
      torch::nn::init::zeros_(bbox_head(i)->layer(2)->weight);
      torch::nn::init::zeros_(bbox_head(i)->layer(2)->bias);
    }
    if (enc_output) torch::nn::init::xavier_uniform_(enc_output[0]->template as<torch::nn::LinearImpl>()->weight);
    for (size_t i = 0; i < query_pos_head->layers->size(); ++i)
      torch::nn::init::xavier_uniform_(query_pos_head->layer(static_cast<int64_t>(i))->weight);
    if (denoising_class_embed) {
      torch::nn::init::normal_(denoising_class_embed->weight);
      denoising_class_embed->weight[o_.num_classes].zero_();
    }
  }

  torch::nn::LinearImpl* score_head(int64_t i) { return dec_score_head[i]->template as<torch::nn::LinearImpl>(); }
  MLPImpl* bbox_head(int64_t i) { return dec_bbox_head[i]->template as<MLPImpl>(); }

  // The query selection (the originals' _get_decoder_input / _select_topk): the projected memory, the
  // denoising group (training with targets and num_denoising > 0; drawn first), the anchors, enc_output
  // of the memory with invalid (border) cells zeroed (the decoder layers read the memory whole), its
  // class logits and the top-k tokens by their best class logit (or the test hook's).
  // fixed: the denoising part at denoising_capacity(M, num_denoising) for the targets' M slots (a recorded
  // step's form), else at set_denoising_capacity's count (0: the original's exact size).
  Selection select_queries(const std::vector<torch::Tensor>& feats, const PaddedTargets* targets, bool fixed = false) {
    Selection s;
    s.memory = encoder_input(feats, s.shapes);
    if (this->is_training() && o_.num_denoising > 0 && targets != nullptr)
      s.dn = contrastive_denoising_group(*targets, o_.num_classes, o_.num_queries, denoising_class_embed, o_.num_denoising,
                                         o_.label_noise_ratio, o_.box_noise_scale,
                                         fixed ? denoising_capacity(targets->M, o_.num_denoising) : denoising_capacity_,
                                         o_.abs_noised_boxes);
    auto [anc, valid] = anchors_for(s.shapes, s.memory.device());
    s.anchors = anc.to(s.memory.scalar_type());
    s.output_memory = valid.to(s.memory.scalar_type()) * s.memory;
    if (enc_output) s.output_memory = enc_output->forward(s.output_memory);
    s.enc_logits = enc_score_head->forward(s.output_memory);
    s.k = std::min<int64_t>(o_.num_queries, s.memory.size(1));  // the original needs >= num_queries tokens
    s.topk_ind = forced_topk_indices.defined() ? forced_selection(forced_topk_indices, s.memory, s.k)
                                               : std::get<1>(std::get<0>(s.enc_logits.max(-1)).topk(s.k, 1));
    return s;
  }

  // With a denoising group: its queries put in front of the selected ones (ref_unact: boxes before the
  // sigmoid, target: content), type promotion as torch.concat (under autocast the float32 denoising
  // boxes keep their precision); returns the self-attention mask (nullopt without denoising).
  std::optional<torch::Tensor> prepend_denoising(const Selection& s, torch::Tensor& ref_unact, torch::Tensor& target) const {
    if (!s.dn) return std::nullopt;
    const auto& dn = *s.dn;
    const auto bt = torch::promote_types(dn.query_bbox.scalar_type(), ref_unact.scalar_type());
    const auto ct = torch::promote_types(dn.query_class.scalar_type(), target.scalar_type());
    ref_unact = torch::cat({dn.query_bbox.to(bt), ref_unact.to(bt)}, 1);
    target = torch::cat({dn.query_class.to(ct), target.to(ct)}, 1);
    if (s.k != o_.num_queries)  // fewer tokens than queries: the mask's matching part shrinks with them
      return denoising_attn_mask(dn.meta, s.k, s.memory.device());
    return dn.attn_mask;
  }

  Options o_;

 private:
  int64_t denoising_capacity_ = 0;
  std::shared_ptr<torch::nn::Module> proj_layer(int64_t in, int64_t k, int64_t s, int64_t p, bool identity_at_hidden) {
    if (identity_at_hidden && in == o_.hidden_dim) return torch::nn::Identity().ptr();
    torch::nn::Sequential seq;
    seq->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, o_.hidden_dim, k).stride(s).padding(p).bias(false)));
    seq->push_back("norm", BatchNorm2d(o_.hidden_dim));
    return seq.ptr();
  }

  torch::Tensor project_level(size_t i, const torch::Tensor& x) {
    if (auto* s = input_proj[i]->template as<torch::nn::SequentialImpl>()) return s->forward(x);
    return x;  // Identity
  }

  // The encoder maps projected (the extra levels from the last map, then each from the one before),
  // flattened into one memory.
  torch::Tensor encoder_input(const std::vector<torch::Tensor>& feats, SpatialShapes& shapes) {
    std::vector<torch::Tensor> proj;
    const auto nf = feats.size();
    for (size_t i = 0; i < nf; ++i) proj.push_back(project_level(i, feats[i]));
    for (auto i = static_cast<int64_t>(nf); i < o_.num_levels; ++i)
      proj.push_back(project_level(static_cast<size_t>(i), i == static_cast<int64_t>(nf) ? feats.back() : proj.back()));
    return flatten_levels(proj, shapes);
  }

  SpatialShapes eval_shapes() const { return square_level_shapes(o_.feat_strides, o_.num_levels, o_.eval_spatial_size); }
  std::pair<torch::Tensor, torch::Tensor> anchors_for(const SpatialShapes& shapes, torch::Device dev) {
    if (!this->is_training() && anchors.defined() && shapes == eval_shapes()) return {anchors.to(dev), valid_mask.to(dev)};
    return anchor_cache_.get(shapes, o_.eps, dev);
  }

  AnchorCache anchor_cache_;
};

}  // namespace libreyolo::nn::detr
