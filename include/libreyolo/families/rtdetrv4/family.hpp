#pragma once
// RT-DETRv4 (`rtdetrv4{s,m,l,x}`): the D-FINE line's template (families/dfine/family.hpp) with RT-DETRv4's
// policy: D-FINE's network built with SiLU, trained as DEIM (RTDETRv4Trainer is a DEIMTrainer: MAL)
// with RTDETRv4Config's recipe. Its own folder only because families/list.hpp makes one translation
// unit per folder.
#include <libreyolo/families/dfine/family.hpp>

namespace libreyolo {
using RTDETRv4Family = families::dfine::DFineFamilyT<families::dfine::RTDETRv4V>;
}  // namespace libreyolo
