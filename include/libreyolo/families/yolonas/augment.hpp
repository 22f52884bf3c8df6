#pragma once
// The original's YOLO-NAS training pipeline (models/yolonas/transforms.py at c41461e:
// YOLONASAffineMixupDataset + YOLONASTrainTransform, installed by models/yolonas/trainer.py), as a
// DetectAugment::pipeline. Per sample, with S = imgsz:
//
//   1. the image fitted to S (long side S, the dataset's pull_item), its top-left corner at (0, 0): no
//      mosaic (mosaic_prob 0), no centring, no canvas;
//   2. while augmentation is open (the epochs before the last no_aug_epochs; YOLO-NAS's default 0 keeps it
//      open throughout): the original's random_affine straight into S x S, M = [R(angle, scale) + shear |
//      translate] about the ORIGIN, angle ~ U(-degrees, degrees), scale ~ U(1 - scale, 1 + scale) (the
//      original's mosaic_scale (0.5, 1.5)), translation ~ U(-translate, translate) * S (0.25), grey (114)
//      outside the image; boxes: the corners' bounding box clipped to S x S, nothing dropped;
//   3. while open, when the sample has boxes, with p = mixup (0.5): the original's _mixup, the same as
//      YOLOX's (families/yolox/augment.hpp mixup_partner: a partner with boxes letterboxed top-left,
//      jittered by U(0.5, 1.5), mirrored with p 1/2, black beyond its canvas, cropped at a random offset),
//      averaged 0.5 / 0.5, its boxes appended unfiltered;
//   4. YOLONASTrainTransform, only when there are boxes: HSV (p = hsv_prob, 0.5; additive 5/30/30) over the
//      whole S x S image, then a left-right flip (p = fliplr), boxes kept when both sides exceed 1 pixel;
//      when none survives, the sample of step 3 (before HSV and flip) with its boxes as they were.
//
// Deliberate differences: pixel centres at +0.5 in the warps (OpenCV takes them at integers); the mixup
// partner comes from the dataset's partner() (near the sample in the shuffled epoch order) rather than a
// uniform index; once augmentation closes (no_aug_epochs > 0 set by the user) HSV also covers the grey
// padding, where the original jitters the image before padding it; targets are padded to the batch's
// largest count rather than truncated at max_labels (100).
#include <libreyolo/core/config.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/rng.hpp>
#include <libreyolo/families/yolox/augment.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <random>

namespace libreyolo::families::yolonas {

// Whether the affine and mixup of step 2-3 run in `epoch`: the original's enable_affine / enable_mixup
// until close_mosaic (no_aug_epochs before the end). Not DetectDataset::mosaic_on: mosaic is 0 here.
inline bool affine_open(const data::DetectAugment& a, int epoch) {
  return a.train && epoch < a.epochs - a.no_aug_epochs;
}

// One training sample (header comment). `o` holds the affine scale range (mosaic_scale_*) and mixup's.
inline torch::Tensor affine_mixup_sample(const data::DetectDataset& ds, const yolox::MosaicMixupOptions& o, size_t i,
                                         std::mt19937_64& rng, int epoch, int out, data::DetBoxes& boxes, size_t& used) {
  const auto& a = ds.augment();
  const int S = a.imgsz;
  const double k = static_cast<double>(out) / S;  // output pixels per S pixel (1 without multi-scale)
  const auto t = ds.load_tile(i);
  used = t.index;
  const bool open = affine_open(a, epoch);
  data::Mat3 M = data::kIdentity3;
  if (open) M = yolox::original_affine_matrix(S, S, a.degrees, a.translate, o.mosaic_scale_lo, o.mosaic_scale_hi, a.shear, rng);
  if (out != S)
    for (int q = 0; q < 6; ++q) M[q] *= k;
  const data::WarpTile wt = data::place_tile(*t.img, t.w, t.h, 0, 0, t.w, t.h);
  data::Image img = data::warp_tiles({wt}, M, out, out);
  boxes = yolox::affine_boxes_clipped(ds.pixel_boxes(t.index, t.w, t.h), M, out, out);
  if (open && a.mixup > 0 && !boxes.empty() && data::bernoulli(rng, a.mixup)) {
    data::DetBoxes cp;
    const data::Image partner = yolox::mixup_partner(ds, o, i, rng, epoch, out, cp);
    data::blend_into(img, partner, 0.5);
    boxes.insert(boxes.end(), cp.begin(), cp.end());
  }
  if (boxes.empty()) return data::to_chw_tensor(img);
  torch::Tensor x = yolox::detail::hsv_tensor(img, a, rng);
  data::DetBoxes kept = boxes;
  if (data::bernoulli(rng, a.fliplr)) {
    x = x.flip({2}).contiguous();
    data::flip_boxes_lr(kept, out);
  }
  kept = yolox::keep_boxes_over_1px(kept);
  if (kept.empty()) return data::to_chw_tensor(img);  // the original's fallback: the sample before HSV and flip
  boxes = std::move(kept);
  return x;
}

// The family hook (tasks/detect.hpp adjust_augment): the pipeline above in place of the built-in one. The
// affine scale range is 1 -/+ scale (YOLO-NAS's recipe sets scale=0.5: the original's (0.5, 1.5)).
inline void use_affine_mixup_pipeline(data::DetectAugment& a, const TrainConfig& cfg) {
  data::refuse_unused_augment(a, {"mosaic", "flipud", "perspective"},
                              "YOLO-NAS's training pipeline (the original's: affine, mixup, HSV, left-right flip)");
  yolox::MosaicMixupOptions o;
  o.mosaic_scale_lo = 1 - cfg.scale, o.mosaic_scale_hi = 1 + cfg.scale;
  a.pipeline = [o](const data::DetectDataset& ds, size_t i, std::mt19937_64& rng, int epoch, int out, data::DetBoxes& boxes,
                   size_t& used) { return affine_mixup_sample(ds, o, i, rng, epoch, out, boxes, used); };
}

}  // namespace libreyolo::families::yolonas
