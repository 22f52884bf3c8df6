#pragma once
// What the D-FINE decoder (nn/detr/dfine_decoder.hpp; D-FINE, DEIM and RT-DETRv4 share it) returns: the
// C++ form of the original's output dict (models/dfine/decoder.py, DFINETransformer.forward).
//
// Notation: B = batch, Q = num_queries (300; fewer when the maps hold fewer tokens), C = num_classes,
// R = reg_max (32), so every box edge is a distribution over R + 1 bins; L = num_layers (3 for n and s),
// D = the denoising queries of the batch (DenoisingMeta::num_denoising = 2 * max_gt * num_group).
// Boxes are cx, cy, w, h normalised to [0, 1]; logits are before the sigmoid. Tensors keep the dtype the
// decoder ran in (float32, or float16/bfloat16 under autocast for parts of it).
//
// Eval mode: pred_logits and pred_boxes only (the eval_idx layer, the last one), `training` false, every
// other field empty/undefined.
// Training mode: every field below is set; dn_* only when the batch holds at least one box (denoising
// queries exist), otherwise dn_outputs is empty, dn_pre_outputs undefined and dn_meta nullopt.
#include <libreyolo/nn/detr/denoising.hpp>

#include <torch/torch.h>

#include <array>
#include <functional>
#include <optional>
#include <vector>

namespace libreyolo::nn::detr {

// A plain prediction set: {"pred_logits", "pred_boxes"} (enc_aux_outputs' entries, pre_outputs,
// dn_pre_outputs).
struct DFineBoxes {
  torch::Tensor pred_logits;  // [B, N, C]
  torch::Tensor pred_boxes;   // [B, N, 4]
  bool defined() const { return pred_logits.defined(); }
};

// One decoder layer's prediction with its edge distributions (the entries of aux_outputs and dn_outputs,
// the original's _set_aux_loss2).
struct DFineLayerOutput {
  torch::Tensor pred_logits;      // [B, N, C] the layer's class logits (after its LQE quality term)
  torch::Tensor pred_boxes;       // [B, N, 4] distance2bbox(ref_points, integral(pred_corners, W), reg_scale)
  torch::Tensor pred_corners;     // [B, N, 4 * (R + 1)] per-edge bin logits (l, t, r, b blocks of R + 1);
                                  //   accumulated over layers: layer i's = its head output + layer i-1's
  torch::Tensor ref_points;       // [B, N, 4] the boxes the distances are measured from: layer 0's
                                  //   pre_outputs boxes, detached (the same tensor for every layer)
  torch::Tensor teacher_corners;  // [B, N, 4 * (R + 1)] the last layer's pred_corners (DDF's teacher; the
                                  //   same tensor in every entry; not detached, as the original)
  torch::Tensor teacher_logits;   // [B, N, C] the last layer's pred_logits (same in every entry)
};

struct DFineOutput {
  bool training = false;
  // ---- both modes: the last (eval_idx) layer, matching queries only (N = Q) -------------------------
  torch::Tensor pred_logits;   // [B, Q, C]
  torch::Tensor pred_boxes;    // [B, Q, 4]
  // ---- training only -------------------------------------------------------------------------------
  torch::Tensor pred_corners;  // [B, Q, 4 * (R + 1)] the last layer's corners ("pred_corners")
  torch::Tensor ref_points;    // [B, Q, 4] the last layer's reference boxes ("ref_points")
  torch::Tensor up;            // [1] the decoder's `up` (W's upper-bound factor, 0.5; no gradient)
  torch::Tensor reg_scale;     // [1] the decoder's `reg_scale` (W's curvature, 4; no gradient)
  int64_t reg_max = 32;        // R (the bins per edge are R + 1)
  // aux_outputs: layers 0 .. L-2, N = Q, teacher = the last layer (out_corners[-1], out_logits[-1]).
  std::vector<DFineLayerOutput> aux_outputs;
  // pre_outputs: the first layer's pre-refinement prediction (pre_bbox_head on layer 0's output +
  // the selected encoder boxes; score_head[0]), N = Q.
  DFineBoxes pre_outputs;
  // enc_aux_outputs: the encoder's top-Q proposals (enc_score_head logits gathered, sigmoid of
  // enc_bbox_head + anchors), one entry. enc_meta's class_agnostic (query_select_method == "agnostic"):
  // false for every config here.
  std::vector<DFineBoxes> enc_aux_outputs;
  bool class_agnostic = false;
  // dn_outputs: every layer 0 .. L-1 on the denoising queries, N = D, teacher = the last layer's
  // denoising part (dn_out_corners[-1], dn_out_logits[-1]).
  std::vector<DFineLayerOutput> dn_outputs;
  // dn_pre_outputs: pre_outputs' denoising part, N = D.
  DFineBoxes dn_pre_outputs;
  // dn_meta: dn_num_split = {num_denoising, num_queries}, dn_num_group = num_group, dn_positive_idx =
  // positive_idx (per image, its positive denoising query indices, CPU int64, group-major).
  std::optional<DenoisingMeta> dn_meta;
};

// The D-FINE-line networks' forward result (families/dfine/network.hpp): in eval mode the decoder has
// run (result set); in training mode the decoder still has to run, with the batch's ground truth for
// its denoising queries, which the network's forward does not see: the family's loss calls
// run(&targets) once (the capture boundary keeps the decoder, whose query count changes per batch, out
// of the CUDA graph). Mirrors rtdetr::RTDETROutput.
struct DFineNetOutput {
  std::vector<torch::Tensor> features;              // the encoder's maps (decoder input)
  std::function<DFineOutput(const std::vector<torch::Tensor>&, const PaddedTargets*, bool)> decoder;
  std::array<int64_t, 2> input_hw{0, 0};            // the network input's height and width (box scale)
  mutable std::optional<DFineOutput> result;

  bool pending() const { return !result.has_value(); }
  // The decoder's output; runs it once (with denoising queries from `targets` when given, training).
  // fixed: the denoising part at its fixed capacity for the targets' M slots (a recorded step's form).
  const DFineOutput& run(const PaddedTargets* targets = nullptr, bool fixed = false) const {
    if (!result) result = decoder(features, targets, fixed);
    return *result;
  }
  // The same for per-image targets (padded on the features' device).
  const DFineOutput& run(const std::vector<DetrTarget>* targets) const {
    if (result || !targets) return run();
    const auto t = pad_targets(*targets, features.front().device());
    return run(&t);
  }
};

}  // namespace libreyolo::nn::detr
