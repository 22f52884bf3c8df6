#pragma once
// RF-DETR as the original builds it for detection (libreyolo/models/rfdetr/, at c41461e: nn.py
// LibreRFDETRModel -> lwdetr.py build_model -> LWDETR), sizes n, s, m, l. The network is the inner LWDETR
// (LibreRFDETRModel.model); module names equal its state dict (no "model." prefix), in its order:
//   transformer.decoder.layers.{i}.*, transformer.decoder.norm, transformer.decoder.ref_point_head,
//   transformer.enc_output.{g}, transformer.enc_output_norm.{g}, transformer.enc_out_bbox_embed.{g},
//   transformer.enc_out_class_embed.{g}, class_embed, bbox_embed, refpoint_embed, query_feat,
//   backbone.0.encoder.encoder.{embeddings, encoder.layer.{0..11}, layernorm}, backbone.0.projector.stages.0.
//
//   * backbone.0.encoder (backbone.py DinoV2, dinov2.py WindowedDinov2WithRegistersBackbone): the
//     "dinov2_windowed_small" ViT built from its config, not from the hub (width 384, 6 heads, 12 layers,
//     patch 16, no register tokens, LayerNorm eps 1e-6, LayerScale lambda1, exact-GELU MLP of ratio 4,
//     separate query / key / value Linears): a [CLS] token, learned position embeddings for a
//     positional_encoding_size^2 grid (bicubic-antialias-resampled when the input's grid differs, or
//     is not square), the patch tokens cut into num_windows x num_windows windows (2 x 2), each window
//     with its own copy of the [CLS] token; layers 3, 6 and 9 attend over all windows together (the
//     windows' tokens concatenated per image), the others within their window; the outputs of layers 2,
//     5, 8 and 11 (the original's stages 3, 6, 9, 12) through the final LayerNorm, the windows put back
//     together, as [B, 384, H/16, W/16] maps;
//   * backbone.0.projector (MultiScaleProjector, projector_scale P4 only): the four maps concatenated (1536
//     channels), a C2f (cv1 1x1 -> 2 x 128, three 3x3 bottlenecks without shortcut chained on the second
//     half, cv2 1x1 from 640 to 256; every conv without bias + channels-first LayerNorm eps 1e-6 + SiLU)
//     and a channels-first LayerNorm; one level, [B, 256, H/16, W/16];
//   * backbone.1: the sine position encoding of that level (no padding: the original's NestedTensor mask
//     is all False for a batch tensor), normalised, 128 features per axis, y then x;
//   * transformer (transformer.py, two-stage, bbox_reparam, lite_refpoint_refine, 1 level): proposals per
//     cell ((x + 0.5) / w, (y + 0.5) / h, 0.05, 0.05; cells outside (0.01, 0.99) zeroed); group 0's
//     enc_output Linear + LayerNorm, its class head scores each token by its best logit and one top-k
//     picks num_queries = 300 of them; their boxes (the reparametrised delta of enc_out_bbox_embed on the
//     proposal) are the references, refined once by the first 300 rows of refpoint_embed (cxcy + d * wh,
//     wh * exp(d)); the decoder's queries are the first 300 rows of query_feat (not the selected memory);
//     2 / 3 / 4 / 4 post-norm decoder layers (self-attention 8 heads, multi-scale deformable
//     cross-attention 16 heads x 1 level x 2 points on the reference boxes, ReLU FFN 2048), the query
//     position from ref_point_head(sine embedding of the fixed reference boxes), every layer's output
//     through the decoder's final LayerNorm;
//   * heads: class_embed (num_classes + 1 logits, the original's "max id + 1": 81 for 80 classes) and
//     bbox_embed (reparametrised on the fixed references) on every layer's output; the last layer is the
//     prediction, the others aux_outputs; enc_outputs = group 0's class head on the selected memory and
//     the selected boxes.
// Group DETR: the 13 groups' enc_output, enc_output_norm, enc_out_bbox_embed, enc_out_class_embed and the
// 13 x 300 rows of refpoint_embed / query_feat are parameters (checkpoints hold them all); eval uses
// group 0 and the first 300 rows. Training mode (is_training()) runs every group as the original's
// training forward: all 13 x 300 query rows, one top-k per group with that group's enc_output / heads,
// the selected boxes refining that group's refpoint_embed rows (detached), the decoder's self-attention
// within each group's 300 queries (RFDETRDecoderLayerImpl::forward), enc_outputs group by group. (No
// loss, matcher or denoising here: the network only.)
//
// Input: the original's network takes ImageNet-normalised RGB (its preprocess_numpy and trainer
// normalise before the network); ours takes [0, 1] RGB and normalises inside encode()
// (RFDETROptions::imagenet_norm, on by default as EC's / DEIMv2's; the fixture test turns it off, as the
// fixtures feed the network directly). Sizes: multiples of 32 (patch 16 x 2 windows); other sizes than
// the size's resolution resample the position embeddings as the original does.
//
// The encoder boundary (capture/region.hpp style): encode(x) = backbone (DINOv2 + projector + position
// encoding), decode(features) = transformer + heads; forward(x) == decode(encode(x)).
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/rfdetr/backbone.hpp>
#include <libreyolo/nn/detr/deformable_attention.hpp>
#include <libreyolo/nn/detr/layers.hpp>
#include <libreyolo/nn/normalize.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::families::rfdetr {

namespace detr = libreyolo::nn::detr;

// ---- transformer --------------------------------------------------------------------------------
// transformer.py gen_sineembed_for_position: pos [B, n, 4] (cx, cy, w, h) -> [B, n, 4 * dim], the
// sin / cos of each coordinate times 2 pi over 10000^(2 floor(i / 2) / dim), interleaved; y, x, w, h.
inline torch::Tensor gen_sineembed_for_position(const torch::Tensor& pos, int64_t dim = kHiddenDim / 2) {
  const double scale = 2 * std::numbers::pi;
  auto dim_t = torch::ones({dim}, pos.options()).cumsum(0) - 1;
  dim_t = torch::pow(10000.0, 2 * torch::div(dim_t, 2, "floor") / static_cast<double>(dim));
  using torch::indexing::None;
  using torch::indexing::Slice;
  auto embed = [&](int64_t c) {
    auto p = (pos.select(-1, c) * scale).unsqueeze(-1) / dim_t;
    return torch::stack({p.index({"...", Slice(0, None, 2)}).sin(), p.index({"...", Slice(1, None, 2)}).cos()}, 3).flatten(2);
  };
  return torch::cat({embed(1), embed(0), embed(2), embed(3)}, 2);
}

// The reparametrised box: (cx, cy) + d_xy * (w, h), (w, h) * exp(d_wh) (the original's bbox_reparam).
inline torch::Tensor reparam_boxes(const torch::Tensor& delta, const torch::Tensor& ref) {
  auto wh = ref.narrow(-1, 2, 2);
  return torch::cat({delta.narrow(-1, 0, 2) * wh + ref.narrow(-1, 0, 2), delta.narrow(-1, 2, 2).exp() * wh}, -1);
}

// TransformerDecoderLayer (post-norm): self_attn, norm1, cross_attn, linear1, linear2, norm2, norm3.
class RFDETRDecoderLayerImpl : public torch::nn::Cloneable<RFDETRDecoderLayerImpl> {
 public:
  RFDETRDecoderLayerImpl(int64_t d, int64_t sa_heads, int64_t ca_heads, int64_t levels, int64_t points, int64_t ffn, int64_t groups)
      : d_(d), sa_(sa_heads), ca_(ca_heads), levels_(levels), points_(points), ffn_(ffn), groups_(groups) {
    reset();
  }
  void reset() override {
    self_attn = register_module("self_attn", detr::MultiheadAttention(d_, sa_));
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_})));
    detr::MSDeformableAttentionOptions co;
    co.embed_dim = d_;
    co.num_heads = ca_;
    co.num_levels = levels_;
    co.num_points = points_;
    co.offset_scale = 0.5;
    cross_attn = register_module("cross_attn", detr::MSDeformableAttention(co));
    linear1 = register_module("linear1", torch::nn::Linear(d_, ffn_));
    linear2 = register_module("linear2", torch::nn::Linear(ffn_, d_));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_})));
    norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_})));
  }
  // tgt [B, nq, d]; query_pos [B, nq, d]; ref [B, nq, 1, 4]; memory [B, N, d]. In training the queries
  // are group_detr groups of nq / group_detr, and the self-attention stays within each group (the
  // original splits the queries along dim 1 and stacks the groups on the batch dimension).
  torch::Tensor forward(const torch::Tensor& tgt, const torch::Tensor& query_pos, const torch::Tensor& ref, const torch::Tensor& memory,
                        const detr::SpatialShapes& shapes) {
    auto q = tgt + query_pos;
    torch::Tensor t2;
    if (is_training() && groups_ > 1) {
      const int64_t B = tgt.size(0), nq = tgt.size(1);
      auto qg = torch::cat(q.split(nq / groups_, 1), 0), vg = torch::cat(tgt.split(nq / groups_, 1), 0);
      t2 = torch::cat(self_attn->forward(qg, qg, vg).split(B, 0), 1);
    } else {
      t2 = self_attn->forward(q, q, tgt);
    }
    auto t = norm1->forward(tgt + t2);
    t = norm2->forward(t + cross_attn->forward(t + query_pos, ref, memory, shapes));
    return norm3->forward(t + detr::linear(linear2, torch::relu(detr::linear(linear1, t))));
  }
  detr::MultiheadAttention self_attn{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  detr::MSDeformableAttention cross_attn{nullptr};
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};

 private:
  int64_t d_, sa_, ca_, levels_, points_, ffn_, groups_;
};
TORCH_MODULE(RFDETRDecoderLayer);

// TransformerDecoder (lite_refpoint_refine, bbox_reparam, return_intermediate): layers, norm,
// ref_point_head (MLP 512 -> 256 -> 256). The reference boxes stay the initial ones in every layer.
class RFDETRDecoderImpl : public torch::nn::Cloneable<RFDETRDecoderImpl> {
 public:
  RFDETRDecoderImpl(int64_t num_layers, int64_t groups) : n_(num_layers), groups_(groups) { reset(); }
  void reset() override {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < n_; ++i)
      layers->push_back(RFDETRDecoderLayer(kHiddenDim, kSelfAttnHeads, kCrossAttnHeads, 1, kDecPoints, kDimFeedforward, groups_));
    // The original deep-copies one layer (transformer.py:539, _get_clones), then its Transformer redraws every
    // matrix and every deformable attention (transformer.py:385-391; the xavier pass below, RFDETRTransformer):
    // what stays copied are the 1-D tensors outside the cross-attention (the FFN's and projections' biases).
    detr::start_as_copies(layers->children(), [](const std::string& name, const torch::Tensor& t) {
      return t.dim() == 1 && name.find("cross_attn.") == std::string::npos;
    });
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHiddenDim})));
    ref_point_head = register_module("ref_point_head", detr::MLP(2 * kHiddenDim, kHiddenDim, kHiddenDim, 2));
  }
  // tgt [B, nq, d], memory [B, N, d], refpoints [B, nq, 4] (cx, cy, w, h) -> every layer's output
  // through norm, [L, B, nq, d]. (valid ratios are 1: no padding.)
  torch::Tensor forward(torch::Tensor tgt, const torch::Tensor& memory, const torch::Tensor& refpoints, const detr::SpatialShapes& shapes) {
    auto ref_input = refpoints.unsqueeze(2);  // [B, nq, 1 level, 4]
    auto query_pos = ref_point_head->forward(gen_sineembed_for_position(refpoints, kHiddenDim / 2));
    std::vector<torch::Tensor> inter;
    for (const auto& l : *layers) {
      tgt = l->as<RFDETRDecoderLayerImpl>()->forward(tgt, query_pos, ref_input, memory, shapes);
      inter.push_back(norm->forward(tgt));
    }
    return torch::stack(inter);
  }
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  detr::MLP ref_point_head{nullptr};

 private:
  int64_t n_, groups_;
};
TORCH_MODULE(RFDETRDecoder);

// What the transformer returns (the original's hs, references, hs_enc, ref_enc) and the selection.
struct RFDETRTransformerOutput {
  torch::Tensor hs;          // [L, B, nq, d] every decoder layer's output through the final norm
  torch::Tensor references;  // [1, B, nq, 4] the (fixed) reference boxes, cx cy w h
  torch::Tensor memory_ts;   // [B, G * k, d] the selected tokens' enc_output memory (G = 1 in eval)
  torch::Tensor boxes_ts;    // [B, G * k, 4] their boxes
  torch::Tensor topk_ind;    // [B, G * k] the selected token indices, group by group, best first
};

// transformer.py Transformer (two-stage, bbox_reparam): decoder, enc_output.{g} (Linear),
// enc_output_norm.{g} (LayerNorm), enc_out_bbox_embed.{g} (MLP 256-256-256-4), enc_out_class_embed.{g}
// (Linear to the class count) for the group_detr groups.
class RFDETRTransformerImpl : public torch::nn::Cloneable<RFDETRTransformerImpl> {
 public:
  RFDETRTransformerImpl(int64_t dec_layers, int64_t num_logits, int64_t num_queries, int64_t groups)
      : dec_layers_(dec_layers), logits_(num_logits), nq_(num_queries), groups_(groups) {
    reset();
  }
  void reset() override {
    decoder = register_module("decoder", RFDETRDecoder(dec_layers_, groups_));
    enc_output = register_module("enc_output", torch::nn::ModuleList());
    enc_output_norm = register_module("enc_output_norm", torch::nn::ModuleList());
    for (int64_t g = 0; g < groups_; ++g) {
      enc_output->push_back(torch::nn::Linear(kHiddenDim, kHiddenDim));
      enc_output_norm->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHiddenDim})));
    }
    // The original's Transformer._reset_parameters (before LWDETR adds the enc_out_* heads): xavier_uniform
    // on every parameter of dim > 1, then the deformable attentions' own reset, which redraws all of theirs
    // (MSDeformableAttention's constructor already did: skipped here, the same distributions).
    {
      torch::NoGradGuard ng;
      for (auto& p : named_parameters())
        if (p.value().dim() > 1 && p.key().find("cross_attn.") == std::string::npos) torch::nn::init::xavier_uniform_(p.value());
    }
    enc_out_bbox_embed = register_module("enc_out_bbox_embed", torch::nn::ModuleList());
    enc_out_class_embed = register_module("enc_out_class_embed", torch::nn::ModuleList());
    for (int64_t g = 0; g < groups_; ++g) {
      enc_out_bbox_embed->push_back(detr::MLP(kHiddenDim, kHiddenDim, 4, 3));
      enc_out_class_embed->push_back(torch::nn::Linear(kHiddenDim, logits_));
    }
  }

  // Test hook, not a setting: when defined (int64 [B, G * k], token indices into the flattened memory,
  // group by group, best first; G = 1 in eval), the query selection takes these instead of its top-k, so
  // a fixture test can replay the original's selection among near-tied scores (tests/detr_topk/README.md).
  // Not a parameter or buffer.
  torch::Tensor forced_topk_indices;

  // Each token's selection score in group g ([B, N]: its best class logit), as forward computes it.
  torch::Tensor selection_scores(const torch::Tensor& memory, const detr::SpatialShapes& shapes, int64_t g = 0) {
    auto [om, proposals] = masked_memory_and_proposals(memory, shapes);
    auto m = enc_output_norm[g]->as<torch::nn::LayerNormImpl>()->forward(detr::linear(*enc_output[g]->as<torch::nn::LinearImpl>(), om));
    return std::get<0>(detr::linear(*enc_out_class_embed[g]->as<torch::nn::LinearImpl>(), m).max(-1));
  }

  // srcs: the projector's levels [B, d, h, w]; refpoint_w / query_w: refpoint_embed / query_feat rows
  // (eval: the first num_queries; training: all num_queries * group_detr). (The position encodings are
  // not used by this decoder: its cross-attention's value is the memory alone.)
  RFDETRTransformerOutput forward(const std::vector<torch::Tensor>& srcs, const torch::Tensor& refpoint_w, const torch::Tensor& query_w) {
    detr::SpatialShapes shapes;
    std::vector<torch::Tensor> flat;
    for (const auto& s : srcs) {
      shapes.push_back({s.size(2), s.size(3)});
      flat.push_back(s.flatten(2).transpose(1, 2));
    }
    auto memory = flat.size() > 1 ? torch::cat(flat, 1) : flat[0];
    const int64_t B = memory.size(0), N = memory.size(1);
    auto [output_memory, proposals] = masked_memory_and_proposals(memory, shapes);

    // Two-stage query selection: one top-k per group (eval: group 0 only).
    const int64_t G = is_training() ? groups_ : 1, k = std::min(nq_, N);
    std::vector<torch::Tensor> refs_ts, mems_ts, inds;
    for (int64_t g = 0; g < G; ++g) {
      auto om = enc_output_norm[g]->as<torch::nn::LayerNormImpl>()->forward(detr::linear(*enc_output[g]->as<torch::nn::LinearImpl>(), output_memory));
      auto logits = detr::linear(*enc_out_class_embed[g]->as<torch::nn::LinearImpl>(), om);
      auto boxes = reparam_boxes(enc_out_bbox_embed[g]->as<detr::MLPImpl>()->forward(om), proposals);
      torch::Tensor ind;
      if (forced_topk_indices.defined()) {
        TORCH_CHECK(forced_topk_indices.size(0) == B && forced_topk_indices.size(1) == G * k,
                    "RF-DETR forced_topk_indices: expected [", B, ", ", G * k, "], got ", forced_topk_indices.sizes());
        ind = forced_topk_indices.narrow(1, g * k, k).to(memory.device());
      } else {
        ind = std::get<1>(std::get<0>(logits.max(-1)).topk(k, 1));
      }
      refs_ts.push_back(boxes.gather(1, ind.unsqueeze(-1).expand({-1, -1, 4})));
      mems_ts.push_back(om.gather(1, ind.unsqueeze(-1).expand({-1, -1, om.size(-1)})));
      inds.push_back(ind);
    }
    RFDETRTransformerOutput out;
    out.boxes_ts = torch::cat(refs_ts, 1);
    out.memory_ts = torch::cat(mems_ts, 1);
    out.topk_ind = torch::cat(inds, 1);
    // The decoder's queries: query_feat; its reference boxes: refpoint_embed's rows refining the selected
    // boxes (detached, as the original), the rows past the selection as they are. (Only when N <
    // num_queries is there such a rest; then, in training, the original refines the first G * N rows with
    // the groups' boxes in turn, across its groups' 300-row blocks: kept as it is.)
    auto tgt = query_w.unsqueeze(0).expand({B, -1, -1}).contiguous();
    auto ref = refpoint_w.unsqueeze(0).expand({B, -1, -1}).contiguous();
    const int64_t ts_len = out.boxes_ts.size(1);
    auto refined = reparam_boxes(ref.narrow(1, 0, ts_len), out.boxes_ts.detach());
    ref = ts_len < ref.size(1) ? torch::cat({refined, ref.narrow(1, ts_len, ref.size(1) - ts_len)}, 1) : refined;
    out.hs = decoder->forward(tgt, memory, ref, shapes);
    out.references = ref.unsqueeze(0);
    return out;
  }

  RFDETRDecoder decoder{nullptr};
  torch::nn::ModuleList enc_output{nullptr}, enc_output_norm{nullptr}, enc_out_bbox_embed{nullptr}, enc_out_class_embed{nullptr};

 private:
  // gen_encoder_output_proposals(unsigmoid=False), no padding: per cell ((x + 0.5) / w, (y + 0.5) / h,
  // 0.05 * 2^level, same); cells with a coordinate outside (0.01, 0.99) get a zero proposal and a zero
  // memory row. -> (memory [B, N, d], proposals [1, N, 4]) in memory's dtype.
  static std::pair<torch::Tensor, torch::Tensor> masked_memory_and_proposals(const torch::Tensor& memory, const detr::SpatialShapes& shapes) {
    const auto o = torch::TensorOptions().dtype(torch::kFloat32).device(memory.device());
    std::vector<torch::Tensor> props;
    for (size_t lvl = 0; lvl < shapes.size(); ++lvl) {
      const int64_t h = shapes[lvl][0], w = shapes[lvl][1];
      auto gy = torch::ones({h, w}, o).cumsum(0) - 1, gx = torch::ones({h, w}, o).cumsum(1) - 1;
      auto scale = detr::device_pair(static_cast<double>(w), static_cast<double>(h), o);
      auto grid = (torch::stack({gx, gy}, -1) + 0.5) / scale;
      auto wh = torch::ones_like(grid) * 0.05 * std::pow(2.0, static_cast<double>(lvl));
      props.push_back(torch::cat({grid, wh}, -1).reshape({1, h * w, 4}));
    }
    auto p = props.size() > 1 ? torch::cat(props, 1) : props[0];
    auto valid = ((p > 0.01) & (p < 0.99)).all(-1, /*keepdim=*/true);
    p = p.masked_fill(valid.logical_not(), 0.0);
    auto m = memory.masked_fill(valid.logical_not(), 0.0);
    return {m, p.to(memory.scalar_type())};
  }

  int64_t dec_layers_, logits_, nq_, groups_;
};
TORCH_MODULE(RFDETRTransformer);

// ---- the network ----------------------------------------------------------------------------------
struct RFDETRHeadOutput {
  torch::Tensor pred_logits;  // [B, nq, num_classes + 1]
  torch::Tensor pred_boxes;   // [B, nq, 4] cx cy w h, normalised to the input
};

struct RFDETROutput {
  torch::Tensor pred_logits, pred_boxes;       // the last decoder layer's
  std::vector<RFDETRHeadOutput> aux_outputs;   // the other layers', first to last
  RFDETRHeadOutput enc_outputs;                // the two-stage selection's (group by group in training)
  std::array<int64_t, 2> input_hw{0, 0};
};

// LWDETR: transformer, class_embed, bbox_embed, refpoint_embed, query_feat, backbone (its registration
// order, so named_parameters() follows the original's state dict).
class RFDETRImpl : public torch::nn::Cloneable<RFDETRImpl> {
 public:
  explicit RFDETRImpl(RFDETROptions o = {}) : o_(std::move(o)) {
    if (!rfdetr_size(o_.size)) throw ConfigError("RF-DETR network size '" + o_.size + "': not available; allowed: n, s, m, l");
    if (o_.num_classes < 1) throw ConfigError("RF-DETR: num_classes must be >= 1");
    reset();
  }
  void reset() override {
    const RFDETRSizeConfig& c = *rfdetr_size(o_.size);
    const int64_t logits = o_.num_classes + 1, rows = o_.num_queries * o_.group_detr;
    transformer = register_module("transformer", RFDETRTransformer(c.dec_layers, logits, o_.num_queries, o_.group_detr));
    class_embed = register_module("class_embed", torch::nn::Linear(kHiddenDim, logits));
    bbox_embed = register_module("bbox_embed", detr::MLP(kHiddenDim, kHiddenDim, 4, 3));
    refpoint_embed = register_module("refpoint_embed", torch::nn::Embedding(rows, 4));
    query_feat = register_module("query_feat", torch::nn::Embedding(rows, kHiddenDim));
    backbone = register_module("backbone", RFDETRJoiner(c.positional_encoding_size));
    // The original's LWDETR init: refpoint_embed 0, class bias at prior 0.01, bbox_embed's last layer 0;
    // every group's enc_out_bbox_embed / enc_out_class_embed a copy of bbox_embed / class_embed.
    torch::NoGradGuard ng;
    refpoint_embed->weight.zero_();
    class_embed->bias.fill_(detr::bias_init_with_prob(0.01));
    bbox_embed->layer(2)->weight.zero_();
    bbox_embed->layer(2)->bias.zero_();
    for (int64_t g = 0; g < o_.group_detr; ++g) {
      auto* cls = transformer->enc_out_class_embed[g]->as<torch::nn::LinearImpl>();
      cls->weight.copy_(class_embed->weight);
      cls->bias.copy_(class_embed->bias);
      auto* box = transformer->enc_out_bbox_embed[g]->as<detr::MLPImpl>();
      for (int64_t i = 0; i < 3; ++i) {
        box->layer(i)->weight.copy_(bbox_embed->layer(i)->weight);
        box->layer(i)->bias.copy_(bbox_embed->layer(i)->bias);
      }
    }
  }

  // [0, 1] RGB -> ImageNet-normalised (where imagenet_norm), in x's dtype.
  torch::Tensor normalize(const torch::Tensor& x) const { return o_.imagenet_norm ? nn::imagenet_normalize(x) : x; }

  RFDETRFeatures encode(const torch::Tensor& x) { return backbone->forward(normalize(x)); }

  // The transformer on the features with the rows of refpoint_embed / query_feat the mode uses.
  RFDETRTransformerOutput transform(const RFDETRFeatures& f) {
    const int64_t rows = is_training() ? o_.num_queries * o_.group_detr : o_.num_queries;
    return transformer->forward(f.srcs, refpoint_embed->weight.narrow(0, 0, rows), query_feat->weight.narrow(0, 0, rows));
  }

  // The heads on the transformer's output (LWDETR.forward after the transformer).
  RFDETROutput heads(const RFDETRTransformerOutput& t) {
    auto coord = reparam_boxes(bbox_embed->forward(t.hs), t.references);  // [L, B, nq, 4]
    auto cls = detr::linear(class_embed, t.hs);                           // [L, B, nq, C]
    RFDETROutput out;
    const int64_t L = t.hs.size(0);
    out.pred_logits = cls[L - 1];
    out.pred_boxes = coord[L - 1];
    for (int64_t i = 0; i + 1 < L; ++i) out.aux_outputs.push_back({cls[i], coord[i]});
    const int64_t G = is_training() ? o_.group_detr : 1;
    auto chunks = t.memory_ts.chunk(G, 1);
    std::vector<torch::Tensor> enc_cls;
    for (int64_t g = 0; g < G; ++g)
      enc_cls.push_back(detr::linear(*transformer->enc_out_class_embed[g]->as<torch::nn::LinearImpl>(), chunks[static_cast<size_t>(g)]));
    out.enc_outputs = {G > 1 ? torch::cat(enc_cls, 1) : enc_cls[0], t.boxes_ts};
    return out;
  }

  RFDETROutput decode(const RFDETRFeatures& f) { return heads(transform(f)); }

  RFDETROutput forward(const torch::Tensor& x) {
    auto out = decode(encode(x));
    out.input_hw = {x.size(2), x.size(3)};
    return out;
  }

  const RFDETROptions& options() const { return o_; }
  int64_t resolution() const { return rfdetr_size(o_.size)->resolution; }

  RFDETRTransformer transformer{nullptr};
  torch::nn::Linear class_embed{nullptr};
  detr::MLP bbox_embed{nullptr};
  torch::nn::Embedding refpoint_embed{nullptr}, query_feat{nullptr};
  RFDETRJoiner backbone{nullptr};

 private:
  RFDETROptions o_;
};
TORCH_MODULE(RFDETR);

}  // namespace libreyolo::families::rfdetr
