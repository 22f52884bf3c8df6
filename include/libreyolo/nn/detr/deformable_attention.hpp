#pragma once
// Multi-scale deformable attention in plain LibTorch ops (bilinear grid_sample per level, as the
// original's PyTorch path deformable_attention_core_func[_v2]). One implementation serves RT-DETR v1
// (num_points per level, offsets scaled by 1 / num_points) and v2 (a `num_points_scale` buffer of
// 1 / n per sampling point, offset_scale 0.5); both sample the same points when every level has the
// same count. A fused kernel can replace ms_deform_attn_core() behind the same interface.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <numbers>
#include <vector>

namespace libreyolo::nn::detr {

using SpatialShapes = std::vector<std::array<int64_t, 2>>;  // (h, w) per level

// value [B, Lv, H, D]; sampling_locations [B, Lq, H, P, 2] in [0, 1] (P = sum of the levels' points,
// level-major); attention_weights [B, Lq, H, P]; points[l] = level l's points. Returns [B, Lq, H*D].
// discrete = RT-DETRv2's method='discrete' (nearest integer cell instead of bilinear sampling).
inline torch::Tensor ms_deform_attn_core(const torch::Tensor& value, const SpatialShapes& shapes, const torch::Tensor& sampling_locations,
                                         const torch::Tensor& attention_weights, const std::vector<int64_t>& points,
                                         bool discrete = false) {
  const int64_t B = value.size(0), H = value.size(2), D = value.size(3), Lq = sampling_locations.size(1);
  std::vector<int64_t> split;
  for (auto& s : shapes) split.push_back(s[0] * s[1]);
  auto values = value.permute({0, 2, 3, 1}).flatten(0, 1).split_with_sizes(split, -1);  // [B*H, D, hw_l]
  auto grids = discrete ? sampling_locations : 2 * sampling_locations - 1;
  auto locs = grids.permute({0, 2, 1, 3, 4}).flatten(0, 1).split_with_sizes(points, -2);  // [B*H, Lq, P_l, 2]
  std::vector<torch::Tensor> sampled;
  for (size_t l = 0; l < shapes.size(); ++l) {
    const int64_t h = shapes[l][0], w = shapes[l][1];
    auto v = values[l].reshape({B * H, D, h, w});
    if (!discrete) {
      // Under autocast grid_sampler runs in float32 (value cast up, as PyTorch's autocast does).
      if (v.scalar_type() != locs[l].scalar_type()) v = v.to(locs[l].scalar_type());
      sampled.push_back(torch::grid_sampler(v, locs[l], /*bilinear*/ 0, /*zeros*/ 0, /*align_corners=*/false));
    } else {
      auto wh = device_pair(static_cast<double>(w), static_cast<double>(h), locs[l].options());
      auto coord = (locs[l] * wh + 0.5).to(torch::kLong).clamp(0, h - 1).reshape({B * H, Lq * points[l], 2});
      auto flat_idx = coord.select(-1, 1) * w + coord.select(-1, 0);                         // [B*H, Lq*P]
      auto g = v.flatten(2).gather(2, flat_idx.unsqueeze(1).expand({B * H, D, Lq * points[l]}));  // [B*H, D, Lq*P]
      sampled.push_back(g.reshape({B * H, D, Lq, points[l]}));
    }
  }
  int64_t P = 0;
  for (auto p : points) P += p;
  auto aw = attention_weights.permute({0, 2, 1, 3}).reshape({B * H, 1, Lq, P});
  auto out = (torch::cat(sampled, -1) * aw).sum(-1).reshape({B, H * D, Lq});
  return out.permute({0, 2, 1});
}

struct MSDeformableAttentionOptions {
  int64_t embed_dim = 256, num_heads = 8, num_levels = 3, num_points = 4;
  bool points_scale_buffer = false;  // v2: register num_points_scale (1 / n per point)
  double offset_scale = 0.5;
  bool discrete = false;             // v2 method='discrete'
};

class MSDeformableAttentionImpl : public torch::nn::Cloneable<MSDeformableAttentionImpl> {
 public:
  explicit MSDeformableAttentionImpl(MSDeformableAttentionOptions o = {}) : o_(o) { reset(); }
  void reset() override {
    const int64_t E = o_.embed_dim, total = o_.num_heads * o_.num_levels * o_.num_points;
    if (E % o_.num_heads != 0)
      throw ConfigError("MSDeformableAttention: embed_dim=" + std::to_string(E) + " is not divisible by num_heads=" + std::to_string(o_.num_heads));
    sampling_offsets = register_module("sampling_offsets", torch::nn::Linear(E, total * 2));
    attention_weights = register_module("attention_weights", torch::nn::Linear(E, total));
    value_proj = register_module("value_proj", torch::nn::Linear(E, E));
    output_proj = register_module("output_proj", torch::nn::Linear(E, E));
    const int64_t P = o_.num_levels * o_.num_points;
    points_scale_ = torch::full({P, 1}, 1.0 / static_cast<double>(o_.num_points));
    points_scale_on_ = points_scale_;
    if (o_.points_scale_buffer) num_points_scale = register_buffer("num_points_scale", torch::full({P}, 1.0f / static_cast<float>(o_.num_points)));
    // The original's _reset_parameters: offsets start on a ring of num_heads directions, scaled 1..P.
    torch::NoGradGuard ng;
    torch::nn::init::zeros_(sampling_offsets->weight);
    auto thetas = torch::arange(o_.num_heads, torch::kFloat32) * (2.0 * std::numbers::pi / static_cast<double>(o_.num_heads));
    auto grid = torch::stack({thetas.cos(), thetas.sin()}, -1);
    grid = grid / std::get<0>(grid.abs().max(-1, true));
    grid = grid.reshape({o_.num_heads, 1, 1, 2}).repeat({1, o_.num_levels, o_.num_points, 1});
    grid *= torch::arange(1, o_.num_points + 1, torch::kFloat32).reshape({1, 1, -1, 1});
    sampling_offsets->bias.copy_(grid.flatten());
    torch::nn::init::zeros_(attention_weights->weight);
    torch::nn::init::zeros_(attention_weights->bias);
    torch::nn::init::xavier_uniform_(value_proj->weight);
    torch::nn::init::zeros_(value_proj->bias);
    torch::nn::init::xavier_uniform_(output_proj->weight);
    torch::nn::init::zeros_(output_proj->bias);
  }

  // query [B, Lq, E]; reference_points [B, Lq, 1 or L, 4] (cx, cy, w, h in [0, 1]); value [B, Lv, E].
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& reference_points, const torch::Tensor& value,
                        const SpatialShapes& shapes) {
    const int64_t B = query.size(0), Lq = query.size(1), Lv = value.size(1), H = o_.num_heads;
    const int64_t P = o_.num_levels * o_.num_points;
    TORCH_CHECK(reference_points.size(-1) == 4, "MSDeformableAttention: reference points must be boxes (last dim 4)");
    auto v = linear(value_proj, value).reshape({B, Lv, H, o_.embed_dim / H});
    auto off = linear(sampling_offsets, query).reshape({B, Lq, H, P, 2});
    auto aw = torch::softmax(linear(attention_weights, query).reshape({B, Lq, H, P}), -1);
    // ref[:, :, None, :, :2] + off * (1 / n) * ref[..., 2:] * offset_scale   (reference levels = 1)
    auto ref = reference_points.reshape({B, Lq, 1, 1, 4});
    auto scale = o_.points_scale_buffer ? num_points_scale.to(query.scalar_type()).unsqueeze(-1) : points_scale(query);
    auto loc = ref.narrow(-1, 0, 2) + off * scale * ref.narrow(-1, 2, 2) * o_.offset_scale;
    const std::vector<int64_t> points(static_cast<size_t>(o_.num_levels), o_.num_points);
    return linear(output_proj, ms_deform_attn_core(v, shapes, loc, aw, points, o_.discrete));
  }

  const MSDeformableAttentionOptions& options() const { return o_; }
  torch::nn::Linear sampling_offsets{nullptr}, attention_weights{nullptr}, value_proj{nullptr}, output_proj{nullptr};
  torch::Tensor num_points_scale;

 private:
  // v1's constant on the query's device and dtype, made once per (device, dtype): not one
  // host-to-device copy per call.
  const torch::Tensor& points_scale(const torch::Tensor& query) {
    if (points_scale_on_.device() != query.device() || points_scale_on_.scalar_type() != query.scalar_type())
      points_scale_on_ = points_scale_.to(query.device(), query.scalar_type());
    return points_scale_on_;
  }
  MSDeformableAttentionOptions o_;
  torch::Tensor points_scale_;     // v1: the constant 1 / num_points (not part of the state dict)
  torch::Tensor points_scale_on_;  // points_scale_ where the queries are
};
TORCH_MODULE(MSDeformableAttention);

}  // namespace libreyolo::nn::detr
