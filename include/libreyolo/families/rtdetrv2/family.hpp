#pragma once
// RT-DETRv2 (`rtdetrv2-r18`, `-r34`, `-r50`, `-r50m`, `-r101`): the RT-DETR family's template (families/rtdetr/family.hpp) with the v2
// decoder policy (families::rtdetr::V2). Its own folder only because families/list.hpp makes one
// translation unit per folder.
#include <libreyolo/families/rtdetr/family.hpp>

namespace libreyolo {
using RTDETRv2Family = families::rtdetr::RTDETRFamilyT<families::rtdetr::V2>;
}  // namespace libreyolo
