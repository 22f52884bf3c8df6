#pragma once
// The registered families: ONE LINE PER FAMILY, `LIBREYOLO_FAMILY(<folder>, <Type>)`, where <folder> is
// include/libreyolo/families/<folder>/ (its family.hpp defines libreyolo::<Type>) and <Type> is the family's
// trainer policy for its first task (its other tasks: <Type>::task_policies). This is the only place a
// family is registered: the facade (model.hpp), `val`, `predict`, the command line's model list and help,
// the conformance suite (tests/kit) and the build (tools/CMakeLists.txt makes one translation unit per
// line) read it. Keep the format: CMake parses these lines.
//
// A build may compile some of them only (CMake: -DLIBREYOLO_FAMILIES="yolo9;resnet"): it then defines
// LIBREYOLO_FAMILY_SELECTION and generates <libreyolo_family_selection.hpp> with the chosen lines as
// LIBREYOLO_SELECTED_FAMILIES (and LIBREYOLO_UNSELECTED_FAMILY_NAMES, the folders left out, for errors).
// Everything that enumerates families reads LIBREYOLO_REGISTERED_FAMILIES, below.
#define LIBREYOLO_FAMILIES(LIBREYOLO_FAMILY)       \
  LIBREYOLO_FAMILY(resnet, ResNetFamily)           \
  LIBREYOLO_FAMILY(yolo9, Yolo9Family)             \
  LIBREYOLO_FAMILY(yolox, YoloxFamily)             \
  LIBREYOLO_FAMILY(rtmdet, RtmdetFamily)           \
  LIBREYOLO_FAMILY(yolonas, YoloNasFamily)         \
  LIBREYOLO_FAMILY(yolov7, Yolov7Family)           \
  LIBREYOLO_FAMILY(rtdetr, RTDETRFamily)           \
  LIBREYOLO_FAMILY(rtdetrv2, RTDETRv2Family)       \
  LIBREYOLO_FAMILY(fomo, FomoFamily)               \
  LIBREYOLO_FAMILY(mobilenetv4, MobileNetV4Family) \
  LIBREYOLO_FAMILY(segformer, SegformerFamily)     \
  LIBREYOLO_FAMILY(lingbot, LingBotFamily)         \
  LIBREYOLO_FAMILY(dfine, DFineFamily)             \
  LIBREYOLO_FAMILY(deim, DEIMFamily)               \
  LIBREYOLO_FAMILY(deimv2, DEIMv2Family)           \
  LIBREYOLO_FAMILY(rtdetrv4, RTDETRv4Family)       \
  LIBREYOLO_FAMILY(rfdetr, RFDETRFamily)           \
  LIBREYOLO_FAMILY(ec, ECFamily)

#if defined(LIBREYOLO_FAMILY_SELECTION)
#include <libreyolo_family_selection.hpp>
#define LIBREYOLO_REGISTERED_FAMILIES(X) LIBREYOLO_SELECTED_FAMILIES(X)
#else
#define LIBREYOLO_REGISTERED_FAMILIES(X) LIBREYOLO_FAMILIES(X)
#define LIBREYOLO_UNSELECTED_FAMILY_NAMES ""
#endif
