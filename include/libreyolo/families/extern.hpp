#pragma once
// Declares every registered family's facade entry points as instantiated elsewhere (the generated
// per-family translation units of tools/CMakeLists.txt): a translation unit including this header
// dispatches through Model but compiles no trainer of a family's first task. (A family's further task
// policies, Type::task_policies, are still instantiated where they are used.)
#include <libreyolo/families/instantiate.hpp>

namespace libreyolo {
#define LIBREYOLO_EXTERN_FAMILY_(folder, Type) LIBREYOLO_EXTERN_POLICY(Type)
LIBREYOLO_REGISTERED_FAMILIES(LIBREYOLO_EXTERN_FAMILY_)
#undef LIBREYOLO_EXTERN_FAMILY_
}  // namespace libreyolo
