#pragma once
// The point detection task (key points / pose): its contract, filled in with its first family
// (YOLO-NAS pose).
//
// Data: YOLO-format detection labels followed by K (x, y, visibility) triples per object; the dataset YAML
// adds kpt_shape: [K, 3]. Batch: the detection batch plus key points [B, M, K, 3]. Validation: OKS mAP
// (fitness = OKS mAP50-95) beside box mAP. Predict: boxes with their key points, in original pixels.
// A point family will derive from PointTask<Family> and supply make_network(), loss(), loss_names() and
// decode(output, DecodeOptions) -> per image [n, 6 + 3K].
#include <libreyolo/tasks/task.hpp>

namespace libreyolo::tasks {

struct PointInfo {
  static constexpr Task task = Task::point;
  static constexpr std::string_view name = "point";
  static constexpr std::string_view model_suffix = "-pose";
  static constexpr std::string_view data_help = "dataset YAML with kpt_shape; labels `class cx cy w h (x y v)*K`";
};

template <class Derived>
class PointTask {
  template <class>
  static constexpr bool not_yet = false;
  static_assert(not_yet<Derived>, "tasks::PointTask: the point task's data, validation and predict arrive with its "
                                  "first family; only its contract (this header) exists yet");
};

}  // namespace libreyolo::tasks
