#pragma once
// The YOLOX family: t and s on the detection task. CSPDarknet + PAFPN + decoupled head (network.hpp),
// SimOTA + IoU / objectness / class BCE losses and the L1 loss that joins when mosaic closes (loss.hpp),
// the original's recipe (its YOLOXConfig, fixtures/libreyolo/yolox-t/config.json) and the whole network
// as the capture region (its loss is fixed-shape, but its whole-step recording is off: see traits).
// When the L1 loss turns on (epoch epochs - no_aug_epochs, as the original's on_mosaic_disable) the family
// tells the capture policy once, which drops its graphs (the network graph and every step graph, recorded
// without the L1 term) and re-captures when the shape is stable again (SPEC §2.3).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/yolox/augment.hpp>
#include <libreyolo/families/yolox/loss.hpp>
#include <libreyolo/families/yolox/network.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/events.hpp>
#include <libreyolo/train/family.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <string_view>

namespace libreyolo {

class YoloxFamily : public tasks::DetectTask<YoloxFamily> {
 public:
  static constexpr std::string_view name = "yolox";
  // The original pads right and below (training/augment.py preproc, YOLOXValPreprocessor, predict).
  static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::top_left;
  // t first: the family's default (model=yolox) and the conformance kit's size, as before the others came.
  static constexpr std::array<std::string_view, 6> sizes{"t", "s", "n", "m", "l", "x"};
  struct traits : family_defaults {
    using members = member::list<member::epoch_hook>;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    // Its loss (SimOTA on padded targets, masks instead of boolean indexing, tensor normalisers) has fixed
    // shapes and reads nothing back, and on the CPU the step path equals eager (tests/step). On the H200
    // (session 10) the first whole-step recording fell back: the IoU loss's prod(-1) backward reads a
    // zero test back to the host; loss.hpp now multiplies the two sides (prod2). The L1 switch drops
    // every graph (capture.invalidate in on(epoch_begin) below).
    static constexpr bool step_capturable = true;
    // The original's YOLOXConfig over SPEC §3: SGD momentum 0.9 (nesterov, lr0 0.01, wd 5e-4 as the
    // defaults), yoloxwarmcos with 5 warm-up epochs from 0 and min_lr_ratio 0.05, no_aug_epochs 15, EMA
    // 0.9998, 4 workers (defaults); validation every 10 epochs; its MosaicMixupDataset (augment.hpp, the
    // family's own pipeline): random affine with degrees 10, translate 0.1, shear 2 and mosaic scale
    // (0.1, 2.0) — the pipeline draws that range itself; scale= set by the user gives 1 ± scale —, its
    // mixup with probability 1, flips 0.5, and YOLOX's additive HSV jitter (gains 5, 30, 30, each channel
    // with probability 1/2).
    static constexpr std::array<std::string_view, 10> overrides{
        "momentum=0.9", "eval_interval=10", "mixup=1.0", "degrees=10", "shear=2", "scale=0.9",
        "hsv_mode=add", "hsv_h=5", "hsv_s=30", "hsv_v=30"};
    static constexpr std::string_view fixture_prefix = "yolox-";
  };
  using Network = families::yolox::Yolox;

  explicit YoloxFamily(std::string size = "s") : DetectTask(std::move(size)) {
    families::require_size<YoloxFamily>(size_);
  }

  Network make_network() const { return Network(families::yolox::YoloxOptions{size_, num_classes()}); }

  // The original feeds 0..255 BGR (cv2 images, no normalisation): the same here, so its checkpoints
  // predict and validate as they do there.
  static torch::Tensor from_pixels(const torch::Tensor& rgb255) { return rgb255.flip({1}); }

  train::LossOutput loss(const std::vector<torch::Tensor>& feats, const Batch& b) {
    if (!loss_) loss_ = std::make_unique<families::yolox::YoloxLoss>(strides(), num_classes());
    loss_->use_l1 = use_l1_;
    auto out = (*loss_)(feats, b.targets);
    return {out.total, out.items};
  }
  static std::vector<std::string> loss_names() { return {"iou", "obj", "cls", "l1"}; }

  // Mosaic closes for the last no_aug_epochs epochs; from then on the L1 loss is on (the original's
  // on_mosaic_disable, also when resuming past that epoch). The capture policy hears of it once.
  template <class Capture>
  void on(event::epoch_begin, const EpochInfo& info, const TrainConfig& cfg, train::EpochContext<Capture>& ctx) {
    const bool closed = cfg.no_aug_epochs > 0 && info.epoch >= cfg.epochs - cfg.no_aug_epochs;
    if (closed && !use_l1_) {
      use_l1_ = true;
      log::info("yolox: mosaic closed for the last ", cfg.no_aug_epochs, " epoch(s) (from epoch ",
                cfg.epochs - cfg.no_aug_epochs + 1, "): L1 loss on");
      ctx.capture.invalidate("yolox L1 loss on");
    }
  }
  bool use_l1() const { return use_l1_; }

  // Raw head maps -> [B, A, 4 + nc]: xyxy boxes in input pixels, then sigmoid(obj) · sigmoid(cls).
  static torch::Tensor decode_predictions(const std::vector<torch::Tensor>& feats) {
    std::vector<torch::Tensor> f32;
    for (const auto& f : feats) f32.push_back(f.to(torch::kFloat32));
    auto rows = families::yolox::flatten_levels(f32);
    auto [grid, stride] = families::yolox::grids_of(f32, strides());
    auto c = families::yolox::decode_boxes(rows, grid, stride);
    auto half = c.narrow(-1, 2, 2) / 2;
    auto xyxy = torch::cat({c.narrow(-1, 0, 2) - half, c.narrow(-1, 0, 2) + half}, -1);
    auto scores = rows.narrow(-1, 4, 1).sigmoid() * rows.narrow(-1, 5, rows.size(-1) - 5).sigmoid();
    return torch::cat({xyxy, scores}, -1);
  }
  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& feats, const tasks::DecodeOptions& o) const {
    torch::NoGradGuard ng;
    return tasks::detect::non_max_suppression(decode_predictions(feats), o);
  }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }

  // The original's training pipeline (its MosaicMixupDataset + TrainTransform, families/yolox/augment.hpp):
  // its affine and mixup, and no affine / mixup once mosaic closes.
  static void adjust_augment(data::DetectAugment& a, const TrainConfig& cfg, const std::string& /*size*/ = {}) {
    families::yolox::use_mosaic_mixup_pipeline(a, cfg);
  }

  // The original's YOLOX validation (postprocess/yolox.py through the trainer's ValidationConfig): the best
  // class of each box (score obj · cls) above 0.001, class-aware NMS at 0.65, 300 per image.
  static tasks::DecodeOptions val_decode() { return tasks::validation_decode(/*multi_label=*/false); }

  // Loading the original's PyTorch .pt checkpoints (io/): the original's state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

 private:
  std::unique_ptr<families::yolox::YoloxLoss> loss_;
  bool use_l1_ = false;
};

}  // namespace libreyolo
