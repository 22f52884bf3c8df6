#pragma once
// What the two DETR set criteria (criterion.hpp: RT-DETR; dfine_criterion.hpp: D-FINE / DEIM) do alike,
// batched over their outputs so that the host dispatches a loss term once per kind of output, not once
// per output:
//   stacking  the outputs of one query count as [O, B, Q, .] float32 tensors (one stack, one cast at most);
//   matching  the Hungarian matching of every output: each stack's cost matrices [O * B, Q, T] computed in
//             one call of the criterion's cost function, all of them brought to the host in one copy and
//             solved there (assign/hungarian.hpp); the matches stay host vectors;
//   indices   every index set the loss needs on the device (per stacked output and image: flat query
//             index o * B * Q + i * Q + q and the target's index in the batch's concatenated targets)
//             written into one host int64 buffer and copied to the device once.
#include <libreyolo/assign/hungarian.hpp>
#include <libreyolo/nn/detr/denoising.hpp>

#include <torch/torch.h>

#include <algorithm>
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

// The batch's targets concatenated (on their device) and their per-image offsets.
struct Targets {
  torch::Tensor labels, boxes;   // [T], [T, 4]
  std::vector<int64_t> sizes, offsets;  // per image
  int64_t total = 0;
  explicit Targets(const std::vector<DetrTarget>& t) {
    std::vector<torch::Tensor> l, b;
    for (auto& x : t) {
      offsets.push_back(total);
      sizes.push_back(x.labels.size(0));
      total += x.labels.size(0);
      l.push_back(x.labels), b.push_back(x.boxes);
    }
    if (!t.empty()) labels = t.size() == 1 ? t.front().labels : torch::cat(l), boxes = t.size() == 1 ? t.front().boxes : torch::cat(b);
  }
};

// The Hungarian matching of every stacked output against the targets. cost(logits [N, Q, C], boxes
// [N, Q, 4], target labels [T], target boxes [T, 4]) -> [N, Q, T] (called without gradients, N = O * B).
// Returns one HostMatch per output, indexed as the stacks' members.
template <class CostFn>
std::vector<HostMatch> hungarian(const std::vector<Stack>& stacks, size_t n_outputs, const Targets& t, CostFn&& cost) {
  const auto B = static_cast<int64_t>(t.sizes.size());
  std::vector<HostMatch> all(n_outputs);
  if (t.total == 0) {
    for (auto& m : all) m.assign(static_cast<size_t>(B), {});
    return all;
  }
  std::vector<torch::Tensor> flat;
  {
    torch::NoGradGuard ng;
    for (auto& s : stacks) {
      const int64_t O = s.logits.size(0);
      flat.push_back(cost(s.logits.flatten(0, 1), s.boxes.flatten(0, 1), t.labels, t.boxes).reshape({O * B * s.logits.size(2) * t.total}));
    }
  }
  // One device-to-host copy for every cost matrix.
  auto host = (flat.size() == 1 ? flat.front() : torch::cat(flat)).to(torch::kCPU);
  if (host.scalar_type() != torch::kFloat32 && host.scalar_type() != torch::kFloat64) host = host.to(torch::kFloat64);
  host = host.contiguous();
  const bool f32 = host.scalar_type() == torch::kFloat32;
  const float* pf = f32 ? host.data_ptr<float>() : nullptr;
  const double* pd = f32 ? nullptr : host.data_ptr<double>();
  int64_t at = 0;
  std::vector<double> block;
  for (auto& s : stacks) {
    const int64_t Q = s.logits.size(2);
    for (size_t o : s.members) {
      for (int64_t i = 0; i < B; ++i) {
        const int64_t n = t.sizes[static_cast<size_t>(i)], col0 = t.offsets[static_cast<size_t>(i)];
        block.resize(static_cast<size_t>(Q * n));
        const int64_t img = at + i * Q * t.total;
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t k = img + q * t.total + col0 + j;
            block[static_cast<size_t>(q * n + j)] = f32 ? static_cast<double>(pf[k]) : pd[k];
          }
        auto a = assign::linear_sum_assignment(block.data(), Q, n);
        all[o].emplace_back(std::move(a.rows), std::move(a.cols));
      }
      at += B * Q * t.total;
    }
  }
  return all;
}

// ---- Fixed shapes: what a step graph can hold (issue 44's form of the same loss) ---------------------
// Targets as [B, M] slots with a validity mask instead of per-image tensors, the matches as the query of
// every target slot ([O, B, M] int64, -1 where none), and every loss term masked: the shapes follow B, Q
// and M only, not the batch's counts. The criterion's loss uses this form for every batch.

// The batch's targets in M slots per image (M = the largest count, at least 1, when 0 is passed): image
// i's n_i targets at [0, n_i); padding slots hold label 0 and the box (0.5, 0.5, 1, 1), a finite box with
// area, so the masked pairs' IoU and GIoU stay finite (a 0 * NaN would poison the sums and gradients).
struct PaddedTargets : PaddedSlots {
  std::vector<int64_t> counts;  // n_i, on the host
  int64_t M = 0;
  int64_t total() const {
    int64_t n = 0;
    for (auto c : counts) n += c;
    return n;
  }
};
inline PaddedTargets pad_targets(const std::vector<DetrTarget>& t, torch::Device dev, int64_t M = 0) {
  PaddedTargets out;
  for (auto& x : t) out.counts.push_back(x.labels.size(0)), M = std::max(M, out.counts.back());
  out.M = std::max<int64_t>(M, 1);
  static_cast<PaddedSlots&>(out) = scatter_targets(t, out.M, 0, {0.5f, 0.5f, 1.f, 1.f}, dev);
  return out;
}

// The Hungarian matching of every stacked output against padded targets. Per stack, cost(logits [N, Q, C],
// boxes [N, Q, 4], labels [N, M], boxes [N, M, 4]) -> [N, Q, M], N = O * B (the targets tiled O times),
// called without gradients; every matrix goes to the host in one copy and each (output, image) is solved
// on its n_i valid columns. Returns, per stack, the matched query of every target slot as [O, B, M] int64
// on the targets' device (-1 for padding, or a target left over when Q < n_i), one copy for all stacks.
template <class CostFn>
std::vector<torch::Tensor> hungarian_padded(const std::vector<Stack>& stacks, const PaddedTargets& t, CostFn&& cost) {
  const auto B = static_cast<int64_t>(t.counts.size()), M = t.M;
  const auto dev = t.labels.device();
  int64_t slots = 0;
  for (auto& s : stacks) slots += s.logits.size(0) * B * M;
  auto qidx = torch::full({slots}, int64_t{-1}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(dev.is_cuda()));
  if (t.total() > 0) {
    std::vector<torch::Tensor> flat;
    {
      torch::NoGradGuard ng;
      for (auto& s : stacks) {
        const int64_t O = s.logits.size(0);
        flat.push_back(cost(s.logits.flatten(0, 1), s.boxes.flatten(0, 1), t.labels.repeat({O, 1}), t.boxes.repeat({O, 1, 1})).reshape({-1}));
      }
    }
    // One device-to-host copy for every cost matrix.
    auto host = (flat.size() == 1 ? flat.front() : torch::cat(flat)).to(torch::kCPU).to(torch::kFloat64).contiguous();
    const double* pc = host.data_ptr<double>();
    int64_t* pq = qidx.data_ptr<int64_t>();
    std::vector<double> block;
    int64_t at = 0, out_at = 0;  // where the current stack's costs and slots begin
    for (auto& s : stacks) {
      const int64_t O = s.logits.size(0), Q = s.logits.size(2);
      for (int64_t oi = 0; oi < O * B; ++oi) {
        const int64_t n = t.counts[static_cast<size_t>(oi % B)];
        if (n == 0) continue;
        block.resize(static_cast<size_t>(Q * n));
        const double* c = pc + at + oi * Q * M;
        for (int64_t q = 0; q < Q; ++q) std::copy(c + q * M, c + q * M + n, block.begin() + q * n);
        const auto a = assign::linear_sum_assignment(block.data(), Q, n);
        for (size_t k = 0; k < a.rows.size(); ++k) pq[out_at + oi * M + a.cols[k]] = a.rows[k];
      }
      at += O * B * Q * M;
      out_at += O * B * M;
    }
  }
  auto d = dev.is_cpu() ? qidx : qidx.to(dev, /*non_blocking=*/true);
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (auto& s : stacks) {
    const int64_t O = s.logits.size(0);
    out.push_back(d.narrow(0, at, O * B * M).view({O, B, M}));
    at += O * B * M;
  }
  return out;
}

// The denoising queries' matches in the fixed form: slot k = g * M + j of image i (group g, target j) holds
// the positive query g * 2G + j where target j is valid, else -1; [B, groups * M] int64, made on the
// targets' device from the group sizes alone. The slot's target column is k % M (denoising_columns).
inline torch::Tensor denoising_columns(const DenoisingMeta& meta, const PaddedTargets& t) {
  return torch::arange(meta.num_group * t.M, t.labels.options()).remainder(t.M);
}
inline torch::Tensor denoising_qidx(const DenoisingMeta& meta, const PaddedTargets& t) {
  auto k = torch::arange(meta.num_group * t.M, t.labels.options());
  auto j = k.remainder(t.M);
  auto q = torch::div(k, t.M, "floor") * (2 * meta.max_gt) + j;
  return torch::where(t.valid.index_select(1, j), q.unsqueeze(0), torch::full_like(q, -1).unsqueeze(0));
}

// The denoising queries' indices: image i's positives against its targets tiled num_group times.
inline HostMatch denoising_match(const DenoisingMeta& meta, const std::vector<DetrTarget>& targets) {
  HostMatch out;
  for (size_t i = 0; i < targets.size(); ++i) {
    const int64_t n = targets[i].labels.size(0);
    if (n == 0) {
      out.emplace_back();
      continue;
    }
    std::vector<int64_t> cols;
    for (int64_t g = 0; g < meta.num_group; ++g)
      for (int64_t j = 0; j < n; ++j) cols.push_back(j);
    out.emplace_back(host_vector(meta.positive_idx[i]), std::move(cols));
  }
  return out;
}

// Index sets gathered on the host, copied to the device once. A segment lists, for each of its slots
// (a position o in a stack [O, B, Q, .]) and image i, the matched queries as o * B * Q + i * Q + q and
// their targets as offsets[i] + t.
class DeviceIndices {
 public:
  struct Segment {
    torch::Tensor flat, tidx;  // [n] each, on the device (after upload)
    int64_t n = 0;
  };
  // Returns the segment's id. matches[k] is slot slots[k]'s match.
  size_t add(const std::vector<const HostMatch*>& matches, const std::vector<int64_t>& slots, int64_t B, int64_t Q,
             const std::vector<int64_t>& offsets) {
    Pending p;
    for (size_t k = 0; k < matches.size(); ++k) {
      const auto& m = *matches[k];
      for (size_t i = 0; i < m.size(); ++i) {
        const int64_t base = (slots[k] * B + static_cast<int64_t>(i)) * Q;
        for (auto q : m[i].first) p.flat.push_back(base + q);
        for (auto c : m[i].second) p.tidx.push_back(offsets[i] + c);
      }
    }
    pending_.push_back(std::move(p));
    return segments_.size() + pending_.size() - 1;
  }
  // One host-to-device copy (pinned and asynchronous on CUDA) for every segment added.
  void upload(torch::Device dev) {
    int64_t total = 0;
    for (auto& p : pending_) total += 2 * static_cast<int64_t>(p.flat.size());
    auto cpu = torch::empty({total}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(dev.is_cuda()));
    int64_t* w = cpu.data_ptr<int64_t>();
    for (auto& p : pending_) {
      std::memcpy(w, p.flat.data(), p.flat.size() * sizeof(int64_t)), w += p.flat.size();
      std::memcpy(w, p.tidx.data(), p.tidx.size() * sizeof(int64_t)), w += p.tidx.size();
    }
    auto d = dev.is_cpu() ? cpu : cpu.to(dev, /*non_blocking=*/true);
    int64_t at = 0;
    for (auto& p : pending_) {
      Segment s;
      s.n = static_cast<int64_t>(p.flat.size());
      s.flat = d.narrow(0, at, s.n);
      s.tidx = d.narrow(0, at + s.n, s.n);
      at += 2 * s.n;
      segments_.push_back(std::move(s));
    }
    pending_.clear();
  }
  const Segment& operator[](size_t id) const { return segments_.at(id); }

 private:
  struct Pending {
    std::vector<int64_t> flat, tidx;
  };
  std::vector<Pending> pending_;
  std::vector<Segment> segments_;
};

}  // namespace set_batch
}  // namespace libreyolo::nn::detr
