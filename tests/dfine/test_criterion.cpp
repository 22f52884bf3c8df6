// The D-FINE-line criterion (nn/detr/dfine_criterion.hpp) against the original's: tests/dfine/data/
// make_loss_case.py ran its DFINECriterion, DEIMCriterion, DEIMv2Criterion (as DEIMv2Trainer builds it for s
// and atto, each also past the matcher change) and ECCriterion on one random training output (3 decoder
// layers, the pre head, one encoder output, 3 denoising layers and the denoising pre head; 3 images holding
// 3, 2 and 0 targets) and stored the inputs, every matching, every named loss term (38 per variant, 27
// without the local terms) and the gradients of the total for some inputs. Here the same inputs go through
// ours, with the options each family trains with.
#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/ec/family.hpp>
#include <libreyolo/nn/detr/dfine_criterion.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
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
  // The variants past DEIMv2's matcher change ("*_late") match large central boxes (make_loss_case.py).
  std::vector<detr::DetrTarget> targets(const std::string& variant = "dfine") const {
    const bool late = variant.size() > 5 && variant.compare(variant.size() - 5, 5, "_late") == 0;
    std::vector<detr::DetrTarget> t;
    for (size_t i = 0; i < j.at("num_gts").size(); ++i)
      t.push_back({blob(target_blob(i, "labels")), blob(target_blob(i, late ? "late_boxes" : "boxes"))});
    return t;
  }
  std::vector<std::string> variants() const {
    std::vector<std::string> v;
    for (auto& [k, _] : j.at("variants").items()) v.push_back(k);
    return v;
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

// The criterion each variant's family trains with, at the epoch the original's was called at.
detr::DFineCriterion criterion(const Case& c, const std::string& variant) {
  const int64_t nc = c.j.at("C").get<int64_t>();
  const auto opts = variant == "dfine"                     ? libreyolo::DFineFamily::criterion_options("n", nc)
                    : variant == "deim"                    ? libreyolo::DEIMFamily::criterion_options("n", nc)
                    : variant.rfind("deimv2s", 0) == 0     ? libreyolo::DEIMv2Family::criterion_options("s", nc)
                    : variant.rfind("deimv2atto", 0) == 0  ? libreyolo::DEIMv2Family::criterion_options("atto", nc)
                    : variant == "ec"                      ? libreyolo::ECFamily::criterion_options("s", nc)
                                                           : throw std::invalid_argument("no family for variant " + variant);
  detr::DFineCriterion crit(opts);
  crit.set_epoch(c.j.at("epochs").value(variant, int64_t{0}));
  return crit;
}

bool has_local_terms(const std::string& variant) { return variant.rfind("deimv2atto", 0) != 0; }

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

TEST_CASE("D-FINE-line criteria: every family's matchings and GO-LSD's union equal the original's") {
  Case c;
  using Lists = std::vector<std::vector<std::vector<int64_t>>>;
  const auto names = c.variants();
  CHECK(names.size() == 7);
  for (const auto& variant : names) {
    CAPTURE(variant);
    auto out = c.output();
    const auto t = c.targets(variant);
    const auto crit = criterion(c, variant);
    std::vector<std::pair<torch::Tensor, torch::Tensor>> outs{{out.pred_logits, out.pred_boxes}};
    for (auto& a : out.aux_outputs) outs.emplace_back(a.pred_logits, a.pred_boxes);
    outs.emplace_back(out.pre_outputs.pred_logits, out.pre_outputs.pred_boxes);
    outs.emplace_back(out.enc_aux_outputs[0].pred_logits, out.enc_aux_outputs[0].pred_boxes);
    const auto m = crit.match(outs, t);
    const auto& ref = c.j.at("variants").at(variant).at("matches");
    CHECK(as_lists(m[0]) == ref.at("main").get<Lists>());
    CHECK(as_lists(m[1]) == ref.at("aux")[0].get<Lists>());
    CHECK(as_lists(m[2]) == ref.at("aux")[1].get<Lists>());
    CHECK(as_lists(m[3]) == ref.at("aux")[2].get<Lists>());
    CHECK(as_lists(m[4]) == ref.at("enc")[0].get<Lists>());
    const auto go = detr::DFineCriterion::go_indices({&m[0], &m[1], &m[2], &m[3], &m[4]});
    const auto go_ref = ref.at("go").get<Lists>();
    CHECK(as_lists(go) == go_ref);
    // The union holds more pairs than targets (several queries on one target) and one query each.
    CHECK(go_ref[0][0].size() > 3);
  }
  // The matcher change moves the matching: its cost is another formula.
  const auto& v = c.j.at("variants");
  CHECK(v.at("deimv2s_late").at("matches").at("main") != v.at("deimv2s").at("matches").at("main"));
}

TEST_CASE("D-FINE-line criteria: every family's terms and gradients equal the original's") {
  Case c;
  for (const auto& variant : c.variants()) {
    CAPTURE(variant);
    auto out = c.output();
    const auto crit = criterion(c, variant);
    const auto l = crit(out, c.targets(variant));
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
    // The classification loss by its name; the local terms where the family has them: the zero DDF of the
    // last denoising layer (its own teacher), a non-zero one before it.
    CHECK(terms.contains(variant == "dfine" ? "loss_vfl_aux_1" : "loss_mal_aux_1"));
    if (has_local_terms(variant)) {
      CHECK(terms.size() == 38);
      CHECK(terms.at("loss_ddf_dn_2").get<double>() == 0.0);
      CHECK(terms.at("loss_ddf_aux_0").get<double>() > 0.0);
    } else {
      CHECK(terms.size() == 27);
      CHECK_FALSE(terms.contains("loss_fgl"));
    }
    for (auto& [k, v] : terms.items()) {
      const double x = v.get<double>();
      const int i = k.rfind("loss_bbox", 0) == 0 ? 1 : k.rfind("loss_giou", 0) == 0 ? 2 : k.rfind("loss_fgl", 0) == 0 ? 3
                    : k.rfind("loss_ddf", 0) == 0  ? 4 : 0;
      items[static_cast<size_t>(i)] += x;
    }
    for (int i = 0; i < 5; ++i) CHECK(l.items[i].item<double>() == doctest::Approx(items[static_cast<size_t>(i)]).epsilon(1e-5));
    CHECK(l.total.item<double>() == doctest::Approx(ref.at("total").get<double>()).epsilon(1e-5));

    l.total.backward();
    const auto none = ref.at("no_grad").get<std::vector<std::string>>();
    for (const std::string g : {"layer2_logits", "layer2_corners", "layer0_corners", "layer0_boxes", "pre_boxes", "dn_layer0_corners",
                                "enc0_logits"}) {
      CAPTURE(g);
      const auto got = c.leaves.at(g).grad();
      if (std::find(none.begin(), none.end(), g) != none.end()) {  // no term of the original's reaches it
        CHECK((!got.defined() || got.abs().max().item<double>() == 0.0));
        continue;
      }
      const auto want = c.blob(variant + "_grad_" + g);
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
  const auto l = criterion(c, "dfine")(out, none);
  CHECK(std::isfinite(l.total.item<double>()));
  CHECK(l.items[0].item<double>() > 0);
  for (int i = 1; i < 4; ++i) CHECK(l.items[i].item<double>() == 0);
  // DDF still distils the unmatched queries into the teacher's.
  CHECK(l.items[4].item<double>() > 0);
  l.total.backward();
  CHECK(c.leaves.at("layer0_corners").grad().abs().sum().item<double>() > 0);
}
