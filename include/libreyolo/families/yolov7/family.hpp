#pragma once
// The YOLOv7 family (size b, the only size the original registers: Libre-YOLO/libreyolo
// libreyolo/models/yolo7/model.py, "Single size ``b`` (upstream ships one v7 model)" at line 8,
// INPUT_SIZES = {"b": 640} at line 36, detect_size -> "b" at line 56; net.py's YOLOv7Model takes no size
// and builds the one bundled v7.yaml) on the detection task: the E-ELAN / SPPCSPC / IDetection network
// (network.hpp), the SimOTA anchor loss (loss.hpp) and the original's anchor decode. Recipe: the
// original's YOLOv7Config (Libre-YOLO/libreyolo libreyolo/training/config.py: YOLOXConfig with momentum
// 0.937, 3 warm-up epochs, EMA 0.9999) through its trainer (libreyolo/models/yolo7/trainer.py): SGD lr0
// 0.01 Nesterov, weight decay 5e-4, YOLOX's warm cosine with 15 no-aug epochs and a floor of 0.05·lr0,
// validation every 10 epochs; its data pipeline is YOLOv9's (YOLO9MosaicMixupDataset +
// YOLO9TrainTransform): the 2S mosaic resized to S with no random affine (degrees 10 / shear 2 are set
// in its config but that pipeline never applies them), mixup after every mosaic (probability 1), YOLOX's
// additive HSV jitter (5, 30, 30) on every image, horizontal flips. AMP on. The whole network is the
// capture region; cuda_graph=step records the whole step (its loss is fixed-shape, loss.hpp).
//
// Decode (the original's postprocess/yolo7.py): boxes (2σ - 0.5 + grid)·s and (2σ)²·anchor, score =
// σ(objectness)·σ(class), the best class per anchor, class-aware NMS; validation at conf 0.001, IoU 0.65,
// 300 boxes.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/yolov7/loss.hpp>
#include <libreyolo/families/yolov7/network.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

class Yolov7Family : public tasks::DetectTask<Yolov7Family> {
 public:
  static constexpr std::string_view name = "yolo7";  // the original's FAMILY (checkpoints LibreYOLO7b.pt)
  // Padded right and below, as YOLOv9: the original trains through YOLO9TrainTransform and validates with
  // YOLO9ValPreprocessor (models/yolo7/model.py `val_preprocessor_class`; docs/fidelity.md row 33).
  static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::top_left;
  static constexpr std::array<std::string_view, 1> sizes{"b"};
  struct traits : family_defaults {
    using members = member::list<member::param_groups>;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    // Its loss (loss.hpp: SimOTA on padded targets, masks, the priors built once per map size) has fixed
    // shapes and reads nothing back: cuda_graph=step records the whole step.
    static constexpr bool step_capturable = true;
    static constexpr std::array<std::string_view, 12> overrides{
        "warmup_epochs=3", "ema_decay=0.9999", "eval_interval=10", "affine=false", "degrees=10", "shear=2",
        "mixup=1",         "hsv_mode=add",     "hsv_h=5",          "hsv_s=30",     "hsv_v=30",   "hsv_prob=1"};
  };
  using Network = families::yolov7::Yolov7;

  explicit Yolov7Family(std::string size = "b") : DetectTask(std::move(size)) {
    families::require_size<Yolov7Family>(size_);
  }

  Network make_network() const { return Network(families::yolov7::Yolov7Options{size_, num_classes()}); }

  // The original's groups (the newer repository's BaseTrainer._setup_optimizer, which YOLOv7 comes from):
  // parameters that are neither a module's weight nor its bias -- the ImplicitA / ImplicitM `implicit`
  // tensors -- go to its pg2 with the biases, without weight decay; make_param_groups alone would decay them.
  std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) const {
    auto g = train::make_param_groups(net, weight_decay);
    std::vector<const void*> implicit;
    for (const auto& item : net.named_parameters())
      if (item.key() == "implicit" || item.key().ends_with(".implicit")) implicit.push_back(item.value().unsafeGetTensorImpl());
    std::vector<torch::Tensor> decay;
    for (auto& p : g[0].params)
      (std::find(implicit.begin(), implicit.end(), p.unsafeGetTensorImpl()) != implicit.end() ? g[2].params : decay).push_back(p);
    g[0].params = std::move(decay);
    return g;
  }

  train::LossOutput loss(const std::vector<torch::Tensor>& maps, const Batch& b) {
    if (!loss_) loss_ = std::make_unique<families::yolov7::SimOTALoss>(num_classes());
    auto r = (*loss_)(maps, b.targets);
    return {r.total, r.items};
  }
  static std::vector<std::string> loss_names() { return {"iou", "obj", "cls"}; }

  // Raw maps -> [B, N, 4 + nc] (xyxy input pixels, σ(obj)·σ(cls)).
  static torch::Tensor decode_predictions(const std::vector<torch::Tensor>& maps, int64_t nc) {
    auto d = families::yolov7::decode_maps(maps, nc);
    auto box = d.out.narrow(2, 0, 4);
    auto xy = box.narrow(2, 0, 2), wh = box.narrow(2, 2, 2);
    auto scores = d.out.narrow(2, 4, 1).sigmoid() * d.out.narrow(2, 5, nc).sigmoid();
    return torch::cat({xy - wh / 2, xy + wh / 2, scores}, 2);
  }
  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& maps, const tasks::DecodeOptions& o) const {
    torch::NoGradGuard ng;
    const int64_t nc = maps.at(0).size(1) / families::yolov7::kAnchorsPerCell - 5;
    return tasks::detect::non_max_suppression(decode_predictions(maps, nc), o);
  }
  // The original validates v7 with its own postprocess: the best class only (conf 0.001, IoU 0.65).
  static tasks::DecodeOptions val_decode() { return tasks::validation_decode(/*multi_label=*/false); }

  // The original's state-dict names (layers.<i>...) equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

 private:
  std::unique_ptr<families::yolov7::SimOTALoss> loss_;
};

}  // namespace libreyolo
