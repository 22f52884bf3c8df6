// The D-FINE line's AdamW parameter groups against the original's, every size of D-FINE, DEIM, RT-DETRv4,
// DEIMv2 and EC: tests/dfine/data/param_groups.json holds the groups each family's own trainer builds
// (_setup_optimizer, run by scripts/fixtures/make_param_groups.py on the original's network and the size's
// config). Here each size's family builds its network and its groups with its recipe's weight decay, and every
// parameter the original names must sit in a group of ours with the same learning-rate multiplier and weight
// decay; both sides count the same tensors (a tensor under several names once).
#include <libreyolo/families/list.hpp>
#include <libreyolo/train/members.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace {

struct Placement {
  double lr_mult = 0, weight_decay = 0;
};

// Every name of every trainable tensor of ours -> its group's (lr_mult, weight_decay); the number of tensors.
template <class F>
std::pair<std::map<std::string, Placement>, size_t> our_groups(const std::string& size) {
  F family(size);
  family.restore({{"names", std::vector<std::string>(80, "c")}});
  auto net = family.make_network();
  libreyolo::TrainConfig cfg;
  libreyolo::train::apply_family_overrides(family, cfg);
  std::unordered_map<const void*, Placement> by_tensor;
  size_t tensors = 0;
  for (const auto& g : family.param_groups(*net, cfg.weight_decay))
    for (const auto& p : g.params) {
      by_tensor[p.unsafeGetTensorImpl()] = {g.lr_mult, g.weight_decay};
      ++tensors;
    }
  std::map<std::string, Placement> by_name;
  for (const auto& p : net->named_parameters()) {
    auto it = by_tensor.find(p.value().unsafeGetTensorImpl());
    if (it != by_tensor.end()) by_name[p.key()] = it->second;
  }
  return {by_name, tensors};
}

template <class F>
void check_family(const nlohmann::json& ref, const std::string& family_name) {
  int sizes = 0;
  for (const auto& [model, groups] : ref.items()) {
    if (model.rfind(family_name + "-", 0) != 0) continue;
    ++sizes;
    CAPTURE(model);
    const auto [ours, tensors] = our_groups<F>(model.substr(family_name.size() + 1));
    size_t theirs = 0, wrong = 0;
    std::string first_wrong;
    for (const auto& g : groups) {
      const double lr_mult = g.at("lr_mult").template get<double>(), wd = g.at("weight_decay").template get<double>();
      for (const auto& n : g.at("params")) {
        ++theirs;
        const auto name = n.template get<std::string>();
        auto it = ours.find(name);
        const bool same = it != ours.end() && std::abs(it->second.lr_mult - lr_mult) <= 1e-12 * lr_mult &&
                          std::abs(it->second.weight_decay - wd) <= 1e-12 * std::max(wd, 1e-30);
        if (!same && wrong++ == 0)
          first_wrong = name + ": the original's group x" + std::to_string(lr_mult) + " decay " + std::to_string(wd) +
                        (it == ours.end() ? ", ours: none" : ", ours: x" + std::to_string(it->second.lr_mult) + " decay " +
                                                                  std::to_string(it->second.weight_decay));
      }
    }
    CHECK_MESSAGE(wrong == 0, wrong << " parameters placed otherwise; first: " << first_wrong);
    CHECK(tensors == theirs);
  }
  CHECK(sizes >= 4);
}

nlohmann::json reference() {
  std::ifstream js(std::string(LIBREYOLO_SOURCE_DIR) + "/tests/dfine/data/param_groups.json");
  REQUIRE(js.good());
  return nlohmann::json::parse(js);
}

}  // namespace

TEST_CASE("D-FINE-line parameter groups: every size's lr multiplier and weight decay per parameter equal the original's") {
  const auto ref = reference();
  CHECK(ref.size() == 26);
  SUBCASE("dfine") { check_family<libreyolo::DFineFamily>(ref, "dfine"); }
  SUBCASE("deim") { check_family<libreyolo::DEIMFamily>(ref, "deim"); }
  SUBCASE("rtdetrv4") { check_family<libreyolo::RTDETRv4Family>(ref, "rtdetrv4"); }
  SUBCASE("deimv2") { check_family<libreyolo::DEIMv2Family>(ref, "deimv2"); }
  SUBCASE("ec") { check_family<libreyolo::ECFamily>(ref, "ec"); }
}
