#pragma once
// FamilyDefault: the precision decided at run time from `amp` (an explicit true/false wins) or else
// the family's AMP default, and `amp_dtype`; then it behaves as Fp32, Amp<kHalf> or Amp<kBFloat16>
// (autocast on CUDA only, GradScaler for float16 only).
#include <libreyolo/precision/amp.hpp>
#include <libreyolo/precision/fp32.hpp>
#include <libreyolo/precision/grad_scaler.hpp>

#include <torch/torch.h>

#include <string>

namespace libreyolo::precision {

struct FamilyDefault : ResolvedPrecision {
  void setup(const TrainConfig& cfg, torch::Device device, bool family_amp_default) {
    adopt(resolve_precision(cfg, device, family_amp_default));
  }
};

static_assert(PrecisionPolicy<FamilyDefault>);
static_assert(PrecisionPolicy<Amp<at::kHalf>>);
static_assert(PrecisionPolicy<Amp<at::kBFloat16>>);

}  // namespace libreyolo::precision
