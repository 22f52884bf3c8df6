#pragma once
// A detection batch's targets as the DETR losses' fixed-shape PaddedTargets, made from the batch's device
// tensor `targets [B, M, 5]` (class, x1, y1, x2, y2 in input pixels; padding rows class -1) without a
// host read: the input a recorded DETR step (issue 44's segment A) builds its targets from, where
// detr_targets_of + pad_targets (nn/detr/denoising.hpp) go through the host rows. Both keep the same rows
// (class >= 0, x2 > x1, y2 > y1: detr_valid_rows) in the same order and give the same slots.
#include <libreyolo/nn/detr/denoising.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// targets: [B, M, 5] float on any device. counts: each image's kept rows as the host knows them (a recorded
// step passes its batch's own, from the host rows; nothing here checks them against the device, which would
// read the host). cxcywh(x1, y1, x2, y2) -> [N, 4]: the family's normalisation, as for detr_targets_of
// (called on the N = B * M flattened columns). The kept rows move to the front of each image in their order
// (a stable sort of the mask); the other slots hold PaddedTargets' padding (label 0, box (0.5, 0.5, 1, 1)).
template <class CxCyWh>
PaddedTargets padded_targets_of(const torch::Tensor& targets, std::vector<int64_t> counts, CxCyWh&& cxcywh) {
  if (targets.dim() != 3 || targets.size(2) != 5)
    throw std::invalid_argument("padded_targets_of: targets must be [B, M, 5], got " + std::to_string(targets.dim()) + " dims");
  const int64_t B = targets.size(0), M = targets.size(1);
  if (static_cast<int64_t>(counts.size()) != B)
    throw std::invalid_argument("padded_targets_of: " + std::to_string(counts.size()) + " counts for " + std::to_string(B) + " images");
  for (auto c : counts)
    if (c < 0 || c > M) throw std::invalid_argument("padded_targets_of: a count of " + std::to_string(c) + " for " + std::to_string(M) + " rows");
  auto t = targets.to(torch::kFloat32);
  auto keep = (t.select(2, 0) >= 0) & (t.select(2, 3) > t.select(2, 1)) & (t.select(2, 4) > t.select(2, 2));  // [B, M]
  // Kept rows first, each side in its order: a stable ascending sort of "not kept".
  auto order = std::get<1>(torch::sort((~keep).to(torch::kInt32), /*stable=*/true, /*dim=*/1, /*descending=*/false));
  auto rows = t.gather(1, order.unsqueeze(-1).expand({B, M, 5}));
  PaddedTargets out;
  out.valid = keep.gather(1, order);
  out.counts = std::move(counts);
  out.M = M;
  auto flat = rows.reshape({B * M, 5});
  auto boxes = cxcywh(flat.select(1, 1), flat.select(1, 2), flat.select(1, 3), flat.select(1, 4)).to(torch::kFloat32).reshape({B, M, 4});
  auto pad_box = torch::full({B, M, 4}, 0.5, t.options());  // made by fills on the device: no host-to-device copy
  pad_box.narrow(2, 2, 2).fill_(1.0);
  out.boxes = torch::where(out.valid.unsqueeze(-1), boxes, pad_box);
  out.labels = torch::where(out.valid, rows.select(2, 0).to(torch::kLong), torch::zeros({B, M}, t.options().dtype(torch::kLong)));
  return out;
}

// Each image's count of the rows detr_valid_rows keeps (host rows [n, 5]), at most M: the host's view of a
// padded_targets_of batch whose device tensor holds M slots (a truncated image keeps M).
inline std::vector<int64_t> valid_counts(const std::vector<torch::Tensor>& rows, int64_t M) {
  auto counts = detr_valid_rows(rows).second;
  for (auto& c : counts) c = std::min(c, M);
  return counts;
}

}  // namespace libreyolo::nn::detr
