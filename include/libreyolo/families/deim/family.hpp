#pragma once
// DEIM (`deim{n,s,m,l,x}`): the D-FINE line's template (families/dfine/family.hpp) with DEIM's policy: the
// same network with SiLU decoder heads and the stem trainable (but at l/x), MAL classification (gamma 1.5), DEIMConfig's
// recipe. Its own folder only because families/list.hpp makes one translation unit per folder.
#include <libreyolo/families/dfine/family.hpp>

namespace libreyolo {
using DEIMFamily = families::dfine::DFineFamilyT<families::dfine::DEIMV>;
}  // namespace libreyolo
