#pragma once
// YOLOv7's training loss as the original trains the `b` model (Libre-YOLO/libreyolo
// libreyolo/models/yolo7/loss.py YOLOv7Loss): YOLOX's SimOTA dynamic assignment (Ge et al. 2021) driven by
// v7's anchor decode. Per level the raw map [B, 3·(5+nc), H, W] is decoded anchor-major to boxes in
// input pixels, cx = (2σ(tx) - 0.5 + col)·s, cy likewise, w = (2σ(tw))²·anchor_w, h likewise, with the
// objectness and class logits beside them; all in float32 whatever the autocast dtype (v7's pixel-scale
// anchors overflow float16 box areas).
//
// SimOTA per image: candidates are the anchors whose cell centre ((col + 0.5)·s) lies within 1.5 strides
// of some gt centre; cost = BCE(sqrt(σ(cls)·σ(obj)), one-hot) summed over classes + 3·(-log(IoU + 1e-8))
// + 1e6 where the anchor is outside that gt's centre window; each gt takes its dynamic_k = max(1,
// int(sum of its 10 best IoUs)) cheapest anchors; an anchor taken by several gts keeps the cheapest.
// Losses over the batch, each divided by max(number of positives, 1): IoU loss 1 - IoU² on positives
// (weight 5), BCE objectness on every anchor against the positive mask, BCE classes on positives against
// one-hot × the matched IoU. total = 5·iou + obj + cls (a batch mean).
//
// The assignment has data-dependent shapes (dynamic k, the positive count) and reads them on the host,
// as the original does; it runs outside the captured network region.
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/yolov7/network.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolov7 {

// Pairwise IoU of cxcywh boxes a [N, 4] and b [M, 4] -> [N, M] (YOLOX's bboxes_iou, xyxy=False).
inline torch::Tensor iou_cxcywh(const torch::Tensor& a, const torch::Tensor& b) {
  auto a_lt = (a.narrow(1, 0, 2) - a.narrow(1, 2, 2) / 2).unsqueeze(1), a_rb = (a.narrow(1, 0, 2) + a.narrow(1, 2, 2) / 2).unsqueeze(1);
  auto b_lt = b.narrow(1, 0, 2) - b.narrow(1, 2, 2) / 2, b_rb = b.narrow(1, 0, 2) + b.narrow(1, 2, 2) / 2;
  auto tl = torch::max(a_lt, b_lt), br = torch::min(a_rb, b_rb);
  auto en = (tl < br).to(tl.scalar_type()).prod(2);
  auto inter = (br - tl).prod(2) * en;
  auto area_a = a.narrow(1, 2, 2).prod(1).unsqueeze(1), area_b = b.narrow(1, 2, 2).prod(1);
  return inter / (area_a + area_b - inter);
}

// YOLOX's IoU loss, element-wise on matching rows of cxcywh boxes: 1 - IoU² (eps 1e-16 in the union).
inline torch::Tensor iou_loss(const torch::Tensor& p, const torch::Tensor& t) {
  auto tl = torch::max(p.narrow(1, 0, 2) - p.narrow(1, 2, 2) / 2, t.narrow(1, 0, 2) - t.narrow(1, 2, 2) / 2);
  auto br = torch::min(p.narrow(1, 0, 2) + p.narrow(1, 2, 2) / 2, t.narrow(1, 0, 2) + t.narrow(1, 2, 2) / 2);
  auto en = (tl < br).to(tl.scalar_type()).prod(1);
  auto inter = (br - tl).prod(1) * en;
  auto uni = p.narrow(1, 2, 2).prod(1) + t.narrow(1, 2, 2).prod(1) - inter;
  auto iou = inter / (uni + 1e-16);
  return 1 - iou.pow(2);
}

struct Decoded {
  torch::Tensor out;      // [B, N, 5 + nc]: cx, cy, w, h (pixels), objectness logit, class logits
  torch::Tensor centres;  // [N, 2] cell centres (col + 0.5, row + 0.5)·stride in pixels
  torch::Tensor strides;  // [N]
};

// The three raw maps -> per-anchor predictions, anchor-major within each level (the original's order).
inline Decoded decode_maps(const std::vector<torch::Tensor>& maps, int64_t nc) {
  if (maps.size() != 3) throw ConfigError("yolov7: expected 3 head maps, got " + std::to_string(maps.size()));
  std::vector<torch::Tensor> outs, centres, st;
  const auto s = strides();
  for (size_t l = 0; l < 3; ++l) {
    auto raw = maps[l].to(torch::kFloat32);
    const int64_t B = raw.size(0), H = raw.size(2), W = raw.size(3);
    if (raw.size(1) != kAnchorsPerCell * (5 + nc))
      throw ConfigError("yolov7: head map " + std::to_string(l) + " has " + std::to_string(raw.size(1)) + " channels, expected 3·(5 + " +
                        std::to_string(nc) + ")");
    auto opts = raw.options();
    auto r = raw.view({B, kAnchorsPerCell, 5 + nc, H, W}).permute({0, 1, 3, 4, 2});  // [B, A, H, W, 5+nc]
    auto sig = r.narrow(-1, 0, 4).sigmoid();
    auto col = torch::arange(W, opts).view({1, 1, 1, W}), row = torch::arange(H, opts).view({1, 1, H, 1});
    const auto& an = anchors()[l];
    auto aw = torch::tensor({an[0][0], an[1][0], an[2][0]}, opts).view({1, kAnchorsPerCell, 1, 1});
    auto ah = torch::tensor({an[0][1], an[1][1], an[2][1]}, opts).view({1, kAnchorsPerCell, 1, 1});
    const double stride = static_cast<double>(s[l]);
    auto cx = (sig.select(-1, 0) * 2 - 0.5 + col) * stride;
    auto cy = (sig.select(-1, 1) * 2 - 0.5 + row) * stride;
    auto bw = (sig.select(-1, 2) * 2).pow(2) * aw;
    auto bh = (sig.select(-1, 3) * 2).pow(2) * ah;
    auto box = torch::stack({cx, cy, bw, bh}, -1);
    outs.push_back(torch::cat({box, r.narrow(-1, 4, 1 + nc)}, -1).reshape({B, kAnchorsPerCell * H * W, 5 + nc}));
    auto g = torch::meshgrid({torch::arange(H, opts), torch::arange(W, opts)}, "ij");
    auto c = torch::stack({g[1].reshape(-1), g[0].reshape(-1)}, -1).repeat({kAnchorsPerCell, 1});
    centres.push_back((c + 0.5) * stride);
    st.push_back(torch::full({kAnchorsPerCell * H * W}, stride, opts));
  }
  return {torch::cat(outs, 1), torch::cat(centres), torch::cat(st)};
}

struct V7LossOutput {
  torch::Tensor total;  // scalar
  torch::Tensor items;  // [3] iou (×5), obj, cls; detached
  int64_t num_fg = 0;
};

class SimOTALoss {
 public:
  explicit SimOTALoss(int64_t nc, double reg_weight = 5.0) : nc_(nc), reg_weight_(reg_weight) {}

  // maps: the network's three raw maps; targets [B, M, 5] = (class, x1, y1, x2, y2) input pixels, padding
  // rows class -1.
  V7LossOutput operator()(const std::vector<torch::Tensor>& maps, const torch::Tensor& targets) const {
    auto d = decode_maps(maps, nc_);
    const int64_t B = d.out.size(0), N = d.out.size(1);
    if (targets.dim() != 3 || targets.size(2) != 5 || targets.size(0) != B)
      throw DataError("yolov7 loss: targets must be [B, M, 5] = (class, x1, y1, x2, y2) with B = " + std::to_string(B));
    auto boxes = d.out.narrow(2, 0, 4), obj = d.out.narrow(2, 4, 1), cls = d.out.narrow(2, 5, nc_);
    auto t = targets.to(torch::kCPU, torch::kFloat32);
    auto fopts = d.out.options();

    std::vector<torch::Tensor> fg_masks, cls_targets, reg_targets;
    int64_t num_fg = 0;
    for (int64_t b = 0; b < B; ++b) {
      auto rows = t[b];
      auto keep = (rows.select(1, 0) >= 0).nonzero().squeeze(1);
      rows = rows.index_select(0, keep);
      auto fg = torch::zeros({N}, fopts.dtype(torch::kBool));
      if (rows.size(0) == 0) {
        fg_masks.push_back(fg);
        continue;
      }
      auto xyxy = rows.narrow(1, 1, 4).to(d.out.device());
      auto gt = torch::stack({(xyxy.select(1, 0) + xyxy.select(1, 2)) / 2, (xyxy.select(1, 1) + xyxy.select(1, 3)) / 2,
                              xyxy.select(1, 2) - xyxy.select(1, 0), xyxy.select(1, 3) - xyxy.select(1, 1)}, 1);
      auto gt_cls = rows.select(1, 0).to(torch::kInt64).to(d.out.device());
      auto a = assign(gt, gt_cls, boxes[b].detach(), cls[b].detach(), obj[b].detach(), d.centres, d.strides);
      fg_masks.push_back(a.fg);
      if (a.num_fg > 0) {
        num_fg += a.num_fg;
        auto onehot = torch::zeros({a.num_fg, nc_}, fopts).scatter_(1, gt_cls.index_select(0, a.matched).unsqueeze(1), 1.0);
        cls_targets.push_back(onehot * a.ious.unsqueeze(1));
        reg_targets.push_back(gt.index_select(0, a.matched));
      }
    }
    auto fg_all = torch::cat(fg_masks);                                  // [B·N]
    const double denom = std::max<double>(static_cast<double>(num_fg), 1.0);
    auto obj_loss = torch::binary_cross_entropy_with_logits(obj.reshape({-1}), fg_all.to(torch::kFloat32), {}, {},
                                                            at::Reduction::Sum) / denom;
    torch::Tensor box_loss, cls_loss;
    if (num_fg > 0) {
      auto idx = fg_all.nonzero().squeeze(1);
      box_loss = iou_loss(boxes.reshape({-1, 4}).index_select(0, idx), torch::cat(reg_targets)).sum() / denom;
      cls_loss = torch::binary_cross_entropy_with_logits(cls.reshape({-1, nc_}).index_select(0, idx), torch::cat(cls_targets),
                                                         {}, {}, at::Reduction::Sum) / denom;
    } else {
      box_loss = boxes.sum() * 0.0;
      cls_loss = cls.sum() * 0.0;
    }
    auto items = torch::stack({reg_weight_ * box_loss, obj_loss, cls_loss});
    return {items.sum(), items.detach(), num_fg};
  }

  struct Assignment {
    torch::Tensor fg;       // [N] bool
    torch::Tensor matched;  // [num_fg] gt index per positive, in anchor order
    torch::Tensor ious;     // [num_fg] IoU of the positive with its gt
    int64_t num_fg = 0;
  };

  // SimOTA for one image: gt [G, 4] cxcywh, gt_cls [G], preds [N, 4] cxcywh, cls [N, nc] and obj [N, 1]
  // logits, centres [N, 2], strides [N].
  Assignment assign(const torch::Tensor& gt, const torch::Tensor& gt_cls, const torch::Tensor& preds,
                    const torch::Tensor& cls, const torch::Tensor& obj, const torch::Tensor& centres,
                    const torch::Tensor& strides) const {
    torch::NoGradGuard ng;
    const int64_t G = gt.size(0), N = preds.size(0);
    // Centre window: |anchor centre - gt centre| < 1.5 strides on both axes.
    auto r = (strides * 1.5).unsqueeze(0);                                      // [1, N]
    auto dx = centres.select(1, 0).unsqueeze(0) - gt.select(1, 0).unsqueeze(1);  // [G, N]
    auto dy = centres.select(1, 1).unsqueeze(0) - gt.select(1, 1).unsqueeze(1);
    auto in_centre = torch::stack({dx + r, dy + r, r - dx, r - dy}, 0).amin(0) > 0;  // [G, N]
    auto cand = in_centre.any(0);                                                // [N]
    Assignment a;
    a.fg = torch::zeros({N}, cand.options());
    auto cidx = cand.nonzero().squeeze(1);
    const int64_t n = cidx.size(0);
    if (n == 0) return a;
    auto geometry = in_centre.index_select(1, cidx);                            // [G, n]
    auto p = preds.index_select(0, cidx);
    auto ious = iou_cxcywh(gt, p);                                               // [G, n]
    auto iou_cost = -torch::log(ious + 1e-8);
    auto prob = (cls.index_select(0, cidx).sigmoid() * obj.index_select(0, cidx).sigmoid()).sqrt();  // [n, nc]
    auto onehot = torch::zeros({G, nc_}, prob.options()).scatter_(1, gt_cls.unsqueeze(1), 1.0);
    auto pe = prob.unsqueeze(0).expand({G, n, nc_}), te = onehot.unsqueeze(1).expand({G, n, nc_});
    // Binary cross-entropy written out (as torch's, logs clamped at -100): torch::binary_cross_entropy refuses
    // to run under CUDA autocast, and this cost needs no gradient.
    auto pf = pe.to(torch::kFloat32);
    auto tf = te.to(torch::kFloat32);
    auto cls_cost = -(tf * pf.log().clamp_min(-100.0) + (1 - tf) * (1 - pf).log().clamp_min(-100.0)).sum(-1);  // [G, n]
    auto cost = cls_cost + 3.0 * iou_cost + 1e6 * (~geometry).to(cls_cost.scalar_type());

    // Dynamic k per gt from its 10 best IoUs; each gt takes its k cheapest candidates.
    const int64_t k10 = std::min<int64_t>(10, n);
    auto dyn = std::get<0>(ious.topk(k10, 1)).sum(1).to(torch::kInt32).clamp_min(1).to(torch::kCPU);
    auto matching = torch::zeros({G, n}, cost.options());
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k = dyn[g].item<int32_t>();
      auto pos = std::get<1>(cost[g].topk(k, 0, /*largest=*/false));
      matching[g].index_fill_(0, pos, 1.0);
    }
    // An anchor taken by several gts keeps the cheapest.
    auto taken = matching.sum(0);
    auto multi = taken > 1;
    auto best = torch::zeros_like(matching).scatter_(0, cost.argmin(0, true), 1.0);
    matching = torch::where(multi.unsqueeze(0), best, matching);
    auto fg_in = taken > 0;                                                      // [n]
    auto sel = fg_in.nonzero().squeeze(1);
    a.num_fg = sel.size(0);
    a.fg.index_fill_(0, cidx.index_select(0, sel), true);
    auto m = matching.index_select(1, sel);
    a.matched = m.argmax(0);
    a.ious = (m * ious.index_select(1, sel)).sum(0);
    return a;
  }

 private:
  int64_t nc_;
  double reg_weight_;
};

}  // namespace libreyolo::families::yolov7
