#pragma once
// Explicit instantiation of a family's facade entry points (train_with: its trainers, five, or seven with the
// whole-step ones of a step-capturable family; validate_with;
// predict_with; export_with; infer_with) and of its two profiler-less single-process trainers as whole classes, so that each family compiles in its own translation unit (tools/CMakeLists.txt generates
// one per line of families/list.hpp, including the family's header and this one) and a consumer that
// includes extern.hpp compiles none of them.
#include <libreyolo/facade.hpp>

#define LIBREYOLO_FAMILY_ENTRY_POINTS_(prefix, P)                                                               \
  prefix TrainResult train_with<P>(P, const TrainConfig&);                                                       \
  prefix train::ValResult validate_with<P>(P, TrainConfig, const train::Checkpoint&);                           \
  prefix nlohmann::json predict_with<P>(P, const train::Checkpoint&, const std::filesystem::path&, const TrainConfig&, \
                                        const std::filesystem::path&, const tasks::PredictOptions&);             \
  prefix void export_with<P>(P, const train::Checkpoint&, const std::filesystem::path&);                        \
  prefix nlohmann::json infer_with<P>(P, const train::Checkpoint*, const std::string&, eval::InferOptions);

// The two single-process trainers without the profiler, whole (every member): the ones tests and hand-composed
// users name most (the conformance suite's EagerTrainer / GraphTrainer), so that a unit declaring them extern
// compiles no training loop for the family.
#define LIBREYOLO_FAMILY_TRAINERS_(prefix, P)                                            \
  prefix class Trainer<P, precision::FamilyDefault, capture::Eager, profile::Off>;        \
  prefix class Trainer<P, precision::FamilyDefault, capture::CudaGraph<>, profile::Off>;

// For each trainer policy of family F (one per task), in namespace libreyolo.
#define LIBREYOLO_INSTANTIATE_POLICY(P) LIBREYOLO_FAMILY_ENTRY_POINTS_(template, P) LIBREYOLO_FAMILY_TRAINERS_(template, P)
#define LIBREYOLO_EXTERN_POLICY(P) LIBREYOLO_FAMILY_ENTRY_POINTS_(extern template, P) LIBREYOLO_FAMILY_TRAINERS_(extern template, P)
