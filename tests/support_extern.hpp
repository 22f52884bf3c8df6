#pragma once
// Included by test units that train or validate registered families through Model or their
// FamilyDefault Eager / CudaGraph<> trainers: with the command line's per-family units in the build
// (tests/CMakeLists.txt defines LIBREYOLO_COMPILED_FAMILIES, as linking libreyolo::families does, and links them), those trainers and
// entry points are declared extern here and compiled once, not again in each test unit. Include it
// after the family headers (<libreyolo/model.hpp> includes them all and, with LIBREYOLO_COMPILED_FAMILIES,
// extern.hpp too).
#include <libreyolo/families/registry.hpp>
#if defined(LIBREYOLO_COMPILED_FAMILIES)
#include <libreyolo/families/extern.hpp>
#endif
