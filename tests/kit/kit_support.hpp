#pragma once
// Shared pieces of the family kit's tests: the registered trainer policies as a doctest type list, each
// task's synthetic set (made once per process), and the settings the conformance runs use.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"

#include <boost/hana.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace lry_test {

// The trainer policies of family F (one per task it trains), as std::tuple<...> (a doctest type list).
template <class F>
using family_policies = typename decltype(boost::hana::unpack(libreyolo::families::task_policies<F>(), [](auto... t) {
  return boost::hana::type_c<std::tuple<typename decltype(t)::type...>>;
}))::type;

// The policies of a std::tuple<...> list whose task is captured (capture/eager.hpp's resolve).
template <class Tuple>
struct captured_policies_of;
template <class... P>
struct captured_policies_of<std::tuple<P...>> {
  using type = decltype(std::tuple_cat(
      std::declval<std::conditional_t<libreyolo::task_is_captured<P>(), std::tuple<P>, std::tuple<>>>()...));
};
template <class Tuple>
using captured_policies = typename captured_policies_of<Tuple>::type;

// The task's synthetic set for policy P (30 images of 64 px, 3 classes: 24 train, 6 val), made once.
template <class P>
std::filesystem::path kit_data() {
  static TempDir dir("lry_kit_" + std::string(P::task_info::name));
  static const std::filesystem::path data = [] {
    libreyolo::data::SynthOptions o;
    o.out = dir.path / "data";
    o.images = 30;
    o.imgsz = 64;
    o.classes = 3;
    o.seed = 21;
    P::synth(o);
    return P::synth_data(o.out);
  }();
  return data;
}

template <class P>
P kit_family() {
  return P(std::string(P::sizes.front()));
}

// The kit's batch: the whole training split (24 images) in one batch, so every step sees the same images and
// the loss is a function of the weights alone; detection 2: its cases assert finite losses and moved weights
// only (kit_learns), and a DETR's CPU step grows with the batch's queries (RF-DETR: 13 Group-DETR groups x 300
// queries an image, ~25 s a step at 8 images on the 2-core VM; RT-DETR v2 15 s at 24).
template <class P>
constexpr int kit_batch() {
  return P::task_info::task == libreyolo::Task::detect ? 2 : 24;
}

// A short deterministic run: augmentation off, kit_batch, AdamW, no warm-up, no EMA, no gradient accumulation
// (nbs=0 also for a family whose recipe sets a nominal batch).
template <class P>
std::vector<std::string> kit_args(const std::filesystem::path& project, const std::string& name) {
  return {"data=" + kit_data<P>().string(), "imgsz=64", "batch=" + std::to_string(kit_batch<P>()), "nbs=0", "workers=0",
          "device=cpu", "epochs=8",
          "val=false", "ema=false", "warmup_epochs=0", "optimizer=AdamW", "lr0=0.001", "weight_decay=0",
          "mosaic=0", "mixup=0", "fliplr=0", "flipud=0", "hsv_h=0", "hsv_s=0", "hsv_v=0", "degrees=0", "translate=0",
          "scale=0", "shear=0", "affine=false", "no_aug_epochs=0", "multi_scale=false", "seed=4", "deterministic=true",
          "project=" + project.string(), "name=" + name, "exist_ok=true"};
}

// The training loss per epoch row of results.json: the sum of the train/ columns, or the one column
// `only` names.
inline std::vector<double> train_losses(const std::filesystem::path& run_dir, const std::string& only = "") {
  std::ifstream f(run_dir / "results.json");
  auto j = nlohmann::json::parse(f);
  std::vector<double> out;
  for (auto& row : j["epochs"]) {
    double s = 0;
    for (auto& [k, v] : row.items())
      if (k.rfind("train/", 0) == 0 && v.is_number() && (only.empty() || k == only)) s += v.get<double>();
    out.push_back(s);
  }
  return out;
}

}  // namespace lry_test
