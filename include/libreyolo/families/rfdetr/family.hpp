#pragma once
// RF-DETR (`rfdetr-n`, `rfdetr-s`, `rfdetr-m`, `rfdetr-l`; the original's model_family "rfdetr" is read as
// "rfdetr-", as rtdetr / ec are): the LWDETR network of families/rfdetr/network.hpp (DINOv2-small windowed
// backbone, one-level projector, two-stage deformable decoder, 300 queries x 13 Group-DETR groups in
// training, group 0 in eval) trained with the original's criterion (families/rfdetr/criterion.hpp:
// HungarianMatcher + SetCriterion with IA-BCE, L1 5, GIoU 2 on the last layer, every aux layer and the
// encoder proposals).
//
// Recipe, read from the original at c41461e (libreyolo/models/rfdetr/):
//   config.py RFDETRConfig (also tests/fixtures/libreyolo/rfdetr-<size>/config.json trainer_defaults, equal
//     for every size): epochs 100, batch 4, nbs 16 (accumulate round(16 / batch)), AdamW lr0 1e-4,
//     weight_decay 1e-4, scheduler "step" with lr_drop 100, warmup_epochs 0, EMA 0.993 with tau 100,
//     amp on, clip_max_norm 0.1 (ours: clip_grad_norm), flip_prob 0.5, mosaic / mixup / hsv / degrees /
//     translate / shear 0, multi_scale on with expanded_scales, crop_resize_prob 0.5, workers 0,
//     eval_interval 1, imgsz 640 (TrainConfig's; but model.py's train() passes the size's INPUT_SIZES: ours
//     size_overrides), backbone_lr_mult 0.1 (unread on the detection path: see
//     trainer.py below).
//   trainer.py RFDETRTrainer: create_scheduler -> RFDETRStepScheduler (lr0 x t / int(ipe x warmup) during
//     warm-up, lr0 until int(ipe x lr_drop), then lr0 x 0.1: train/schedule.hpp's `step`);
//     _setup_optimizer -> _setup_upstream_optimizer_groups (the detection path: the backbone has
//     get_named_param_lr_pairs and the model has args), AdamW betas (0.9, 0.999), weight_decay 1e-4 as the
//     optimizer's default for every group without its own;
//     the groups: backbone.0.encoder.* (the DINOv2 ViT; backbone.py Backbone.get_named_param_lr_pairs,
//     get_dinov2_lr_decay_rate, get_dinov2_weight_decay_rate): lr = lr_encoder x lr_vit_layer_decay ^
//     (num_layers + 1 - layer_id) x lr_component_decay ^ 2, with lr_encoder 1.5e-4, lr_vit_layer_decay 0.8,
//     lr_component_decay 0.7 (nn.py _make_args), num_layers = out_feature_indexes[-1] + 1 = 13, layer_id 0
//     for names with "embeddings", i + 1 for ".layer.<i>." (not ".residual."), else 14; weight decay 0
//     for names with gamma / pos_embed / rel_pos / bias / norm / embeddings, else weight_decay;
//     "transformer.decoder" names: lr0 x lr_component_decay (0.7), weight decay 1e-4; every other
//     parameter (projector, heads, queries, encoder-output layers, their norms and biases too): lr0,
//     weight decay 1e-4. Each group's lr follows the schedule times lr_mult = its lr / lr0 (_scale_lr),
//     so the encoder's absolute lr_encoder stays 1.5e-4 x decay whatever lr0 is.
//     create_transforms -> RFDETRDetTransform (seg_transforms.py RFDETRSegTransform, detection): a
//     left-right flip (p flip_prob), then with p crop_resize_prob (when the image has boxes) a resize of
//     the shortest side to one of 400 / 500 / 600 and a random square crop of side in [min(384, m),
//     m = min(600, h, w)], boxes clipped to it; then a stretch to the square canvas; boxes of width or
//     height <= 1 px dropped; ImageNet normalisation (ours: inside the network). The canvas is the largest
//     of compute_multi_scale_scales(imgsz, expanded, patch 16, num_windows 2) and _apply_multi_scale_batch
//     resizes each batch to a uniform choice of those scales ((imgsz / 32 + k) x 32, k = -5..5, >= 64: 480
//     .. 800 for imgsz 640); ours renders each batch at its drawn size directly (as the D-FINE line's note).
//     on_forward: targets as cx cy w h / input size, clamped to [0, 1], rows of zero width or height
//     dropped; the total is sum(loss x weight) over the criterion's weight dict.
//   validation/preprocessors.py RFDETRValPreprocessor: a plain resize to the square (val_resize=stretch,
//     io/original-inl.hpp), ImageNet normalisation.
// Differences: the original resizes the source image, ours the image loaded at long side imgsz (the data
// layer's cache); decode keeps the num_classes real logits (the original's top-k also runs over the extra
// "no object" column, whose detections match no class).
#include <libreyolo/capture/graphed_callable.hpp>
#include <libreyolo/capture/step_graph.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/image_ops.hpp>
#include <libreyolo/data/rng.hpp>
#include <libreyolo/families/rfdetr/criterion.hpp>
#include <libreyolo/families/rfdetr/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/device_targets.hpp>
#include <libreyolo/nn/detr/topk_decode.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace libreyolo {

namespace families::rfdetr {

// The layer-wise learning rates of the original's _make_args (nn.py) and backbone.py.
inline constexpr double kLrEncoder = 1.5e-4;
inline constexpr double kLrVitLayerDecay = 0.8;
inline constexpr double kLrComponentDecay = 0.7;
inline constexpr int kVitNumLayers = static_cast<int>(kOutFeatureIndexes.back()) + 1;  // 13
inline constexpr double kCropResizeProb = 0.5;                                        // RFDETRConfig.crop_resize_prob

// get_dinov2_lr_decay_rate: decay ^ (num_layers + 1 - layer_id).
inline double dinov2_lr_decay_rate(const std::string& name, double decay = kLrVitLayerDecay, int num_layers = kVitNumLayers) {
  int layer_id = num_layers + 1;
  if (name.rfind("backbone", 0) == 0) {
    if (name.find("embeddings") != std::string::npos) {
      layer_id = 0;
    } else if (const auto at = name.find(".layer."); at != std::string::npos && name.find(".residual.") == std::string::npos) {
      const auto from = at + 7, to = name.find('.', from);
      layer_id = std::stoi(name.substr(from, to == std::string::npos ? std::string::npos : to - from)) + 1;
    }
  }
  return std::pow(decay, num_layers + 1 - layer_id);
}
// get_dinov2_weight_decay_rate == 0.
inline bool dinov2_no_weight_decay(const std::string& name) {
  for (const char* k : {"gamma", "pos_embed", "rel_pos", "bias", "norm", "embeddings"})
    if (name.find(k) != std::string::npos) return true;
  return false;
}

// compute_multi_scale_scales(resolution, expanded_scales, patch 16, num_windows 2).
inline std::vector<int> multi_scale_scales(int imgsz, bool expanded = true) {
  const int divisor = static_cast<int>(kPatch * kNumWindows), base = imgsz / divisor;
  std::vector<int> out;
  const std::vector<int> offsets = expanded ? std::vector<int>{-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5}
                                            : std::vector<int>{-3, -2, -1, 0, 1, 2, 3, 4};
  for (int o : offsets)
    if ((base + o) * divisor >= divisor * 2) out.push_back((base + o) * divisor);
  return out;
}

// One training sample as RFDETRDetTransform makes it (header comment), rendered at out x out.
inline torch::Tensor train_sample(const data::DetectDataset& ds, size_t i, std::mt19937_64& rng, int out, data::DetBoxes& boxes,
                                  size_t& used, double crop_resize_prob) {
  const auto& a = ds.augment();
  const auto loaded = ds.load(i, &used);
  boxes = ds.pixel_boxes(used, loaded->w, loaded->h);
  data::Image img = *loaded;
  if (data::bernoulli(rng, a.fliplr)) {
    data::flip_lr(img);
    data::flip_boxes_lr(boxes, img.w);
  }
  if (!boxes.empty() && crop_resize_prob > 0 && data::bernoulli(rng, crop_resize_prob)) {
    static constexpr std::array<int, 3> kIntermediate{400, 500, 600};
    const int side = kIntermediate[static_cast<size_t>(data::randint(rng, 0, 2))];
    const double s = static_cast<double>(side) / std::max(1, std::min(img.h, img.w));
    const int nw = std::max(1, static_cast<int>(std::nearbyint(img.w * s))), nh = std::max(1, static_cast<int>(std::nearbyint(img.h * s)));
    img = data::resize_bilinear(img, nh, nw);
    for (auto& b : boxes) {
      b.x1 = static_cast<float>(b.x1 * s), b.x2 = static_cast<float>(b.x2 * s);
      b.y1 = static_cast<float>(b.y1 * s), b.y2 = static_cast<float>(b.y2 * s);
    }
    const int max_crop = std::min({600, nh, nw}), min_crop = std::min(384, max_crop);
    if (max_crop >= 2) {
      const int c = static_cast<int>(data::randint(rng, min_crop, max_crop));
      const int top = static_cast<int>(data::randint(rng, 0, std::max(0, nh - c)));
      const int left = static_cast<int>(data::randint(rng, 0, std::max(0, nw - c)));
      img = data::crop(img, top, left, c, c);
      const float fc = static_cast<float>(c);
      for (auto& b : boxes) {
        b.x1 = std::clamp(b.x1 - left, 0.f, fc), b.x2 = std::clamp(b.x2 - left, 0.f, fc);
        b.y1 = std::clamp(b.y1 - top, 0.f, fc), b.y2 = std::clamp(b.y2 - top, 0.f, fc);
      }
    }
  }
  img = a.stretch ? data::stretch_resize(img, out, out, boxes) : data::letterbox(img, out, out, boxes);
  data::DetBoxes kept;
  for (const auto& b : boxes)
    if (b.x2 - b.x1 > 1 && b.y2 - b.y1 > 1) kept.push_back(b);
  boxes = std::move(kept);
  return data::to_chw_tensor(img);
}

// The batch's boxes as the original's targets (on_forward): cx cy w h over the input size, clamped to [0, 1].
inline auto normalized_cxcywh(const data::DetectBatch& b) {
  const double H = static_cast<double>(b.images.size(2)), W = static_cast<double>(b.images.size(3));
  return [H, W](const torch::Tensor& x1, const torch::Tensor& y1, const torch::Tensor& x2, const torch::Tensor& y2) {
    return torch::stack({(x1 / W + x2 / W) / 2, (y1 / H + y2 / H) / 2, x2 / W - x1 / W, y2 / H - y1 / H}, 1).clamp(0.0, 1.0);
  };
}

}  // namespace families::rfdetr

// The whole network's training output as the capture's flat tensor list (capture_region = network):
// pred_logits, pred_boxes, the encoder proposals' logits and boxes, then each aux layer's logits and boxes.
// The layer count is fixed per size, the query rows per mode (13 x 300 in training), so the list's length
// is fixed for a run. input_hw is not a tensor and comes back {0, 0}: a graph replays the training forward
// only, whose loss reads the batch's own size (RFDETRFamily::loss), never input_hw.
namespace capture {
template <>
struct OutputCodec<families::rfdetr::RFDETROutput> {
  static std::vector<torch::Tensor> flatten(const families::rfdetr::RFDETROutput& o) {
    std::vector<torch::Tensor> v{o.pred_logits, o.pred_boxes, o.enc_outputs.pred_logits, o.enc_outputs.pred_boxes};
    for (const auto& a : o.aux_outputs) v.insert(v.end(), {a.pred_logits, a.pred_boxes});
    return v;
  }
  static families::rfdetr::RFDETROutput unflatten(std::vector<torch::Tensor> v) {
    if (v.size() < 4 || v.size() % 2 != 0)
      throw Error("capture: RF-DETR's network output came back as " + std::to_string(v.size()) + " tensors (4 + 2 per aux layer expected)");
    families::rfdetr::RFDETROutput o;
    o.pred_logits = std::move(v[0]), o.pred_boxes = std::move(v[1]);
    o.enc_outputs = {std::move(v[2]), std::move(v[3])};
    for (size_t i = 4; i < v.size(); i += 2) o.aux_outputs.push_back({std::move(v[i]), std::move(v[i + 1])});
    return o;
  }
};
}  // namespace capture

class RFDETRFamily : public tasks::DetectTask<RFDETRFamily> {
  using Base = tasks::DetectTask<RFDETRFamily>;

 public:
  using Batch = typename Base::Batch;
  static constexpr std::string_view name = "rfdetr-";
  static constexpr std::array<std::string_view, 4> sizes{"n", "s", "m", "l"};
  struct traits : family_defaults {
    using members = member::list<member::param_groups, member::optimizer_options, member::size_overrides, member::segmented_step>;
    static constexpr bool step_capturable = true;    // in two parts (member::segmented_step)
    static constexpr bool amp_default = true;        // RFDETRConfig.amp
    static constexpr bool multi_scale_default = true;  // RFDETRConfig.multi_scale
    // The original graphs RF-DETR's whole network (its training CUDA-graph table), not backbone + encoder: the
    // two-stage selection is a fixed top-k and Group DETR's query count is fixed per run, so one training
    // forward has one shape per input size. What varies between batches is the multi-scale size (11 sizes
    // for imgsz 640): the graph is recorded at the first size seen cuda_graph_warmup times, and batches of
    // the other sizes run eager (capture/cuda_graph.hpp region_forward).
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<std::string_view, 27> overrides{
        "optimizer=AdamW", "lr0=0.0001",      "weight_decay=0.0001", "scheduler=step",  "lr_drop=100",
        "warmup_epochs=0", "warmup_lr_start=0.000001", "min_lr_ratio=0", "no_aug_epochs=0", "ema_decay=0.993",
        "ema_tau=100",     "nbs=16",          "clip_grad_norm=0.1",  "epochs=100",      "batch=4",
        "workers=0",       "eval_interval=1", "mosaic=0",            "mixup=0",         "hsv_prob=0",
        "fliplr=0.5",      "degrees=0",       "translate=0",         "shear=0",         "multi_scale=true",
        "train_resize=stretch", "imgsz=640"};
    static constexpr std::string_view fixture_prefix = "rfdetr-";
  };
  using Network = families::rfdetr::RFDETR;

  explicit RFDETRFamily(std::string size = "n") : Base(std::move(size)) { families::require_size<RFDETRFamily>(this->size_); }

  // The size's training resolution: LibreRFDETR.train() passes imgsz=self.input_size when none is given
  // (models/rfdetr/model.py:1277, INPUT_SIZES :172: n 384, s 512, m 576, l 704), so RFDETRConfig's imgsz 640
  // is not what a from-scratch run of the original trains at.
  std::vector<std::string> size_overrides() const {
    return {"imgsz=" + std::to_string(families::rfdetr::rfdetr_size(this->size_)->resolution)};
  }

  Network make_network() const { return Network(families::rfdetr::RFDETROptions{this->size_, this->num_classes()}); }

  // RFDETRDetTransform in place of the generic pipeline, at one of the original's multi-scale sizes per batch.
  static void adjust_augment(data::DetectAugment& a, const TrainConfig&, const std::string&) {
    data::refuse_unused_augment(a, {"mosaic", "mixup", "flipud", "hsv_prob", "perspective"},
                                "RF-DETR's training pipeline (the original's RFDETRDetTransform: left-right flip, resize-and-crop, "
                                "stretch)");
    a.can_stretch = true;
    a.stride = static_cast<int>(families::rfdetr::kPatch * families::rfdetr::kNumWindows);
    a.multi_scale_sizes = families::rfdetr::multi_scale_scales(a.imgsz);
    if (a.multi_scale_sizes.empty()) a.multi_scale_sizes = {a.imgsz};
    a.pipeline = [](const data::DetectDataset& ds, size_t i, std::mt19937_64& rng, int, int out, data::DetBoxes& boxes, size_t& used) {
      return families::rfdetr::train_sample(ds, i, rng, out, boxes, used, families::rfdetr::kCropResizeProb);
    };
  }

  void setup(const TrainConfig& cfg) {
    if (cfg.imgsz % static_cast<int>(families::rfdetr::kPatch * families::rfdetr::kNumWindows) != 0)
      throw ConfigError("imgsz=" + std::to_string(cfg.imgsz) + ": RF-DETR needs a multiple of 32 (patch 16 x 2 windows)");
    Base::setup(cfg);
    lr0_ = cfg.lr0;
    weight_decay_ = cfg.weight_decay;
  }

  // The set loss over all groups (training) or group 0 (a network in eval mode).
  train::LossOutput loss(const families::rfdetr::RFDETROutput& out, const Batch& b) {
    const auto targets = nn::detr::detr_targets_of(b.boxes, out.pred_logits.device(), families::rfdetr::normalized_cxcywh(b));
    return components(criterion()(out, targets, training_output(out)));
  }
  // cuda_graph=step (issue 44; member::segmented_step): part A's end the batch's targets as fixed [B, M] slots
  // made on the device and every matched output's costs (the criterion's fixed-slot form: each (image, group)
  // one image of the matching); the host solves them; part B the loss from the solve's slots. The network runs
  // whole in part A (no decoder to defer: Group DETR has no denoising part), so a batch's loss this way equals
  // loss(out, b) up to the order of the box terms' sums (tests/step/test_step.cpp).
  capture::Segment match_segment(const families::rfdetr::RFDETROutput& out, const Batch& b) {
    using C = families::rfdetr::RFDETRCriterion;
    const auto& c = criterion();
    segment_targets_ = nn::detr::padded_targets_of(b.targets, nn::detr::valid_counts(b.boxes, b.targets.size(1)),
                                                   families::rfdetr::normalized_cxcywh(b));
    const bool training = training_output(out);
    const auto layout = C::cost_layout(out, static_cast<int64_t>(segment_targets_.counts.size()), segment_targets_.M,
                                       training ? c.options().group_detr : 1);
    const bool pinned = segment_targets_.labels.is_cuda();
    return {c.match_costs(out, segment_targets_, training),
            [layout, pinned](const torch::Tensor& host) { return C::solve(host, layout, pinned); }};
  }
  train::LossOutput loss_given(const families::rfdetr::RFDETROutput& out, const Batch& /*b*/, const torch::Tensor& given) {
    auto l = criterion()(out, segment_targets_, training_output(out), given);
    segment_targets_ = {};
    return components(l);
  }
  static std::vector<std::string> loss_names() { return {"ce", "bbox", "giou"}; }

  // NMS-free decode (lwdetr.py PostProcess: sigmoid, top-k over queries x classes), over the real classes.
  std::vector<torch::Tensor> decode(const families::rfdetr::RFDETROutput& out, const tasks::DecodeOptions& o) const {
    const auto logits = out.pred_logits.narrow(-1, 0, this->num_classes());
    return nn::detr::topk_decode(logits, out.pred_boxes, out.input_hw[0], out.input_hw[1], o.conf, o.max_det, nn::detr::box_cxcywh_to_xyxy);
  }

  // The original's detection groups (header comment): every parameter outside the ViT at lr0 with weight
  // decay, the decoder at lr0 x 0.7 with weight decay, the ViT per (layer, decay or not). `weight_decay`
  // (the trainer's, scaled by nbs) is replaced by the configured one: the original does not scale it.
  std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) const {
    namespace r = families::rfdetr;
    const double wd = weight_decay_ >= 0 ? weight_decay_ : weight_decay;
    const double lr0 = lr0_ > 0 ? lr0_ : 1e-4;
    std::vector<train::ParamGroup> g{{"decay", {}, wd, 0, 1.0}, {"decoder", {}, wd, 0, r::kLrComponentDecay}};
    std::map<std::pair<int, bool>, size_t> vit;  // (exponent, no decay) -> group
    std::unordered_set<const void*> seen;
    for (const auto& p : net.named_parameters()) {
      if (!p.value().requires_grad() || !seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
      const std::string& k = p.key();
      if (k.find("backbone.0.encoder") != std::string::npos) {
        const double rate = r::dinov2_lr_decay_rate(k);
        const int expo = static_cast<int>(std::lround(std::log(rate) / std::log(r::kLrVitLayerDecay)));
        const bool no_wd = r::dinov2_no_weight_decay(k);
        auto [it, fresh] = vit.try_emplace({expo, no_wd}, g.size());
        if (fresh)
          g.push_back({"vit_l" + std::to_string(r::kVitNumLayers + 1 - expo) + (no_wd ? "_no_decay" : ""), {}, no_wd ? 0.0 : wd, 0,
                       r::kLrEncoder / lr0 * rate * r::kLrComponentDecay * r::kLrComponentDecay});
        g[it->second].params.push_back(p.value());
      } else if (k.find("transformer.decoder") != std::string::npos) {
        g[1].params.push_back(p.value());
      } else {
        g[0].params.push_back(p.value());
      }
    }
    return g;
  }
  // AdamW with the original's betas (0.9, 0.999).
  static void optimizer_options(train::OptimizerOptions& o, const TrainConfig&) {
    if (config_detail::lower(o.name) == "adamw") o.momentum = 0.9;
  }

  // Loading the original's .pt checkpoints: its state-dict names (LWDETR's) equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

 private:
  families::rfdetr::RFDETRCriterion& criterion() {
    if (!criterion_)
      criterion_ = std::make_unique<families::rfdetr::RFDETRCriterion>(
          families::rfdetr::RFDETRCriterion::for_network(families::rfdetr::RFDETROptions{this->size_, this->num_classes()}));
    return *criterion_;
  }
  // The training forward's output (13 x 300 queries): every group matched; a network in eval mode gives group 0.
  bool training_output(const families::rfdetr::RFDETROutput& out) {
    return out.pred_logits.size(1) > 300 && criterion().options().group_detr > 1;
  }
  // The total and the logged components: the original's get_loss_components (each family of keys summed, unweighted).
  static train::LossOutput components(const families::rfdetr::RFDETRLosses& l) {
    const auto sum_of = [&](const std::string& p) {
      torch::Tensor s = torch::zeros({}, l.total.options());
      for (const auto& [k, v] : l.terms)
        if (k == p || k.rfind(p + "_", 0) == 0) s = s + v.detach().to(s.scalar_type());
      return s;
    };
    return {l.total, torch::stack({sum_of("loss_ce"), sum_of("loss_bbox"), sum_of("loss_giou")})};
  }

  std::unique_ptr<families::rfdetr::RFDETRCriterion> criterion_;
  nn::detr::PaddedTargets segment_targets_;  // part A's, read by part B
  double lr0_ = -1, weight_decay_ = -1;
};

}  // namespace libreyolo
