#pragma once
// The semantic segmentation task: its contract, filled in with its first family (SegFormer).
//
// Data: root/images/{train,val}/*.jpg with root/masks/{train,val}/*.png (one class index per pixel,
// 255 = ignore). Batch: uint8 images [B,3,S,S] and int64 masks [B,S,S]. Validation: mean IoU over the
// classes (fitness = mIoU) and pixel accuracy. Predict: a class-index PNG per image.
// A segmentation family will derive from SegmentTask<Family> and supply make_network(), loss(logits, batch)
// and loss_names(); decode(logits) -> [B,S,S] class indices has a default (arg-max after resizing).
#include <libreyolo/tasks/task.hpp>

namespace libreyolo::tasks {

struct SegmentInfo {
  static constexpr Task task = Task::segment;
  static constexpr std::string_view name = "segment";
  static constexpr std::string_view model_suffix = "-seg";
  static constexpr std::string_view data_help = "folder with images/{train,val}/*.jpg and masks/{train,val}/*.png";
};

template <class Derived>
class SegmentTask {
  template <class>
  static constexpr bool not_yet = false;
  static_assert(not_yet<Derived>, "tasks::SegmentTask: the segmentation task's data, validation and predict arrive "
                                  "with its first family; only its contract (this header) exists yet");
};

}  // namespace libreyolo::tasks
