#pragma once
// Included by test units that train or validate registered families through Model or their
// FamilyDefault Eager / CudaGraph<> trainers: with the command line's per-family units in the build
// (tests/CMakeLists.txt defines LIBREYOLO_TESTS_EXTERN_TRAINERS and links them), those trainers and
// entry points are declared extern here and compiled once, not again in each test unit. Include it
// after the family headers (libreyolo.hpp).
#include <libreyolo/families/registry.hpp>
#if defined(LIBREYOLO_TESTS_EXTERN_TRAINERS)
#include <libreyolo/families/extern.hpp>
#endif
