#pragma once
// The task layer: what every family of one task shares. A task owns its dataset and batch types, its
// set-up from the config, the network input, validation and its metrics, predict's decoding contract and
// outputs, its synthetic data set (`libreyolo data synth --task ...`) and its command-line help. A family
// supplies its network, loss, decode and traits, and reaches its task through CRTP:
//
//   class MyFamily : public tasks::DetectTask<MyFamily> { ... };   // tasks/detect.hpp says what to supply
//
// A task never includes a family header. The task contract below is what the trainer, the facade
// (model.hpp) and the command line rely on; each task header states what its family must add.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/train/family.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <concepts>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::tasks {

// What predict is asked for, whatever the task (each task reads the fields it needs).
struct PredictOptions {
  int imgsz = 640;
  double conf = 0.25, iou = 0.7;  // detection: score threshold and NMS IoU
  int64_t max_det = 300;          // detection: boxes kept per image
  int64_t top_k = 5;              // classification: classes reported per image
  bool save_images = true;        // detection: annotated copies of the images
};

// Static facts of a task (one struct per task: DetectInfo, ClassifyInfo, ...).
template <class I>
concept TaskInfo = requires {
  { I::task } -> std::convertible_to<Task>;
  { I::name } -> std::convertible_to<std::string_view>;           // "detect"
  { I::model_suffix } -> std::convertible_to<std::string_view>;   // "-cls": a family's non-primary task
  { I::data_help } -> std::convertible_to<std::string_view>;      // the data= format, for --help
};

// A trainer policy built on a task base: the family contract (train/family.hpp) plus the task's own.
template <class F>
concept TaskPolicy = train::FamilyPolicy<F> && TaskInfo<typename F::task_info> &&
    requires(const F cf) {
      { cf.names() } -> std::convertible_to<std::vector<std::string>>;
    };

}  // namespace libreyolo::tasks
