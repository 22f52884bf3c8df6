// RF-DETR's criterion (families/rfdetr/criterion.hpp) against the original's matcher + SetCriterion
// (tests/data/rfdetr/criterion_ref.json, made by tests/data/rfdetr/make_criterion_ref.py from LibreYOLO
// c41461e under PyTorch 1.13). Inputs are rebuilt here from the same exact integer hash (their sums are
// checked against the reference's first); then every returned term (the original's dict: loss_ce,
// class_error, loss_bbox, loss_giou, cardinality_error and their _i / _enc copies, in its order), the
// weighted total, the weight dict, every matching (last layer, aux layers, encoder; per image, 13 groups
// in training) and the gradients of the total on every input are compared.
// Cases: 13 groups x 300 queries with an image without targets; with targets in both; eval (one group);
// no targets at all (num_boxes clamped to 1); 3 groups x 6 queries (every cost block also solved by brute
// force in the script); the focal and varifocal flavours.
#include <libreyolo/families/rfdetr/criterion.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace rf = libreyolo::families::rfdetr;
using json = nlohmann::ordered_json;  // the weight dict's key order is checked

namespace {

std::vector<double> u01(int64_t n, int64_t seed) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t x = (static_cast<uint64_t>(i) * 2654435761ULL + static_cast<uint64_t>(seed) * 40503ULL + 12345ULL) % 4294967296ULL;
    x = (x * 1103515245ULL + 12345ULL) % 2147483648ULL;
    x = (x * 69069ULL + 1ULL) % 4294967296ULL;
    out[static_cast<size_t>(i)] = static_cast<double>(x) / 4294967296.0;
  }
  return out;
}

torch::Tensor ramp(int64_t n, int64_t seed, double lo, double hi) {
  auto u = u01(n, seed);
  for (auto& v : u) v = lo + (hi - lo) * v;
  return torch::tensor(u, torch::kDouble).to(torch::kFloat);
}

rf::RFDETRHeadOutput make_pred(int64_t B, int64_t Q, int64_t C, int64_t seed) {
  auto logits = ramp(B * Q * C, seed, -6.0, 1.0).view({B, Q, C});
  auto cxcy = ramp(B * Q * 2, seed + 1, 0.05, 0.95).view({B, Q, 2});
  auto wh = ramp(B * Q * 2, seed + 2, 0.02, 0.6).view({B, Q, 2});
  return {logits.requires_grad_(true), torch::cat({cxcy, wh}, -1).requires_grad_(true)};
}

std::vector<rf::DetrTarget> make_targets(const std::vector<int64_t>& counts, int64_t nb, int64_t seed) {
  std::vector<rf::DetrTarget> out;
  for (size_t b = 0; b < counts.size(); ++b) {
    const int64_t n = counts[b], s = seed + 100 * static_cast<int64_t>(b);
    std::vector<int64_t> labels;
    for (double x : u01(n, s)) labels.push_back(static_cast<int64_t>(x * static_cast<double>(nb)));
    auto cxcy = ramp(n * 2, s + 1, 0.1, 0.9).view({n, 2});
    auto wh = ramp(n * 2, s + 2, 0.05, 0.5).view({n, 2});
    out.push_back({torch::tensor(labels, torch::kLong).view({n}), torch::cat({cxcy, wh}, -1).clamp(0.0, 1.0)});
  }
  return out;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

json load_ref() {
  const auto p = std::filesystem::path(LIBREYOLO_SOURCE_DIR) / "tests" / "data" / "rfdetr" / "criterion_ref.json";
  std::ifstream f(p);
  REQUIRE_MESSAGE(f.good(), "missing " << p.string());
  return json::parse(f);
}

// The summed cost of a matching under a [Q, T] block of the cost matrix.
double matching_cost(const torch::Tensor& c, const std::vector<int64_t>& q, const std::vector<int64_t>& t, int64_t col0) {
  double s = 0;
  for (size_t k = 0; k < q.size(); ++k) s += c[q[k]][col0 + t[k]].item<double>();
  return s;
}

// One reference case's criterion and inputs, rebuilt (the inputs checked against the reference's sums).
struct RefCase {
  std::string name;
  bool training = false;
  int64_t B = 0, G = 1;
  std::vector<int64_t> counts;
  rf::RFDETRCriterionOptions o;
  std::vector<rf::RFDETRHeadOutput> preds;  // main, aux 0 .., enc
  std::vector<std::string> names;
  std::vector<rf::DetrTarget> targets;
  rf::RFDETROutput out;
};

RefCase build_case(const json& c) {
  RefCase rc;
  rc.name = c["name"];
  const bool training = rc.training = c["training"];
  const int64_t G = c["group_detr"], nq = c["queries_per_group"], nb = c["num_classes"], seed = c["seed"], L = c["dec_layers"];
  rc.G = G;
  const auto counts = rc.counts = c["counts"].get<std::vector<int64_t>>();
  const int64_t B = rc.B = static_cast<int64_t>(counts.size()), C = nb + 1, Q = nq * (training ? G : 1);
  auto& o = rc.o;
  o.num_classes = C;
  o.group_detr = G;
  o.dec_layers = L;
  const auto& a = c["args"];
  o.cls_loss_coef = a["cls_loss_coef"];
  o.bbox_loss_coef = a["bbox_loss_coef"];
  o.giou_loss_coef = a["giou_loss_coef"];
  o.matcher.cost_class = a["set_cost_class"];
  o.matcher.cost_bbox = a["set_cost_bbox"];
  o.matcher.cost_giou = a["set_cost_giou"];
  o.focal_alpha = a["focal_alpha"];
  const std::string flavour = c["flavour"];
  o.class_loss = flavour == "focal" ? rf::RFDETRClassLoss::Focal : flavour == "varifocal" ? rf::RFDETRClassLoss::Varifocal : rf::RFDETRClassLoss::IaBce;
  auto& preds = rc.preds;
  preds.push_back(make_pred(B, Q, C, seed));
  for (int64_t i = 0; i + 1 < L; ++i) preds.push_back(make_pred(B, Q, C, seed + 10 * (i + 1)));
  preds.push_back(make_pred(B, Q, C, seed + 500));
  auto& names = rc.names;
  names.push_back("main");
  for (int64_t i = 0; i + 1 < L; ++i) names.push_back("aux" + std::to_string(i));
  names.push_back("enc");
  for (size_t k = 0; k < preds.size(); ++k) {
    const auto& s = c["input_sums"][names[k]];
    REQUIRE(rel(preds[k].pred_logits.detach().to(torch::kDouble).sum().item<double>(), s[0]) < 1e-12);
    REQUIRE(rel(preds[k].pred_boxes.detach().to(torch::kDouble).sum().item<double>(), s[1]) < 1e-12);
  }
  rc.targets = make_targets(counts, nb, seed + 1000);
  for (size_t b = 0; b < rc.targets.size(); ++b) {
    CHECK(rc.targets[b].labels.sum().item<int64_t>() == c["target_sums"][b][0].get<int64_t>());
    if (counts[b] > 0) CHECK(rel(rc.targets[b].boxes.to(torch::kDouble).sum().item<double>(), c["target_sums"][b][1]) < 1e-12);
  }
  rc.out.pred_logits = preds[0].pred_logits;
  rc.out.pred_boxes = preds[0].pred_boxes;
  for (int64_t i = 0; i + 1 < L; ++i) rc.out.aux_outputs.push_back(preds[static_cast<size_t>(i + 1)]);
  rc.out.enc_outputs = preds.back();
  return rc;
}

}  // namespace

TEST_CASE("rfdetr criterion: every term, the matching and the gradients equal the original's") {
  const json ref = load_ref();
  REQUIRE(ref["cases"].size() >= 7);
  for (const auto& c : ref["cases"]) {
    const auto rc = build_case(c);
    const std::string& name = rc.name;
    CAPTURE(name);
    const bool training = rc.training;
    const int64_t B = rc.B;
    const auto& counts = rc.counts;
    const auto& o = rc.o;
    const auto& a = c["args"];
    const std::string flavour = c["flavour"];
    if (flavour == "ia_bce") {  // the library's defaults are the original's defaults
      const rf::RFDETRCriterionOptions d;
      CHECK(a["ia_bce_loss"].get<bool>());
      CHECK(d.class_loss == rf::RFDETRClassLoss::IaBce);
      CHECK(d.cls_loss_coef == o.cls_loss_coef);
      CHECK(d.bbox_loss_coef == o.bbox_loss_coef);
      CHECK(d.giou_loss_coef == o.giou_loss_coef);
      CHECK(d.matcher.cost_class == o.matcher.cost_class);
      CHECK(d.matcher.cost_bbox == o.matcher.cost_bbox);
      CHECK(d.matcher.cost_giou == o.matcher.cost_giou);
      CHECK(d.focal_alpha == o.focal_alpha);
      CHECK(d.group_detr == 13);
      CHECK(!a["sum_group_losses"].get<bool>());
      CHECK(!a["use_position_supervised_loss"].get<bool>());
    }
    const rf::RFDETRCriterion crit(o);

    // weight dict: keys, order, values
    const auto& wd = c["weight_dict"];
    REQUIRE(crit.weight_dict().size() == wd.size());
    {
      size_t k = 0;
      for (auto it = wd.begin(); it != wd.end(); ++it, ++k) {
        CHECK(crit.weight_dict()[k].first == it.key());
        CHECK(crit.weight_dict()[k].second == it.value().get<double>());
      }
    }
    const auto& preds = rc.preds;
    const auto& names = rc.names;
    const auto& targets = rc.targets;
    const auto& out = rc.out;

    const auto r = crit(out, targets, training);

    // terms: keys in the original's order, values at 1e-5 relative
    const auto keys = c["loss_keys"].get<std::vector<std::string>>();
    REQUIRE(r.terms.size() == keys.size());
    double worst = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
      CAPTURE(keys[k]);
      CHECK(r.terms[k].first == keys[k]);
      const double ours = r.terms[k].second.item<double>(), theirs = c["losses"][keys[k]];
      if (theirs == 0.0) {
        CHECK(ours == 0.0);
      } else {
        CHECK(rel(ours, theirs) < 1e-5);
        worst = std::max(worst, rel(ours, theirs));
      }
    }
    CHECK(rel(r.total.item<double>(), c["total"]) < 1e-5);
    MESSAGE(name << ": worst term " << worst << " relative, total " << rel(r.total.item<double>(), c["total"]));

    // matchings: identical, or (exact cost ties) equally optimal
    REQUIRE(r.indices.size() == names.size());
    for (size_t k = 0; k < names.size(); ++k) {
      const auto& refk = c["indices"][names[k]];
      REQUIRE(static_cast<int64_t>(r.indices[k].size()) == B);
      torch::Tensor cost;
      for (int64_t b = 0; b < B; ++b) {
        CAPTURE(names[k]);
        CAPTURE(b);
        const auto q = libreyolo::nn::detr::set_batch::host_vector(r.indices[k][static_cast<size_t>(b)].first);
        const auto t = libreyolo::nn::detr::set_batch::host_vector(r.indices[k][static_cast<size_t>(b)].second);
        const auto rq = refk[b][0].get<std::vector<int64_t>>(), rt = refk[b][1].get<std::vector<int64_t>>();
        if (q == rq && t == rt) continue;
        // not identical: only an exact cost tie may explain it, so both must have the same summed cost
        if (!cost.defined()) {
          std::vector<torch::Tensor> ids, bx;
          for (auto& tg : targets) ids.push_back(tg.labels), bx.push_back(tg.boxes);
          cost = crit.matcher().cost_matrix(preds[k].pred_logits, preds[k].pred_boxes, torch::cat(ids), torch::cat(bx)).to(torch::kDouble);
        }
        int64_t col0 = 0;
        for (int64_t bb = 0; bb < b; ++bb) col0 += counts[static_cast<size_t>(bb)];
        const double ours = matching_cost(cost[b], q, t, col0), theirs = matching_cost(cost[b], rq, rt, col0);
        MESSAGE("matching differs from the original's (" << names[k] << ", image " << b << "): cost " << ours << " vs " << theirs);
        CHECK(q.size() == rq.size());
        CHECK(std::abs(ours - theirs) <= 1e-9 * std::max(1.0, std::abs(theirs)));
      }
    }

    // gradients of the total on every input
    r.total.backward();
    for (size_t k = 0; k < preds.size(); ++k) {
      CAPTURE(names[k]);
      const auto& g = c["grads"][names[k]];
      const auto gl = preds[k].pred_logits.grad().to(torch::kDouble), gb = preds[k].pred_boxes.grad().to(torch::kDouble);
      const double l_abs = gl.abs().sum().item<double>(), b_abs = gb.abs().sum().item<double>();
      CHECK(rel(l_abs, g[1]) < 1e-5);
      CHECK(std::abs(gl.sum().item<double>() - g[0].get<double>()) <= 1e-5 * std::max(g[1].get<double>(), 1e-30));
      if (g[3].get<double>() == 0.0) {
        CHECK(b_abs == 0.0);
      } else {
        CHECK(rel(b_abs, g[3]) < 1e-5);
        CHECK(std::abs(gb.sum().item<double>() - g[2].get<double>()) <= 1e-5 * g[3].get<double>());
      }
    }
  }
}

// The fixed-slot form (issue 44's segmented step): on every reference case, from padded targets, the same
// matching as the per-image form (each output, each image: the same (query, target) pairs), the class terms
// and cardinality bit for bit, the box terms up to their sums' order (1e-6), the same gradients (1e-5); and
// the segmented path (match_costs on the "device", one copy, solve on the host, the loss from its slots)
// equal to the form that matches itself, bit for bit.
TEST_CASE("rfdetr criterion: the fixed-slot form equals the per-image form on every reference case") {
  const json ref = load_ref();
  REQUIRE(ref["cases"].size() >= 7);
  namespace sb = libreyolo::nn::detr::set_batch;
  for (const auto& c : ref["cases"]) {
    const auto rc = build_case(c);
    CAPTURE(rc.name);
    const rf::RFDETRCriterion crit(rc.o);
    const auto per_image = crit(rc.out, rc.targets, rc.training);
    const auto padded = libreyolo::nn::detr::pad_targets(rc.targets, torch::kCPU);
    const auto fixed = crit(rc.out, padded, rc.training);
    REQUIRE(fixed.terms.size() == per_image.terms.size());
    for (size_t k = 0; k < fixed.terms.size(); ++k) {
      const auto& [key, v] = fixed.terms[k];
      CAPTURE(key);
      CHECK(key == per_image.terms[k].first);
      const auto& w = per_image.terms[k].second;
      const bool exact = key.rfind("loss_ce", 0) == 0 || key.rfind("cardinality_error", 0) == 0;
      if (exact) CHECK(v.equal(w));
      else CHECK(std::abs(v.item<double>() - w.item<double>()) <= 1e-6 * std::max(1.0, std::abs(w.item<double>())));
    }
    CHECK(std::abs(fixed.total.item<double>() - per_image.total.item<double>()) <= 1e-6 * std::abs(per_image.total.item<double>()));

    // the matching: each output's slots as per-image (query, target) pairs, queries ascending
    const int64_t G = rc.training ? rc.o.group_detr : 1, M = padded.M;
    const auto layout = rf::RFDETRCriterion::cost_layout(rc.out, rc.B, M, G);
    const auto host = crit.match_costs(rc.out, padded, rc.training).contiguous();
    const auto slots = rf::RFDETRCriterion::solve(host, layout, /*pinned=*/false);
    REQUIRE(slots.numel() == layout.slot_numel());
    const int64_t* sp = slots.data_ptr<int64_t>();
    {
      // the layout's stacks hold the outputs in order of first appearance of their query count
      const auto outs = rf::RFDETRCriterion::matched_outputs(rc.out);
      std::vector<int64_t> order;
      for (const auto& st : layout.stacks)
        for (size_t o = 0; o < outs.size(); ++o)
          if (outs[o].first.size(1) / G == st[1]) order.push_back(static_cast<int64_t>(o));
      REQUIRE(order.size() == outs.size());
      for (int64_t o : order) {
        const int64_t gq = outs[static_cast<size_t>(o)].first.size(1) / G;
        for (int64_t b = 0; b < rc.B; ++b) {
          std::vector<std::pair<int64_t, int64_t>> pairs;
          for (int64_t g = 0; g < G; ++g)
            for (int64_t j = 0; j < M; ++j)
              if (const int64_t q = sp[(b * G + g) * M + j]; q >= 0) pairs.emplace_back(q + g * gq, j);
          std::sort(pairs.begin(), pairs.end());
          std::vector<int64_t> q, t;
          for (auto& [a, bb] : pairs) q.push_back(a), t.push_back(bb);
          CAPTURE(o);
          CAPTURE(b);
          const auto& want = per_image.indices[static_cast<size_t>(o)][static_cast<size_t>(b)];
          CHECK(q == sb::host_vector(want.first));
          CHECK(t == sb::host_vector(want.second));
        }
        sp += rc.B * G * M;
      }
    }
    // the segmented path: the loss from the solve's slots equals the self-matching fixed form
    const auto seg = crit(rc.out, padded, rc.training, slots);
    REQUIRE(seg.terms.size() == fixed.terms.size());
    for (size_t k = 0; k < seg.terms.size(); ++k) CHECK(seg.terms[k].second.equal(fixed.terms[k].second));

    // gradients of the total on every input
    std::vector<torch::Tensor> inputs;
    for (const auto& p : rc.preds) inputs.push_back(p.pred_logits), inputs.push_back(p.pred_boxes);
    const auto gw = torch::autograd::grad({per_image.total}, inputs, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
    const auto gf = torch::autograd::grad({fixed.total}, inputs, {}, true, false, true);
    for (size_t k = 0; k < inputs.size(); ++k) {
      CAPTURE(k);
      REQUIRE(gw[k].defined() == gf[k].defined());
      if (gw[k].defined()) CHECK(torch::allclose(gf[k], gw[k], 1e-5, 1e-7));
    }
  }
}

TEST_CASE("rfdetr criterion: options for a network; a cost matrix with NaN is sanitised as the original") {
  rf::RFDETROptions net;
  net.size = "s";
  net.num_classes = 3;
  const auto o = rf::RFDETRCriterion::for_network(net);
  CHECK(o.num_classes == 4);
  CHECK(o.dec_layers == 3);
  CHECK(o.group_detr == 13);
  const rf::RFDETRCriterion crit(o);
  CHECK(crit.weight_dict().size() == 12);  // 3 + 2 aux x 3 + 3 enc
  CHECK(crit.weight_dict().back().first == "loss_giou_enc");

  // One NaN box: its row's costs become max finite + max |finite| + 1, larger than every valid cost, so
  // the query is never matched while another can be.
  auto logits = torch::zeros({1, 4, 4});
  auto boxes = torch::tensor({0.5f, 0.5f, 0.2f, 0.2f, 0.3f, 0.3f, 0.1f, 0.1f, 0.7f, 0.7f, 0.2f, 0.3f, 0.4f, 0.6f, 0.3f, 0.2f}).view({1, 4, 4});
  boxes[0][0][0] = std::nanf("");
  std::vector<rf::DetrTarget> t{{torch::tensor({1, 2}, torch::kLong), torch::tensor({0.5f, 0.5f, 0.2f, 0.2f, 0.7f, 0.7f, 0.2f, 0.3f}).view({2, 4})}};
  const auto c = crit.matcher().cost_matrix(logits, boxes, t[0].labels, t[0].boxes);
  CHECK(torch::isfinite(c).all().item<bool>());
  const auto m = crit.matcher()(logits, boxes, t, 1);
  const auto q = libreyolo::nn::detr::set_batch::host_vector(m[0].first);
  CHECK(q == std::vector<int64_t>{2, 3});
}

TEST_CASE("rfdetr criterion on the network's training forward: 13 groups matched separately, every group trained") {
  torch::manual_seed(3);
  rf::RFDETROptions no;
  no.size = "n";
  no.num_classes = 4;
  rf::RFDETR net(no);
  net->train();
  const auto out = net->forward(torch::rand({2, 3, 64, 64}));
  const rf::RFDETRCriterion crit(rf::RFDETRCriterion::for_network(no));
  std::vector<rf::DetrTarget> t{{torch::tensor({1, 3}, torch::kLong), torch::tensor({0.3f, 0.4f, 0.2f, 0.3f, 0.7f, 0.6f, 0.4f, 0.5f}).view({2, 4})},
                                {torch::zeros({0}, torch::kLong), torch::zeros({0, 4})}};
  const auto r = crit(out, t, true);
  // n: 2 decoder layers -> main (5 terms), _0 (4: no class_error), _enc (4)
  REQUIRE(r.terms.size() == 13);
  CHECK(r.terms[0].first == "loss_ce");
  CHECK(r.terms.back().first == "cardinality_error_enc");
  double sum = 0;
  for (auto& [k, v] : r.terms)
    for (auto& [wk, w] : crit.weight_dict())
      if (wk == k) sum += v.item<double>() * w;
  CHECK(std::isfinite(r.total.item<double>()));
  CHECK(std::abs(r.total.item<double>() - sum) <= 1e-5 * std::abs(sum));
  // matching: per group, both targets, each to a query of that group's block; nothing for the empty image
  const std::vector<int64_t> block{300, 300, 16};  // main, aux, enc (4 x 4 tokens selected per group)
  REQUIRE(r.indices.size() == 3);
  for (size_t k = 0; k < 3; ++k) {
    const auto q = libreyolo::nn::detr::set_batch::host_vector(r.indices[k][0].first);
    const auto j = libreyolo::nn::detr::set_batch::host_vector(r.indices[k][0].second);
    REQUIRE(q.size() == 26);
    for (int64_t g = 0; g < 13; ++g) {
      std::vector<int64_t> tg;
      for (size_t p = 0; p < 2; ++p) {
        const auto qq = q[static_cast<size_t>(2 * g) + p];
        CHECK(qq >= g * block[k]);
        CHECK(qq < (g + 1) * block[k]);
        tg.push_back(j[static_cast<size_t>(2 * g) + p]);
      }
      std::sort(tg.begin(), tg.end());
      CHECK(tg == std::vector<int64_t>{0, 1});
    }
    CHECK(r.indices[k][1].first.numel() == 0);
  }
  r.total.backward();
  for (int64_t g = 0; g < 13; ++g) {
    CAPTURE(g);
    const auto& gw = net->transformer->enc_out_class_embed[g]->as<torch::nn::LinearImpl>()->weight.grad();
    REQUIRE(gw.defined());
    CHECK(gw.abs().sum().item<double>() > 0);
    CHECK(net->query_feat->weight.grad().narrow(0, g * 300, 300).abs().sum().item<double>() > 0);
  }
}
