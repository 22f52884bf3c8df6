#pragma once
// The D-FINE decoder (the original's models/dfine/decoder.py DFINETransformer; DEIM's DEIMTransformer and
// RT-DETRv4 are the same network, differing in activations only; EC's ECTransformer is it with the options
// ec_decoder_options() sets): RT-DETR's query selection (anchors per
// cell, the top-num_queries encoder tokens by their best class score, contrastive denoising queries in
// training) and decoder layers with D-FINE's changes:
//   * cross-attention samples the encoder memory itself (no value/output projections), with a point
//     count per level (num_points, e.g. 6/6 for n, 3/6/3 for s), offsets scaled by a num_points_scale
//     buffer (1 / that level's count);
//   * a Gate (learned sigmoid mix of the self-attention and cross-attention streams, LayerNorm) replaces
//     the residual + norm2 after cross-attention; the FFN output is clamped to +-65504 before norm3;
//   * boxes by Fine-grained Distribution Refinement (nn/detr/fdr.hpp): each layer predicts per-edge bin
//     logits (4 x (reg_max + 1)) added to the previous layer's, integrated against W(n) into edge
//     distances from the reference box that layer 0's pre_bbox_head fixes (`ref_points`);
//   * an LQE head per layer adds a localisation-quality term (from the top-4 bin probabilities per edge)
//     to the class logits.
// Module names equal the original's state dict (decoder.decoder.layers.0.gateway.gate.weight, ...);
// `up` and `reg_scale` are parameters of this module without gradient, aliased as buffers of the layer
// stack (the original's TransformerDecoder holds the same tensors: decoder.decoder.up / .reg_scale).
//
// The input projections, the query selection and the denoising queries are the core it shares with
// RT-DETR's decoder (nn/detr/decoder_core.hpp).
//
// No host syncs in the forward: fixed-shape ops throughout; the denoising group (training) is built on
// the host from the targets' sizes, as RT-DETR's (nn/detr/denoising.hpp).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/anchors.hpp>
#include <libreyolo/nn/detr/decoder_core.hpp>
#include <libreyolo/nn/detr/deformable_attention.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>
#include <libreyolo/nn/detr/fdr.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>
#include <optional>
#include <vector>

namespace libreyolo::nn::detr {

struct DFineDecoderOptions {
  int64_t num_classes = 80;
  int64_t hidden_dim = 128;
  int64_t num_queries = 300;
  std::vector<int64_t> feat_channels{128, 128};
  std::vector<int64_t> feat_strides{16, 32};
  int64_t num_levels = 2;
  std::vector<int64_t> num_points{6, 6};  // per level
  int64_t nhead = 8;
  int64_t num_layers = 3;
  int64_t dim_feedforward = 512;
  Act activation = Act::relu;  // decoder layers' FFN and the LQE heads
  Act mlp_act = Act::relu;     // query_pos_head, enc_bbox_head, pre_bbox_head, dec_bbox_head (DEIM: silu)
  int64_t num_denoising = 100;
  double label_noise_ratio = 0.5;
  double box_noise_scale = 1.0;
  // The noised denoising boxes' negative widths / heights (a negative copy's corners crossed) made positive
  // before the inverse sigmoid: the D-FINE line's denoising (the original's models/dfine/denoising.py:95 and
  // models/deim/denoising.py:94, which DEIM, DEIMv2, RT-DETRv4 and EC use). RT-DETR v1 / v2 lack it.
  bool abs_noised_boxes = true;
  int64_t eval_spatial_size = 640;  // > 0: anchors for this square size kept as buffers
  int64_t eval_idx = -1;
  double eps = 1e-2;
  int64_t reg_max = 32;
  double reg_scale = 4.0;
  // EC's decoder (the original's models/ec/decoder.py ECTransformer) differs from D-FINE's in these
  // (ec_decoder_options() sets them): the memory itself scored and selected (no enc_output), a 3-layer
  // query_pos_head of width hidden_dim (D-FINE: 2 layers, 2 hidden_dim wide) whose embedding of the
  // initial reference boxes serves every layer (D-FINE: re-embedded from each layer's refined boxes), and
  // the layers' last LayerNorm named norm2 (D-FINE: norm3), the FFN's weights at nn.Linear's own draw.
  bool enc_output = true;
  int64_t query_pos_layers = 2;
  int64_t query_pos_hidden = 0;  // 0: 2 hidden_dim
  bool query_pos_per_layer = true;
  const char* ffn_norm_name = "norm3";
  // linear1's and linear2's weights xavier-uniform (D-FINE's layer, dfine/decoder.py _reset_parameters); EC's
  // layer keeps nn.Linear's own draw (ec/decoder.py TransformerDecoderLayer has no _reset_parameters).
  bool ffn_xavier = true;
  // DEIMv2's decoder (models/deimv2/engine/deim/deim_decoder.py; deimv2_decoder_options() sets these and
  // EC's enc_output / query_pos_layers / query_pos_hidden above): RMSNorm in place of every LayerNorm of
  // the layers (norm1, norm2 / the gateway's, norm3), a SwiGLU FFN (`swish_ffn`: w12 to dim_feedforward,
  // halves silu(a) * b, w3 back) in place of linear1 / linear2, pre_bbox_head registered before the
  // per-layer heads (the original's order).
  bool deimv2 = false;
  bool use_gateway = true;        // false (DEIMv2 atto..pico): residual + norm2 after cross-attention
  bool share_bbox_head = false;   // true (DEIMv2 atto..pico): one dec_bbox_head module for every layer
  // DEIMv2's and EC's heads start as copies of one module: every dec_score_head, and the dec_bbox_heads up to
  // eval_idx (deim_decoder.py:414-434, ec/decoder.py:598-619); D-FINE's and DEIM's are each drawn afresh.
  bool cloned_heads = false;
  // reg_scale held as int64 (DEIMv2 n: its SIZE_CONFIGS give the integer 4, so the original's
  // torch.tensor([reg_scale]) is int64); the box math reads it as a float either way (fdr.hpp).
  bool integer_reg_scale = false;
};

// EC's differences from D-FINE (above) set on `o`.
inline DFineDecoderOptions ec_decoder_options(DFineDecoderOptions o) {
  o.enc_output = false;
  o.query_pos_layers = 3;
  o.query_pos_hidden = o.hidden_dim;
  o.query_pos_per_layer = false;
  o.ffn_norm_name = "norm2";
  o.ffn_xavier = false;
  o.cloned_heads = true;
  return o;
}

// DEIMv2's differences from D-FINE (above) set on `o`: its layers and heads, no enc_output and the
// 3-layer query_pos_head of width hidden_dim as EC's, which embeds the initial reference boxes once for
// every layer, as EC's (models/deimv2/engine/deim/deim_decoder.py:215-216, before the layer loop).
inline DFineDecoderOptions deimv2_decoder_options(DFineDecoderOptions o) {
  o.deimv2 = true;
  o.cloned_heads = true;
  o.enc_output = false;
  o.query_pos_layers = 3;
  o.query_pos_hidden = o.hidden_dim;
  o.query_pos_per_layer = false;
  return o;
}

// RMSNorm (DEIMv2): x * rsqrt(mean(x^2, -1) + eps) computed in float32, back in x's dtype, times `scale`.
class RMSNormImpl : public torch::nn::Cloneable<RMSNormImpl> {
 public:
  explicit RMSNormImpl(int64_t d, double eps = 1e-6) : d_(d), eps_(eps) { reset(); }
  void reset() override { scale = register_parameter("scale", torch::ones({d_})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto xf = x.to(torch::kFloat32);
    auto y = (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps_)).to(x.scalar_type());
    return y * scale;
  }
  torch::Tensor scale;

 private:
  int64_t d_;
  double eps_;
};
TORCH_MODULE(RMSNorm);

// SwiGLU FFN (DEIMv2's `swish_ffn`): w3(silu(a) * b), [a, b] = w12(x) in halves of `hidden` each.
class SwiGLUFFNImpl : public torch::nn::Cloneable<SwiGLUFFNImpl> {
 public:
  SwiGLUFFNImpl(int64_t in, int64_t hidden, int64_t out) : in_(in), hidden_(hidden), out_(out) { reset(); }
  void reset() override {
    w12 = register_module("w12", torch::nn::Linear(in_, 2 * hidden_));
    w3 = register_module("w3", torch::nn::Linear(hidden_, out_));
    torch::NoGradGuard ng;
    torch::nn::init::xavier_uniform_(w12->weight);
    torch::nn::init::zeros_(w12->bias);
    torch::nn::init::xavier_uniform_(w3->weight);
    torch::nn::init::zeros_(w3->bias);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = linear(w12, x).chunk(2, -1);
    return linear(w3, torch::silu(h[0]) * h[1]);
  }
  torch::nn::Linear w12{nullptr}, w3{nullptr};

 private:
  int64_t in_, hidden_, out_;
};
TORCH_MODULE(SwiGLUFFN);

// Deformable cross-attention over the memory itself (the original's MSDeformableAttention, v2 style).
class DFineDeformableAttentionImpl : public torch::nn::Cloneable<DFineDeformableAttentionImpl> {
 public:
  DFineDeformableAttentionImpl(int64_t embed, int64_t heads, std::vector<int64_t> points)
      : e_(embed), h_(heads), points_(std::move(points)) {
    reset();
  }
  void reset() override {
    if (e_ % h_ != 0) throw ConfigError("DFineDeformableAttention: embed_dim=" + std::to_string(e_) + " is not divisible by num_heads=" + std::to_string(h_));
    P_ = std::accumulate(points_.begin(), points_.end(), int64_t{0});
    std::vector<float> scale;
    for (auto n : points_)
      for (int64_t j = 0; j < n; ++j) scale.push_back(1.0f / static_cast<float>(n));
    num_points_scale = register_buffer("num_points_scale", torch::tensor(scale));
    sampling_offsets = register_module("sampling_offsets", torch::nn::Linear(e_, h_ * P_ * 2));
    attention_weights = register_module("attention_weights", torch::nn::Linear(e_, h_ * P_));
    torch::NoGradGuard ng;
    torch::nn::init::zeros_(sampling_offsets->weight);
    auto thetas = torch::arange(h_, torch::kFloat32) * (2.0 * std::numbers::pi / static_cast<double>(h_));
    auto grid = torch::stack({thetas.cos(), thetas.sin()}, -1);
    grid = grid / std::get<0>(grid.abs().max(-1, true));
    grid = grid.reshape({h_, 1, 2}).repeat({1, P_, 1});
    std::vector<torch::Tensor> sc;
    for (auto n : points_) sc.push_back(torch::arange(1, n + 1, torch::kFloat32));
    grid *= torch::cat(sc).reshape({1, -1, 1});
    sampling_offsets->bias.copy_(grid.flatten());
    torch::nn::init::zeros_(attention_weights->weight);
    torch::nn::init::zeros_(attention_weights->bias);
  }
  // query [B, Lq, E]; ref [B, Lq, 1, 4] (cx, cy, w, h); value [B, Lv, H, E/H] (the memory split in heads).
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& ref, const torch::Tensor& value, const SpatialShapes& shapes) {
    const int64_t B = query.size(0), Lq = query.size(1);
    auto off = linear(sampling_offsets, query).reshape({B, Lq, h_, P_, 2});
    auto aw = torch::softmax(linear(attention_weights, query).reshape({B, Lq, h_, P_}), -1);
    auto r = ref.reshape({B, Lq, 1, 1, 4});
    auto sc = num_points_scale.to(query.scalar_type()).unsqueeze(-1);  // [P, 1]
    auto loc = r.narrow(-1, 0, 2) + off * sc * r.narrow(-1, 2, 2) * 0.5;
    return ms_deform_attn_core(value, shapes, loc, aw, points_);
  }
  torch::nn::Linear sampling_offsets{nullptr}, attention_weights{nullptr};
  torch::Tensor num_points_scale;

 private:
  int64_t e_, h_, P_ = 0;
  std::vector<int64_t> points_;
};
TORCH_MODULE(DFineDeformableAttention);

// Gate: sigmoid(Linear([x1, x2])) split in two gates g1, g2; LayerNorm (rms: RMSNorm, DEIMv2) of
// g1 * x1 + g2 * x2.
class GateImpl : public torch::nn::Cloneable<GateImpl> {
 public:
  explicit GateImpl(int64_t d, bool rms = false) : d_(d), rms_(rms) { reset(); }
  void reset() override {
    gate = register_module("gate", torch::nn::Linear(2 * d_, 2 * d_));
    if (rms_) rms_norm = register_module("norm", RMSNorm(d_));
    else norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_})));
    torch::NoGradGuard ng;
    gate->bias.fill_(bias_init_with_prob(0.5));
    torch::nn::init::zeros_(gate->weight);
  }
  torch::Tensor forward(const torch::Tensor& x1, const torch::Tensor& x2) {
    auto g = torch::sigmoid(linear(gate, torch::cat({x1, x2}, -1))).chunk(2, -1);
    auto y = g[0] * x1 + g[1] * x2;
    return rms_norm ? rms_norm->forward(y) : norm->forward(y);
  }
  torch::nn::Linear gate{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  RMSNorm rms_norm{nullptr};  // registered as "norm" (rms)

 private:
  int64_t d_;
  bool rms_;
};
TORCH_MODULE(Gate);

class DFineDecoderLayerImpl : public DecoderLayerCore<DFineDecoderLayerImpl, DFineDecoderOptions> {
 public:
  explicit DFineDecoderLayerImpl(const DFineDecoderOptions& o) : DecoderLayerCore(o) { reset(); }
  void reset() override {
    if (o_.deimv2) {  // the original's order: self_attn, norm1, cross_attn, gateway | norm2, swish_ffn, norm3
      const int64_t d = o_.hidden_dim;
      self_attn = register_module("self_attn", MultiheadAttention(d, o_.nhead));
      rms1 = register_module("norm1", RMSNorm(d));
      cross_attn = register_module("cross_attn", DFineDeformableAttention(d, o_.nhead, o_.num_points));
      if (o_.use_gateway) gateway = register_module("gateway", Gate(d, /*rms=*/true));
      else rms2 = register_module("norm2", RMSNorm(d));
      swish_ffn = register_module("swish_ffn", SwiGLUFFN(d, o_.dim_feedforward / 2, d));
      rms3 = register_module("norm3", RMSNorm(d));
      return;
    }
    register_self_attention();
    cross_attn = register_module("cross_attn", DFineDeformableAttention(o_.hidden_dim, o_.nhead, o_.num_points));
    gateway = register_module("gateway", Gate(o_.hidden_dim));
    register_ffn(o_.ffn_xavier, o_.ffn_norm_name);
  }
  torch::Tensor forward(torch::Tensor tgt, const torch::Tensor& ref, const torch::Tensor& value, const SpatialShapes& shapes,
                        const std::optional<torch::Tensor>& attn_mask, const torch::Tensor& pos) {
    if (o_.deimv2) {
      auto q = tgt + pos;
      tgt = rms1->forward(tgt + self_attn->forward(q, q, tgt, attn_mask));
      auto cross = cross_attn->forward(tgt + pos, ref, value, shapes);
      tgt = gateway ? gateway->forward(tgt, cross) : rms2->forward(tgt + cross);
      return rms3->forward((tgt + swish_ffn->forward(tgt)).clamp(-65504, 65504));
    }
    tgt = self_attention(tgt, pos, attn_mask);
    tgt = gateway->forward(tgt, cross_attn->forward(tgt + pos, ref, value, shapes));
    return ffn(tgt, o_.activation, /*clamp=*/true);
  }
  DFineDeformableAttention cross_attn{nullptr};
  Gate gateway{nullptr};
  RMSNorm rms1{nullptr}, rms2{nullptr}, rms3{nullptr};  // DEIMv2: registered as norm1, norm2, norm3
  SwiGLUFFN swish_ffn{nullptr};                          // DEIMv2
};
TORCH_MODULE(DFineDecoderLayer);

// Localisation Quality Estimation: the top-k (4) bin probabilities of each edge and their mean, through
// a 2-layer MLP (zero-initialised output), added to the class logits.
class LQEImpl : public torch::nn::Cloneable<LQEImpl> {
 public:
  LQEImpl(int64_t k, int64_t hidden, int64_t num_layers, int64_t reg_max, Act act) : k_(k), hidden_(hidden), n_(num_layers), reg_max_(reg_max), act_(act) {
    reset();
  }
  void reset() override {
    reg_conf = register_module("reg_conf", MLP(4 * (k_ + 1), hidden_, 1, n_, act_));
    torch::NoGradGuard ng;
    torch::nn::init::zeros_(reg_conf->layer(n_ - 1)->weight);
    torch::nn::init::zeros_(reg_conf->layer(n_ - 1)->bias);
  }
  torch::Tensor forward(const torch::Tensor& scores, const torch::Tensor& corners) {
    const int64_t B = corners.size(0), L = corners.size(1);
    auto prob = torch::softmax(corners.reshape({B, L, 4, reg_max_ + 1}), -1);
    auto top = std::get<0>(prob.topk(k_, -1));
    auto stat = torch::cat({top, top.mean(-1, true)}, -1);
    return scores + reg_conf->forward(stat.reshape({B, L, -1}));
  }
  MLP reg_conf{nullptr};

 private:
  int64_t k_, hidden_, n_, reg_max_;
  Act act_;
};
TORCH_MODULE(LQE);

// The layer stack (`decoder.decoder` in the state dict): layers, lqe_layers, and the up / reg_scale aliases.
// Cloned only through DFineDecoder::clone (a clone of the stack alone would alias the source's tensors).
class DFineDecoderStackImpl : public torch::nn::Cloneable<DFineDecoderStackImpl> {
 public:
  DFineDecoderStackImpl(const DFineDecoderOptions& o, torch::Tensor up, torch::Tensor reg_scale) : o_(o), up_(std::move(up)), rs_(std::move(reg_scale)) {
    reset();
  }
  void reset() override {
    // The same tensors as the parent's parameters: the original's TransformerDecoder keeps them as
    // attributes, so its state dict lists them twice (decoder.up and decoder.decoder.up).
    up = register_buffer("up", up_);
    reg_scale = register_buffer("reg_scale", rs_);
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) layers->push_back(DFineDecoderLayer(o_));
    // Deep copies of one layer up to eval_idx, of another after it (dfine/decoder.py:318-323; DEIM's, DEIMv2's
    // and EC's likewise). The LQE layers are each built afresh (a new LQE inside the comprehension).
    const auto first_after = static_cast<size_t>((o_.eval_idx >= 0 ? o_.eval_idx : o_.num_layers + o_.eval_idx) + 1);
    start_as_copies(layers, 0, first_after);
    start_as_copies(layers, first_after);
    lqe_layers = register_module("lqe_layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) lqe_layers->push_back(LQE(4, 64, 2, o_.reg_max, o_.activation));
  }
  DFineDecoderLayerImpl& layer(int64_t i) { return *layers[i]->as<DFineDecoderLayerImpl>(); }
  LQEImpl& lqe(int64_t i) { return *lqe_layers[i]->as<LQEImpl>(); }
  torch::nn::ModuleList layers{nullptr}, lqe_layers{nullptr};
  torch::Tensor up, reg_scale;

 private:
  DFineDecoderOptions o_;
  torch::Tensor up_, rs_;
};
TORCH_MODULE(DFineDecoderStack);

class DFineDecoderImpl : public DetrDecoderCore<DFineDecoderImpl, DFineDecoderOptions> {
 public:
  explicit DFineDecoderImpl(DFineDecoderOptions o = {}) : DetrDecoderCore(std::move(o)) {
    if (o_.feat_channels.size() > static_cast<size_t>(o_.num_levels) || o_.feat_strides.size() != o_.feat_channels.size())
      throw ConfigError("DFineDecoder: feat_channels (" + std::to_string(o_.feat_channels.size()) + ") must match feat_strides (" +
                        std::to_string(o_.feat_strides.size()) + ") and not exceed num_levels (" + std::to_string(o_.num_levels) + ")");
    if (static_cast<int64_t>(o_.num_points.size()) != o_.num_levels)
      throw ConfigError("DFineDecoder: num_points has " + std::to_string(o_.num_points.size()) + " entries, num_levels is " + std::to_string(o_.num_levels));
    reset();
  }

  void reset() override {
    const int64_t d = o_.hidden_dim;
    register_input_proj(/*identity_at_hidden=*/true);
    up = register_parameter("up", torch::full({1}, 0.5), /*requires_grad=*/false);
    reg_scale = register_parameter("reg_scale", o_.integer_reg_scale ? torch::full({1}, static_cast<int64_t>(o_.reg_scale), torch::kInt64)
                                                                    : torch::full({1}, o_.reg_scale),
                                   /*requires_grad=*/false);
    decoder = register_module("decoder", DFineDecoderStack(o_, up, reg_scale));
    register_selection_heads(o_.mlp_act, /*named_enc_output=*/true, o_.enc_output, o_.query_pos_hidden, o_.query_pos_layers);
    if (o_.deimv2) pre_bbox_head = register_module("pre_bbox_head", MLP(d, d, 4, 3, o_.mlp_act));
    dec_score_head = register_module("dec_score_head", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_layers; ++i) dec_score_head->push_back(torch::nn::Linear(d, o_.num_classes));
    if (!o_.deimv2) pre_bbox_head = register_module("pre_bbox_head", MLP(d, d, 4, 3, o_.mlp_act));
    dec_bbox_head = register_module("dec_bbox_head", torch::nn::ModuleList());
    // share_bbox_head: the layers up to eval_idx hold one module (the original's state dict lists it
    // under every index, one tensor each: a count of parameters counts it once).
    MLP shared = o_.share_bbox_head ? MLP(d, d, 4 * (o_.reg_max + 1), 3, o_.mlp_act) : MLP(nullptr);
    for (int64_t i = 0; i < o_.num_layers; ++i)
      dec_bbox_head->push_back(shared && i <= eval_index() ? shared : MLP(d, d, 4 * (o_.reg_max + 1), 3, o_.mlp_act));
    if (o_.cloned_heads) {
      start_as_copies(dec_score_head);
      start_as_copies(dec_bbox_head, 0, static_cast<size_t>(eval_index() + 1));
    }
    if (o_.eval_spatial_size > 0) register_eval_anchors();
    reset_parameters();
  }

  // A deep copy (on `device` when given) that keeps `decoder.decoder.up` / `.reg_scale` the copy's own
  // `up` / `reg_scale`: Cloneable's member-wise clone would leave the copy's layer stack aliasing the
  // source's tensors. Built fresh from the options, then every parameter and buffer copied by name (the
  // test hook forced_topk_indices is not kept).
  std::shared_ptr<torch::nn::Module> clone(const torch::optional<torch::Device>& device = torch::nullopt) const override {
    torch::NoGradGuard ng;
    auto copy = std::make_shared<DFineDecoderImpl>(o_);
    copy->train(is_training());
    auto take = [&](const torch::Tensor& s) { return device && s.device() != *device ? s.to(*device) : s.clone(); };
    const auto params = named_parameters(true);
    for (auto& p : copy->named_parameters(true)) p.value().set_data(take(params[p.key()]));
    const auto buffers = named_buffers(true);
    for (auto& b : copy->named_buffers(true))
      if (!b.value().is_same(copy->up) && !b.value().is_same(copy->reg_scale)) b.value().set_data(take(buffers[b.key()]));
    return copy;
  }

  // The same for per-image targets (padded here).
  DFineOutput forward(const std::vector<torch::Tensor>& feats, const std::vector<DetrTarget>* targets) {
    if (!targets) return forward(feats);
    const auto t = pad_targets(*targets, feats.front().device());
    return forward(feats, &t);
  }
  // feats: the encoder's maps; targets: the batch's ground truth in [B, M] slots (training: denoising
  // queries); fixed: the denoising part at its fixed capacity for M (select_queries).
  DFineOutput forward(const std::vector<torch::Tensor>& feats, const PaddedTargets* targets = nullptr, bool fixed = false) {
    const bool training = is_training();
    // Query selection: boxes by enc_bbox_head over the selected tokens only.
    const auto sel = select_queries(feats, targets, fixed);
    const auto& memory = sel.memory;
    auto topk_memory = sel.gather(sel.output_memory);
    // The original's anchors.repeat(B, 1, 1), gathered.
    auto ref_unact = enc_bbox_head->forward(topk_memory) + sel.gather(sel.anchors.expand({memory.size(0), -1, -1}));
    DFineOutput out;
    out.training = training;
    if (training) out.enc_aux_outputs.push_back({sel.gather(sel.enc_logits), torch::sigmoid(ref_unact)});
    auto target = topk_memory.detach();
    ref_unact = ref_unact.detach();
    const auto attn_mask = prepend_denoising(sel, ref_unact, target);

    // The decoder layers with FDR (the original's TransformerDecoder.forward).
    const int64_t eval_idx = eval_index();
    const int64_t B = memory.size(0), H = o_.nhead;
    auto value = memory.reshape({B, memory.size(1), H, o_.hidden_dim / H});
    auto project = weighting_function(o_.reg_max, up, reg_scale);
    std::vector<torch::Tensor> out_boxes, out_logits, out_corners;
    torch::Tensor pre_boxes, pre_logits, ref_initial, output_detach, corners_undetach;
    auto ref_detach = torch::sigmoid(ref_unact);
    auto output = target;
    torch::Tensor pos;
    for (int64_t i = 0; i < o_.num_layers; ++i) {
      if (i == 0 || o_.query_pos_per_layer) pos = query_pos_head->forward(ref_detach).clamp(-10, 10);
      output = decoder->layer(i).forward(output, ref_detach.unsqueeze(2), value, sel.shapes, attn_mask, pos);
      if (i == 0) {
        pre_boxes = torch::sigmoid(pre_bbox_head->forward(output) + inverse_sigmoid(ref_detach));
        if (training) pre_logits = linear(*score_head(0), output);  // pre_outputs: read by the loss only
        ref_initial = pre_boxes.detach();
      }
      auto corners = bbox_head(i)->forward(output_detach.defined() ? output + output_detach : output);
      if (corners_undetach.defined()) corners = corners + corners_undetach;
      auto inter = distance2bbox(ref_initial, integral(corners, project, o_.reg_max), reg_scale);
      if (training || i == eval_idx) {
        out_logits.push_back(decoder->lqe(i).forward(linear(*score_head(i), output), corners));
        out_boxes.push_back(inter);
        out_corners.push_back(corners);
        if (!training) break;
      }
      corners_undetach = corners;
      ref_detach = inter.detach();
      output_detach = output.detach();
    }

    const int64_t ndn = sel.dn ? sel.dn->meta.num_denoising : 0;
    auto match = [&](const torch::Tensor& t) { return t.narrow(1, ndn, t.size(1) - ndn); };
    auto dnpart = [&](const torch::Tensor& t) { return t.narrow(1, 0, ndn); };
    out.pred_logits = match(out_logits.back());
    out.pred_boxes = match(out_boxes.back());
    if (!training) return out;
    out.reg_max = o_.reg_max;
    out.up = up;
    out.reg_scale = reg_scale;
    out.pred_corners = match(out_corners.back());
    out.ref_points = match(ref_initial);
    const auto L = out_logits.size();
    for (size_t i = 0; i + 1 < L; ++i)
      out.aux_outputs.push_back({match(out_logits[i]), match(out_boxes[i]), match(out_corners[i]), out.ref_points, out.pred_corners, out.pred_logits});
    out.pre_outputs = {match(pre_logits), match(pre_boxes)};
    if (sel.dn) {
      auto dn_ref = dnpart(ref_initial);
      for (size_t i = 0; i < L; ++i) out.dn_outputs.push_back({dnpart(out_logits[i]), dnpart(out_boxes[i]), dnpart(out_corners[i]), dn_ref, {}, {}});
      for (auto& a : out.dn_outputs) {  // the teacher: the last layer's denoising part (the same tensors)
        a.teacher_corners = out.dn_outputs.back().pred_corners;
        a.teacher_logits = out.dn_outputs.back().pred_logits;
      }
      out.dn_pre_outputs = {dnpart(pre_logits), dnpart(pre_boxes)};
      out.dn_meta = sel.dn->meta;
    }
    return out;
  }

  torch::Tensor up, reg_scale;
  DFineDecoderStack decoder{nullptr};
  MLP pre_bbox_head{nullptr};

 private:
  // The core's initialisation (nn/detr/decoder_core.hpp), pre_bbox_head's last layer zero, then xavier on
  // the convs projecting the encoder maps (not on the extra strided levels').
  void reset_parameters() {
    init_selection_heads();
    torch::NoGradGuard ng;
    torch::nn::init::zeros_(pre_bbox_head->layer(2)->weight);
    torch::nn::init::zeros_(pre_bbox_head->layer(2)->bias);
    for (size_t i = 0; i < input_proj->size(); ++i)
      if (auto* s = input_proj[i]->as<torch::nn::SequentialImpl>())
        if (i < o_.feat_channels.size()) torch::nn::init::xavier_uniform_(s->ptr(0)->as<torch::nn::Conv2dImpl>()->weight);
  }
};
TORCH_MODULE(DFineDecoder);

// The captured chain of a D-FINE-line network (backbone + encoder; families/dfine, families/ec,
// families/deimv2 with its encoder type-erased), owning no
// modules of its own: it registers the network's backbone and encoder again so that capture sees exactly
// their parameters and buffers.
template <class Backbone, class Encoder>
struct EncoderChainImpl : torch::nn::Module {
  EncoderChainImpl(Backbone b, Encoder e) {
    backbone = register_module("backbone", std::move(b));
    encoder = register_module("encoder", std::move(e));
  }
  Backbone backbone{nullptr};
  Encoder encoder{nullptr};
};

// A D-FINE-line network's decode(feats): the features with the decoder to run (training: the family's
// loss runs it with the batch's targets), or run at once (eval); input_hw from the first map's stride.
inline DFineNetOutput dfine_decode(const DFineDecoder& decoder, const std::vector<torch::Tensor>& feats, int64_t first_stride) {
  DFineNetOutput out;
  out.features = feats;
  const auto impl = decoder.ptr();
  out.decoder = [impl](const std::vector<torch::Tensor>& f, const PaddedTargets* t, bool fixed) { return impl->forward(f, t, fixed); };
  out.input_hw = {feats.front().size(2) * first_stride, feats.front().size(3) * first_stride};
  if (!impl->is_training()) out.result = impl->forward(feats);
  return out;
}

}  // namespace libreyolo::nn::detr
