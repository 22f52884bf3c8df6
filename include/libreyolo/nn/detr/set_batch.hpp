#pragma once
// What the two DETR set criteria (criterion.hpp: RT-DETR; dfine_criterion.hpp: D-FINE / DEIM) do alike,
// batched over their outputs so that the host dispatches a loss term once per kind of output, not once
// per output, and in fixed shapes, so that nothing after the matching follows the batch's box counts:
//   stacking  the outputs of one query count as [O, B, Q, .] float32 tensors (one stack, one cast at most);
//   targets   the batch's targets in [B, M] slots with a validity mask (PaddedTargets);
//   matching  the Hungarian matching of every output: each stack's cost matrices [O * B, Q, M] computed in
//             one call of the criterion's cost function, all of them brought to the host in one copy and
//             solved there on each image's valid columns (assign/hungarian.hpp); the matches come back as
//             each target slot's query, [O, B, M], in one host-to-device copy;
//   pairs     every pair set (the matches, the denoising pairs, D-FINE's union) as Slots: a query per slot
//             (-1: none) and the slot's target column; the loss gathers them and masks the empty ones.
#include <libreyolo/assign/hungarian.hpp>
#include <libreyolo/nn/detr/denoising.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

namespace libreyolo::nn::detr {

// Per image: (prediction indices, target indices), CPU int64.
using MatchIndices = std::vector<std::pair<torch::Tensor, torch::Tensor>>;
// The same on the host: per image (queries, targets).
using HostMatch = std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>;

namespace set_batch {

inline std::vector<int64_t> host_vector(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return {p, p + c.numel()};
}
inline torch::Tensor long_tensor(const std::vector<int64_t>& v) {
  auto t = torch::empty({static_cast<int64_t>(v.size())}, torch::kLong);
  if (!v.empty()) std::memcpy(t.data_ptr<int64_t>(), v.data(), v.size() * sizeof(int64_t));
  return t;
}
inline MatchIndices to_tensors(const HostMatch& m) {
  MatchIndices out;
  for (auto& [r, c] : m) out.emplace_back(long_tensor(r), long_tensor(c));
  return out;
}
inline HostMatch to_host(const MatchIndices& m) {
  HostMatch out;
  for (auto& [r, c] : m) out.emplace_back(host_vector(r), host_vector(c));
  return out;
}

// [O, B, Q, K] float32: the tensors stacked (a view when there is one), cast once if needed.
inline torch::Tensor stack_f32(const std::vector<torch::Tensor>& ts) {
  auto s = ts.size() == 1 ? ts.front().unsqueeze(0) : torch::stack(ts);
  return s.scalar_type() == torch::kFloat32 ? s : s.to(torch::kFloat32);
}

// Outputs (logits [B, Q, C], boxes [B, Q, 4]) stacked by query count, in order of first appearance.
struct Stack {
  torch::Tensor logits, boxes;  // [O, B, Q, C], [O, B, Q, 4] float32
  std::vector<size_t> members;  // their positions in the list stacked
};
inline std::vector<Stack> stack_by_queries(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outs) {
  std::vector<Stack> st;
  std::vector<int64_t> qs;
  std::vector<std::vector<torch::Tensor>> ls, bs;
  for (size_t o = 0; o < outs.size(); ++o) {
    const int64_t q = outs[o].first.size(1);
    size_t g = 0;
    while (g < qs.size() && qs[g] != q) ++g;
    if (g == qs.size()) qs.push_back(q), st.emplace_back(), ls.emplace_back(), bs.emplace_back();
    st[g].members.push_back(o);
    ls[g].push_back(outs[o].first);
    bs[g].push_back(outs[o].second);
  }
  for (size_t g = 0; g < st.size(); ++g) st[g].logits = stack_f32(ls[g]), st[g].boxes = stack_f32(bs[g]);
  return st;
}

// ---- Fixed shapes: what a step graph can hold (issue 44's form of the same loss) ---------------------
// Targets as [B, M] slots with a validity mask instead of per-image tensors, the matches as the query of
// every target slot ([O, B, M] int64, -1 where none), and every loss term masked: the shapes follow B, Q
// and M only, not the batch's counts. The criterion's loss uses this form for every batch.

// Fixed-shape pairs of O stacked outputs [O, B, Q, .]: slot k of image i pairs query qidx[o, i, k] (-1: no
// pair) with target column tcol[i, k]. The matches (K = M, tcol = 0 .. M-1), the denoising pairs (K = half
// the denoising tokens) and D-FINE's GO-LSD union (K = Q, one slot per query) all take this form.
struct Slots {
  torch::Tensor qidx;  // [O or 1, B, K] int64 (one row: the same pairs for every output)
  torch::Tensor tcol;  // [B, K] int64
};
// The slots' pairs flattened over [O, B, K], ready for gathers: the query rows in the stack's [O * B * Q]
// (masked slots clamped to a real row, so gathers stay in range), the same with masked slots sent to one
// dummy row O * B * Q (for scatters into a buffer one row longer), and the target labels and boxes.
struct SlotPairs {
  torch::Tensor mask;    // [O * B * K] bool
  torch::Tensor flat;    // [O * B * K] int64
  torch::Tensor row;     // [O * B * K] int64
  torch::Tensor labels;  // [O * B * K] int64
  torch::Tensor boxes;   // [O * B * K, 4] float32 (padding slots: a finite box with area)
};
inline SlotPairs slot_pairs(const Slots& s, const PaddedTargets& t, int64_t O, int64_t Q) {
  const int64_t B = s.tcol.size(0), K = s.tcol.size(1);
  const auto lopt = s.qidx.options();
  SlotPairs p;
  auto q = s.qidx.expand({O, B, K});
  p.mask = (q >= 0).reshape({-1});
  auto base = (torch::arange(O, lopt).view({O, 1, 1}) * B + torch::arange(B, lopt).view({1, B, 1})) * Q;
  p.flat = (base + q.clamp_min(0)).reshape({-1});
  p.row = torch::where(p.mask, p.flat, torch::full_like(p.flat, O * B * Q));
  p.labels = t.labels.gather(1, s.tcol).unsqueeze(0).expand({O, B, K}).reshape({-1});
  p.boxes = t.boxes.gather(1, s.tcol.unsqueeze(-1).expand({B, K, 4})).unsqueeze(0).expand({O, B, K, 4}).reshape({-1, 4});
  return p;
}

// Slots [B, M] of one output (host, row-major) as (queries ascending, targets) pairs per image.
inline HostMatch slots_to_host(const int64_t* p, int64_t B, int64_t M) {
  HostMatch m(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (query, target)
    for (int64_t j = 0; j < M; ++j)
      if (p[i * M + j] >= 0) pairs.emplace_back(p[i * M + j], j);
    std::sort(pairs.begin(), pairs.end());
    for (auto& [q, c] : pairs) m[static_cast<size_t>(i)].first.push_back(q), m[static_cast<size_t>(i)].second.push_back(c);
  }
  return m;
}

// A host int64 buffer on the device in one copy (pinned and asynchronous on CUDA when it is pinned).
inline torch::Tensor to_device(const torch::Tensor& host, torch::Device dev) {
  return dev.is_cpu() ? host : host.to(dev, /*non_blocking=*/host.is_pinned());
}
inline torch::Tensor host_long(int64_t n, int64_t fill, torch::Device dev) {
  return torch::full({n}, fill, torch::TensorOptions().dtype(torch::kLong).pinned_memory(dev.is_cuda()));
}

// Where each stack's cost matrices and slots sit in the matching's flat buffers: per stack (O, Q), in the
// stacks' order, for B images and M target slots. It follows the outputs' shapes only, so a recorded step
// (issue 44's segmented step) knows it without reading a tensor.
struct CostLayout {
  std::vector<std::array<int64_t, 2>> stacks;  // (O, Q)
  int64_t B = 0, M = 0;
  int64_t cost_numel() const {
    int64_t n = 0;
    for (auto& s : stacks) n += s[0] * B * s[1] * M;
    return n;
  }
  int64_t slot_numel() const {
    int64_t n = 0;
    for (auto& s : stacks) n += s[0] * B * M;
    return n;
  }
};
inline CostLayout layout_of(const std::vector<Stack>& stacks, int64_t B, int64_t M) {
  CostLayout l;
  for (auto& s : stacks) l.stacks.push_back({s.logits.size(0), s.logits.size(2)});
  l.B = B, l.M = M;
  return l;
}
// The same from the outputs' shapes, as stack_by_queries would stack them (no tensor is touched).
inline CostLayout layout_of(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outs, int64_t B, int64_t M) {
  CostLayout l;
  for (auto& o : outs) {
    const int64_t q = o.first.size(1);
    size_t g = 0;
    while (g < l.stacks.size() && l.stacks[g][1] != q) ++g;
    if (g == l.stacks.size()) l.stacks.push_back({0, q});
    ++l.stacks[g][0];
  }
  l.B = B, l.M = M;
  return l;
}

// Every stack's cost matrices [O * B, Q, M] against padded targets, flattened into one float32 device
// buffer [cost_numel] (the layout's order), without gradients. Per stack, cost(logits [N, Q, C], boxes
// [N, Q, 4], labels [N, M], boxes [N, M, 4]) -> [N, Q, M], N = O * B (the targets tiled O times).
template <class CostFn>
torch::Tensor stack_costs(const std::vector<Stack>& stacks, const PaddedTargets& t, CostFn&& cost) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> flat;
  for (auto& s : stacks) {
    const int64_t O = s.logits.size(0);
    flat.push_back(cost(s.logits.flatten(0, 1), s.boxes.flatten(0, 1), t.labels.repeat({O, 1}), t.boxes.repeat({O, 1, 1}))
                       .to(torch::kFloat32)
                       .reshape({-1}));
  }
  return flat.size() == 1 ? flat.front() : torch::cat(flat);
}

// The Hungarian solve of stack_costs' buffer on the host: each (output, image) on its counts[i] valid columns
// (assign/hungarian.hpp). Writes the matched query of every target slot into pq[slot_numel], the stacks'
// [O, B, M] one after another (-1 for padding, or a target left over when Q < n_i).
template <class T>
void solve_slots_into(const T* costs, const CostLayout& l, const std::vector<int64_t>& counts, int64_t* pq) {
  const int64_t B = l.B, M = l.M;
  std::fill(pq, pq + l.slot_numel(), int64_t{-1});
  std::vector<double> block;
  int64_t at = 0, out_at = 0;  // where the current stack's costs and slots begin
  for (auto& [O, Q] : l.stacks) {
    for (int64_t oi = 0; oi < O * B; ++oi) {
      const int64_t n = counts[static_cast<size_t>(oi % B)];
      if (n == 0) continue;
      block.resize(static_cast<size_t>(Q * n));
      const T* c = costs + at + oi * Q * M;
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t j = 0; j < n; ++j) block[static_cast<size_t>(q * n + j)] = static_cast<double>(c[q * M + j]);
      const auto a = assign::linear_sum_assignment(block.data(), Q, n);
      for (size_t k = 0; k < a.rows.size(); ++k) pq[out_at + oi * M + a.cols[k]] = a.rows[k];
    }
    at += O * B * Q * M;
    out_at += O * B * M;
  }
}
// solve_slots_into on a new buffer (pinned: page-locked, for an asynchronous upload).
template <class T>
torch::Tensor solve_slots(const T* costs, const CostLayout& l, const std::vector<int64_t>& counts, bool pinned) {
  auto qidx = torch::empty({l.slot_numel()}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(pinned));
  solve_slots_into(costs, l, counts, qidx.data_ptr<int64_t>());
  return qidx;
}

// The Hungarian matching of every stacked output against padded targets, on the host: stack_costs, one
// device-to-host copy, solve_slots on the host's counts. The slots are pinned on CUDA.
template <class CostFn>
torch::Tensor hungarian_slots_host(const std::vector<Stack>& stacks, const PaddedTargets& t, CostFn&& cost) {
  const auto B = static_cast<int64_t>(t.counts.size());
  const auto l = layout_of(stacks, B, t.M);
  const bool pinned = t.labels.device().is_cuda();
  if (t.total() == 0) return torch::full({l.slot_numel()}, int64_t{-1}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(pinned));
  const torch::Tensor host = stack_costs(stacks, t, cost).to(torch::kCPU).contiguous();
  return solve_slots(host.data_ptr<float>(), l, t.counts, pinned);
}

// A recorded step's matching buffer: stack_costs' costs followed by each image's valid target count (as
// float32, exact below 2^24), so that one device-to-host copy brings the host everything its solve needs.
inline torch::Tensor costs_with_counts(const torch::Tensor& costs, const PaddedTargets& t) {
  return torch::cat({costs, t.valid.sum(1).to(torch::kFloat32)});
}
// The counts at the end of a costs_with_counts buffer on the host (B entries).
inline std::vector<int64_t> counts_of(const torch::Tensor& host, int64_t B) {
  const float* p = host.data_ptr<float>() + host.numel() - B;
  std::vector<int64_t> c(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) c[static_cast<size_t>(i)] = static_cast<int64_t>(p[i]);
  return c;
}

// The stacks' slots of hungarian_slots_host on the device (one copy), as [O, B, M] views per stack.
inline std::vector<torch::Tensor> stack_slots(const torch::Tensor& host, const std::vector<Stack>& stacks, int64_t B, int64_t M,
                                              torch::Device dev) {
  auto d = to_device(host, dev);
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (auto& s : stacks) {
    const int64_t O = s.logits.size(0);
    out.push_back(d.narrow(0, at, O * B * M).view({O, B, M}));
    at += O * B * M;
  }
  return out;
}

// Every output's matches as (query, target) pairs per image, queries ascending, read from
// hungarian_slots_host's buffer (outputs indexed as the stacks' members).
inline std::vector<HostMatch> slots_per_output(const torch::Tensor& host, const std::vector<Stack>& stacks, size_t n_outputs,
                                               const PaddedTargets& t) {
  const auto B = static_cast<int64_t>(t.counts.size());
  std::vector<HostMatch> out(n_outputs);
  const int64_t* p = host.data_ptr<int64_t>();
  for (auto& s : stacks)
    for (size_t o : s.members) out[o] = slots_to_host(p, B, t.M), p += B * t.M;
  return out;
}

// Every output's matches against per-image targets as (query, target) index pairs per image, queries ascending
// (CPU int64): the criteria's match(), the form the tests and diagnostics read.
template <class CostFn>
std::vector<MatchIndices> match_indices(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& outputs,
                                        const std::vector<DetrTarget>& targets, CostFn&& cost) {
  const auto t = pad_targets(targets, outputs.front().first.device());
  const auto stacks = stack_by_queries(outputs);
  std::vector<MatchIndices> all;
  for (auto& m : slots_per_output(hungarian_slots_host(stacks, t, cost), stacks, outputs.size(), t)) all.push_back(to_tensors(m));
  return all;
}

// The target columns of plain matches: [B, M] = 0 .. M-1 on every row.
inline torch::Tensor match_columns(const PaddedTargets& t) {
  return torch::arange(t.M, t.labels.options()).unsqueeze(0).expand({static_cast<int64_t>(t.counts.size()), t.M});
}

// The denoising queries' pairs in the fixed form, made on the device from the group's device scalars:
// slot p of image i (p < T / 2, group g = p / G, target j = p % G) holds the positive query g * 2G + j
// where g is a real group and target j exists, else -1; its target column is j.
inline Slots denoising_slots(const DenoisingMeta& m, const PaddedTargets& t) {
  const auto B = static_cast<int64_t>(t.counts.size());
  const auto G = m.largest.to(t.labels.device()), groups = m.group_count.to(t.labels.device());
  auto p = torch::arange(m.num_denoising / 2, t.labels.options());
  auto j = p.remainder(G);
  auto q = torch::div(p, G, "floor") * (2 * G) + j;
  auto ok = t.valid.gather(1, j.unsqueeze(0).expand({B, p.size(0)})) & (p < G * groups).unsqueeze(0);
  Slots s;
  s.qidx = torch::where(ok, q.unsqueeze(0), torch::full_like(q, -1).unsqueeze(0)).unsqueeze(0);
  s.tcol = j.unsqueeze(0).expand({B, p.size(0)});
  return s;
}

}  // namespace set_batch
}  // namespace libreyolo::nn::detr
