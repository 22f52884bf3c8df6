// DEIMv2Criterion's controls over the D-FINE-line criterion (nn/detr/dfine_criterion.hpp options, the
// original's models/deimv2/loss.py and matcher.py): losses ("mal", "boxes") without the local FGL / DDF
// terms, box terms on each output's own match when use_uni_set is off, and the matcher's change to
// -score x IoU^alpha from matcher_change_epoch on.
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/nn/detr/dfine_criterion.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>
#include <vector>

namespace detr = libreyolo::nn::detr;
using libreyolo::families::deimv2::DEIMv2;
using libreyolo::families::deimv2::DEIMv2Options;

namespace {

std::vector<detr::DetrTarget> two_targets() {
  std::vector<detr::DetrTarget> t(2);
  t[0].labels = torch::tensor({1, 2}, torch::kLong);
  t[0].boxes = torch::tensor({{0.3f, 0.3f, 0.2f, 0.2f}, {0.7f, 0.6f, 0.3f, 0.4f}});
  t[1].labels = torch::tensor({0}, torch::kLong);
  t[1].boxes = torch::tensor({{0.5f, 0.5f, 0.5f, 0.5f}});
  return t;
}

detr::DFineOutput training_output(const std::string& size, const std::vector<detr::DetrTarget>& t) {
  torch::manual_seed(3);
  DEIMv2 net(DEIMv2Options{size, 3, 0});
  net->train();
  auto out = net->forward(torch::rand({2, 3, 64, 64}));
  return out.run(&t);
}

}  // namespace

TEST_CASE("deimv2 criterion: atto..pico's losses (mal, boxes): no FGL / DDF term, box terms on each output's own match") {
  const auto t = two_targets();
  const auto out = training_output("atto", t);
  detr::DFineCriterionOptions o;
  o.num_classes = 3;
  o.class_loss = detr::DFineClassLoss::mal;
  o.gamma = 1.5;
  libreyolo::families::deimv2::DEIMv2V::criterion_options("atto", o);
  CHECK_FALSE(o.local_losses);
  CHECK_FALSE(o.uni_set);
  CHECK(o.matcher_change_epoch == 450);
  const auto l = detr::DFineCriterion(o)(out, t);
  CHECK(std::isfinite(l.total.item<double>()));
  CHECK(l.items[3].item<double>() == 0.0);
  CHECK(l.items[4].item<double>() == 0.0);
  for (const auto& [name, v] : l.terms) {
    CHECK_MESSAGE(name.find("fgl") == std::string::npos, name);
    CHECK_MESSAGE(name.find("ddf") == std::string::npos, name);
  }
  // The last layer's L1 on its own match, normalised by the batch's 3 boxes: recomputed here.
  detr::DFineCriterion c(o);
  const auto m = c.match({{out.pred_logits, out.pred_boxes}}, t).front();
  double l1 = 0;
  for (size_t i = 0; i < t.size(); ++i)
    l1 += (out.pred_boxes[static_cast<int64_t>(i)].index_select(0, m[i].first) - t[i].boxes.index_select(0, m[i].second)).abs().sum().item<double>();
  double ours = -1;
  for (const auto& [name, v] : l.terms)
    if (name == "loss_bbox") ours = v.item<double>();
  CHECK(ours == doctest::Approx(l1 / 3.0 * 5.0).epsilon(1e-5));
  // n keeps DEIM's criterion: the union and the local terms.
  detr::DFineCriterionOptions on;
  libreyolo::families::deimv2::DEIMv2V::criterion_options("n", on);
  CHECK(on.local_losses);
  CHECK(on.uni_set);
  CHECK(on.matcher_change_epoch == 136);
  // The union with no local terms is not a combination the original has.
  detr::DFineCriterionOptions bad;
  bad.uni_set = false;
  CHECK_THROWS(detr::DFineCriterion(bad));
}

TEST_CASE("deimv2 criterion: from matcher_change_epoch on the matching cost is -sigmoid(logit) x IoU^alpha") {
  detr::DFineCriterionOptions o;
  o.num_classes = 2;
  o.matcher_change_epoch = 5;
  o.iou_order_alpha = 4.0;
  detr::DFineCriterion c(o);
  const auto logits = torch::tensor({{{0.3f, -1.0f}, {2.0f, 0.5f}}});       // [1, 2, 2]
  const auto boxes = torch::tensor({{{0.5f, 0.5f, 0.4f, 0.4f}, {0.5f, 0.5f, 0.2f, 0.4f}}});
  const auto ids = torch::tensor({{1}}, torch::kLong);           // [1, 1]: one image's one target slot
  const auto tb = torch::tensor({{{0.5f, 0.5f, 0.4f, 0.4f}}});   // [1, 1, 4]
  const auto before = c.cost_matrix(logits, boxes, ids, tb);
  c.set_epoch(5);
  const auto after = c.cost_matrix(logits, boxes, ids, tb);
  CHECK_FALSE(torch::allclose(before, after));
  // Query 0: the same box (IoU 1); query 1: half the width inside it (IoU 0.5).
  CHECK(after[0][0][0].item<double>() == doctest::Approx(-1.0 / (1.0 + std::exp(1.0))));
  CHECK(after[0][1][0].item<double>() == doctest::Approx(-1.0 / (1.0 + std::exp(-0.5)) * std::pow(0.5, 4)));
}

TEST_CASE("deimv2 family: the recipe per size and the model names") {
  using F = libreyolo::DEIMv2Family;
  CHECK(F::name == "deimv2");
  CHECK(F::sizes.size() == 8);
  F atto("atto");
  const auto so = atto.size_overrides();
  CHECK(std::find(so.begin(), so.end(), "imgsz=320") != so.end());
  CHECK(std::find(so.begin(), so.end(), "lr0=0.002") != so.end());
  F n("n");
  const auto sn = n.size_overrides();
  CHECK(std::find(sn.begin(), sn.end(), "min_lr_ratio=1.0") != sn.end());
  // The original's DEIMv2FlatCosineScheduler with each size's flat_epochs (DEIMV2_SIZE_DEFAULTS).
  {
    libreyolo::TrainConfig cfg;
    libreyolo::apply_overrides(cfg, libreyolo::family_traits<F>::overrides);
    CHECK(cfg.scheduler == "deimv2_flat_cosine");
    CHECK(std::find(so.begin(), so.end(), "flat_epochs=250") != so.end());
    CHECK(std::find(sn.begin(), sn.end(), "flat_epochs=7800") != sn.end());
    const auto sx = F("x").size_overrides();
    CHECK(std::find(sx.begin(), sx.end(), "flat_epochs=29") != sx.end());
  }
  CHECK(libreyolo::family_traits<F>::amp_default);
  CHECK(libreyolo::family_traits<F>::capture_region == libreyolo::CaptureRegion::backbone_encoder);
  CHECK(std::find(so.begin(), so.end(), "multi_scale=false") != so.end());  // base_size_repeat None: no resizing
  CHECK_THROWS_AS(F("q"), libreyolo::ConfigError);
  // The recipe table's own refusal names the table's sizes (families/sizes.hpp require_row).
  CHECK_THROWS_WITH_AS(libreyolo::families::deimv2::deimv2_recipe("q"),
                       "model=deimv2q: unknown size; available: deimv2atto, deimv2femto, deimv2pico, deimv2n, deimv2s, deimv2m, "
                       "deimv2l, deimv2x",
                       libreyolo::ConfigError);
  // One parameter group entry per tensor: the shared box head once; the backbone at lr x 0.5.
  F a("atto");
  a.restore({{"names", std::vector<std::string>(80, "c")}});
  auto anet = a.make_network();
  const auto groups = a.param_groups(*anet, 1e-4);
  int64_t count = 0;
  for (const auto& g : groups) {
    for (const auto& p : g.params) count += p.numel();
    if (g.name.rfind("backbone", 0) == 0) CHECK(g.lr_mult == 0.5);
  }
  CHECK(count == 508983);  // the fixture's n_trainable: each tensor once
}

TEST_CASE("deimv2 family: the ViT sizes' recipe (DEIMV2_SIZE_DEFAULTS s..x) and their backbone group (the ViT only)") {
  using F = libreyolo::DEIMv2Family;
  const auto has = [](const std::vector<std::string>& v, const char* s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  const auto ss = F("s").size_overrides(), sl = F("l").size_overrides(), sx = F("x").size_overrides();
  CHECK(has(ss, "epochs=132"));
  CHECK(has(ss, "multi_scale=true"));
  CHECK(has(F("m").size_overrides(), "epochs=102"));
  CHECK(has(sl, "epochs=68"));
  CHECK(has(sl, "weight_decay=0.000125"));
  CHECK(has(sl, "no_aug_epochs=8"));
  CHECK(has(sx, "epochs=58"));
  CHECK(libreyolo::families::deimv2::DEIMv2V::base_size_repeat_of("s") == 20);
  CHECK(libreyolo::families::deimv2::DEIMv2V::base_size_repeat_of("m") == 6);
  CHECK(libreyolo::families::deimv2::DEIMv2V::aug_stop_epoch_ratio_of("x") == doctest::Approx(50.0 / 58.0));
  libreyolo::nn::detr::DFineCriterionOptions co;
  libreyolo::families::deimv2::DEIMv2V::criterion_options("x", co);
  CHECK(co.local_losses);
  CHECK(co.uni_set);
  CHECK(co.matcher_change_epoch == 45);
  // s: the backbone groups hold backbone.dinov3.* (at lr x 0.05), the adapter trains at the full lr.
  F s("s");
  s.restore({{"names", std::vector<std::string>(80, "c")}});
  auto net = s.make_network();
  const auto groups = s.param_groups(*net, 1e-4);
  std::unordered_set<const void*> vit;
  for (const auto& p : net->named_parameters())
    if (p.key().rfind("backbone.dinov3.", 0) == 0) vit.insert(p.value().unsafeGetTensorImpl());
  int64_t count = 0;
  size_t in_backbone = 0;
  for (const auto& g : groups) {
    const bool bb = g.name.rfind("backbone", 0) == 0;
    CHECK(g.lr_mult == (bb ? 0.05 : 1.0));
    for (const auto& p : g.params) {
      count += p.numel();
      CHECK(vit.count(p.unsafeGetTensorImpl()) == (bb ? 1u : 0u));
      in_backbone += bb;
    }
  }
  CHECK(in_backbone == vit.size());
  CHECK(count == 9779836);  // the fixture's n_trainable
}
