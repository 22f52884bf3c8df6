// The D-FINE / DEIM criterion (nn/detr/dfine_criterion.hpp) against the original's DFINECriterion and
// DEIMCriterion: tests/dfine/data/make_loss_case.py ran both on one random training output (3 decoder
// layers, the pre head, one encoder output, 3 denoising layers and the denoising pre head; 3 images
// holding 3, 2 and 0 targets) and stored the inputs, every matching, every named loss term (38 per
// variant) and the gradients of the total for some inputs. Here the same inputs go through ours.
#include <libreyolo/nn/detr/dfine_criterion.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace detr = libreyolo::nn::detr;

namespace {

std::string target_blob(size_t image, const char* what) {
  std::string s = "t";
  s += std::to_string(image);
  s += '_';
  s += what;
  return s;
}

struct Case {
  nlohmann::json j;
  std::vector<char> bin;
  std::map<std::string, torch::Tensor> leaves;  // requires_grad inputs by blob name

  Case() {
    const std::string dir = std::string(LIBREYOLO_SOURCE_DIR) + "/tests/dfine/data/";
    std::ifstream js(dir + "loss_case.json");
    REQUIRE(js.good());
    js >> j;
    std::ifstream bs(dir + "loss_case.bin", std::ios::binary);
    REQUIRE(bs.good());
    bin.assign(std::istreambuf_iterator<char>(bs), {});
  }
  torch::Tensor blob(const std::string& name) const {
    const auto& b = j.at("blobs").at(name);
    std::vector<int64_t> shape = b.at("shape").get<std::vector<int64_t>>();
    const bool i64 = b.at("dtype") == "int64";
    auto t = torch::empty(shape, i64 ? torch::kLong : torch::kFloat32);
    const size_t bytes = static_cast<size_t>(t.numel()) * (i64 ? 8 : 4);
    const auto off = b.at("offset").get<size_t>();
    REQUIRE(off + bytes <= bin.size());
    if (bytes) std::memcpy(t.data_ptr(), bin.data() + off, bytes);
    return t;
  }
  torch::Tensor leaf(const std::string& name) {
    auto it = leaves.find(name);
    if (it != leaves.end()) return it->second;
    auto t = blob(name).requires_grad_(true);
    leaves[name] = t;
    return t;
  }
  std::vector<detr::DetrTarget> targets() const {
    std::vector<detr::DetrTarget> t;
    for (size_t i = 0; i < j.at("num_gts").size(); ++i)
      t.push_back({blob(target_blob(i, "labels")), blob(target_blob(i, "boxes"))});
    return t;
  }
  // The original's training output dict as our struct (fresh leaves: gradients start at none).
  detr::DFineOutput output() {
    leaves.clear();
    const int L = j.at("num_layers").get<int>();
    detr::DFineOutput o;
    o.training = true;
    auto layer = [&](const std::string& p, const torch::Tensor& ref) {
      detr::DFineLayerOutput l;
      l.pred_logits = leaf(p + "_logits");
      l.pred_boxes = leaf(p + "_boxes");
      l.pred_corners = leaf(p + "_corners");
      l.ref_points = ref;
      return l;
    };
    const auto ref = blob("ref_points"), dn_ref = blob("dn_ref_points");
    std::vector<detr::DFineLayerOutput> layers, dn;
    for (int l = 0; l < L; ++l) layers.push_back(layer("layer" + std::to_string(l), ref));
    for (int l = 0; l < L; ++l) dn.push_back(layer("dn_layer" + std::to_string(l), dn_ref));
    const auto& last = layers.back();
    o.pred_logits = last.pred_logits;
    o.pred_boxes = last.pred_boxes;
    o.pred_corners = last.pred_corners;
    o.ref_points = last.ref_points;
    o.up = torch::tensor({j.at("up").get<float>()});
    o.reg_scale = torch::tensor({j.at("reg_scale").get<float>()});
    o.reg_max = j.at("reg_max").get<int64_t>();
    for (int l = 0; l + 1 < L; ++l) {
      auto a = layers[static_cast<size_t>(l)];
      a.teacher_corners = last.pred_corners;
      a.teacher_logits = last.pred_logits;
      o.aux_outputs.push_back(a);
    }
    o.pre_outputs = {leaf("pre_logits"), leaf("pre_boxes")};
    o.enc_aux_outputs.push_back({leaf("enc0_logits"), leaf("enc0_boxes")});
    for (auto& d : dn) {
      d.teacher_corners = dn.back().pred_corners;
      d.teacher_logits = dn.back().pred_logits;
      o.dn_outputs.push_back(d);
    }
    o.dn_pre_outputs = {leaf("dn_pre_logits"), leaf("dn_pre_boxes")};
    int64_t G = 0;
    for (const auto& n : j.at("num_gts")) G = std::max(G, n.get<int64_t>());
    const auto meta = detr::denoising_meta(G, j.at("dn_num_group").get<int64_t>(), j.at("dn_queries").get<int64_t>(),
                                           j.at("Q").get<int64_t>(), torch::kCPU);
    o.dn_meta = meta;
    return o;
  }
};

detr::DFineCriterion criterion(const std::string& variant, int64_t num_classes) {
  detr::DFineCriterionOptions o;
  o.num_classes = num_classes;
  if (variant == "deim") {
    o.class_loss = detr::DFineClassLoss::mal;
    o.gamma = 1.5;
  }
  return detr::DFineCriterion(o);
}

std::vector<std::vector<std::vector<int64_t>>> as_lists(const detr::DFineMatch& m) {
  std::vector<std::vector<std::vector<int64_t>>> out;
  for (auto& [s, t] : m) {
    auto sc = s.contiguous(), tc = t.contiguous();
    out.push_back({std::vector<int64_t>(sc.data_ptr<int64_t>(), sc.data_ptr<int64_t>() + sc.numel()),
                   std::vector<int64_t>(tc.data_ptr<int64_t>(), tc.data_ptr<int64_t>() + tc.numel())});
  }
  return out;
}

}  // namespace

TEST_CASE("D-FINE criterion: the matchings and GO-LSD's union equal the original's") {
  Case c;
  auto out = c.output();
  const auto t = c.targets();
  const auto crit = criterion("dfine", c.j.at("C").get<int64_t>());
  std::vector<std::pair<torch::Tensor, torch::Tensor>> outs{{out.pred_logits, out.pred_boxes}};
  for (auto& a : out.aux_outputs) outs.emplace_back(a.pred_logits, a.pred_boxes);
  outs.emplace_back(out.pre_outputs.pred_logits, out.pre_outputs.pred_boxes);
  outs.emplace_back(out.enc_aux_outputs[0].pred_logits, out.enc_aux_outputs[0].pred_boxes);
  const auto m = crit.match(outs, t);
  const auto& ref = c.j.at("variants").at("dfine").at("matches");
  CHECK(as_lists(m[0]) == ref.at("main").get<std::vector<std::vector<std::vector<int64_t>>>>());
  CHECK(as_lists(m[1]) == ref.at("aux")[0].get<std::vector<std::vector<std::vector<int64_t>>>>());
  CHECK(as_lists(m[2]) == ref.at("aux")[1].get<std::vector<std::vector<std::vector<int64_t>>>>());
  CHECK(as_lists(m[3]) == ref.at("aux")[2].get<std::vector<std::vector<std::vector<int64_t>>>>());
  CHECK(as_lists(m[4]) == ref.at("enc")[0].get<std::vector<std::vector<std::vector<int64_t>>>>());
  const auto go = detr::DFineCriterion::go_indices({&m[0], &m[1], &m[2], &m[3], &m[4]});
  const auto go_ref = ref.at("go").get<std::vector<std::vector<std::vector<int64_t>>>>();
  CHECK(as_lists(go) == go_ref);
  // The union holds more pairs than targets (several queries on one target) and one query each.
  CHECK(go_ref[0][0].size() > 3);
}

TEST_CASE("D-FINE (VFL) and DEIM (MAL) criteria: every term and the gradients equal the original's") {
  Case c;
  for (const std::string variant : {"dfine", "deim"}) {
    CAPTURE(variant);
    auto out = c.output();
    const auto crit = criterion(variant, c.j.at("C").get<int64_t>());
    const auto l = crit(out, c.targets());
    const auto& ref = c.j.at("variants").at(variant);
    const auto& terms = ref.at("terms");
    CHECK(l.terms.size() == terms.size());
    std::array<double, 5> items{};
    for (auto& [name, v] : l.terms) {
      CAPTURE(name);
      REQUIRE(terms.contains(name));
      const double want = terms.at(name).get<double>();
      const double got = v.item<double>();
      CHECK(std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want)));
    }
    // Both classification losses, the zero DDF of the last denoising layer (its own teacher).
    CHECK(terms.contains(variant == "dfine" ? "loss_vfl_aux_1" : "loss_mal_aux_1"));
    CHECK(terms.at("loss_ddf_dn_2").get<double>() == 0.0);
    CHECK(terms.at("loss_ddf_aux_0").get<double>() > 0.0);
    for (auto& [k, v] : terms.items()) {
      const double x = v.get<double>();
      const int i = k.rfind("loss_bbox", 0) == 0 ? 1 : k.rfind("loss_giou", 0) == 0 ? 2 : k.rfind("loss_fgl", 0) == 0 ? 3
                    : k.rfind("loss_ddf", 0) == 0  ? 4 : 0;
      items[static_cast<size_t>(i)] += x;
    }
    for (int i = 0; i < 5; ++i) CHECK(l.items[i].item<double>() == doctest::Approx(items[static_cast<size_t>(i)]).epsilon(1e-5));
    CHECK(l.total.item<double>() == doctest::Approx(ref.at("total").get<double>()).epsilon(1e-5));

    l.total.backward();
    for (const std::string g : {"layer2_logits", "layer2_corners", "layer0_corners", "layer0_boxes", "pre_boxes", "dn_layer0_corners",
                                "enc0_logits"}) {
      CAPTURE(g);
      const auto want = c.blob(variant + "_grad_" + g);
      const auto got = c.leaves.at(g).grad();
      REQUIRE(got.defined());
      const double scale = std::max(1e-3, want.abs().max().item<double>());
      CHECK((got - want).abs().max().item<double>() <= 1e-5 * scale);
    }
  }
}

TEST_CASE("D-FINE criterion: a batch without targets gives the background class term only") {
  Case c;
  auto out = c.output();
  std::vector<detr::DetrTarget> none;
  for (int i = 0; i < 3; ++i) none.push_back({torch::zeros({0}, torch::kLong), torch::zeros({0, 4})});
  out.dn_meta.reset();
  out.dn_outputs.clear();
  out.dn_pre_outputs = {};
  const auto l = criterion("dfine", 4)(out, none);
  CHECK(std::isfinite(l.total.item<double>()));
  CHECK(l.items[0].item<double>() > 0);
  for (int i = 1; i < 4; ++i) CHECK(l.items[i].item<double>() == 0);
  // DDF still distils the unmatched queries into the teacher's.
  CHECK(l.items[4].item<double>() > 0);
  l.total.backward();
  CHECK(c.leaves.at("layer0_corners").grad().abs().sum().item<double>() > 0);
}
