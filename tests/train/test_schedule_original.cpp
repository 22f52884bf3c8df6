// The learning rate of every optimizer step of the accuracy protocols' runs against the original's own schedulers
// (tests/train/data/schedules.json, made by scripts/fixtures/make_schedules.py: each family's trainer made as its
// model's train() makes it, with epochs=10, no_aug_epochs=2 and the protocol's batch, then its create_scheduler and
// update_lr(t) for every step t). Ours: the family's recipe over the same keys (apply_family_overrides, as the trainer
// applies it) and the schedule the trainer builds from it (train::schedule_options), at the same 100 batches per epoch.
// Per step to 1e-9 relative: the curves are closed-form on both sides.
#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/ec/family.hpp>
#include <libreyolo/families/rtdetr/family.hpp>
#include <libreyolo/families/rtdetrv2/family.hpp>
#include <libreyolo/families/rtmdet/family.hpp>
#include <libreyolo/families/yolo9/family.hpp>
#include <libreyolo/families/yolonas/family.hpp>
#include <libreyolo/families/yolox/family.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/train/schedule.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

namespace {

template <class F>
void check_schedule(const nlohmann::json& ref, const std::string& family_name, const std::string& size) {
  const std::string model = family_name + "-" + size;
  CAPTURE(model);
  REQUIRE(ref.at("models").contains(model));
  const auto& r = ref.at("models").at(model);
  const int batch = r.at("batch").get<int>();
  F family(size);
  auto cfg = libreyolo::parse_args({"epochs=10", "no_aug_epochs=2", "imgsz=640", "batch=" + std::to_string(batch)});
  libreyolo::train::apply_family_overrides(family, cfg);
  const auto so = libreyolo::train::schedule_options(cfg, ref.at("batches").get<int64_t>(), cfg.accumulate(), 0.9);
  CHECK(so.iters_per_epoch == r.at("steps_per_epoch").get<int64_t>());
  const libreyolo::train::LRSchedule sched(so);
  const auto lr = r.at("lr").get<std::vector<double>>();
  REQUIRE(static_cast<int64_t>(lr.size()) == so.epochs * so.iters_per_epoch + 1);
  int64_t first = -1, wrong = 0;
  for (size_t t = 0; t < lr.size(); ++t) {
    const double ours = sched.lr(static_cast<int64_t>(t));
    if (!(std::abs(ours - lr[t]) <= 1e-9 * std::abs(lr[t]) + 1e-15)) {
      if (first < 0) first = static_cast<int64_t>(t);
      ++wrong;
    }
  }
  INFO("the original's " << r.at("scheduler_class").get<std::string>() << " with " << r.at("config").dump() << "; ours "
                         << cfg.scheduler << " lr0 " << cfg.lr0 << " warmup_epochs " << cfg.warmup_epochs << " warmup_lr_start "
                         << cfg.warmup_lr_start << " min_lr_ratio " << cfg.min_lr_ratio << " no_aug_epochs " << cfg.no_aug_epochs
                         << " flat_epochs " << cfg.flat_epochs);
  CHECK_MESSAGE(wrong == 0, wrong << " of " << lr.size() << " steps differ; first: step " << first << ", ours "
                                  << (first >= 0 ? sched.lr(first) : 0.0) << ", the original's " << (first >= 0 ? lr[static_cast<size_t>(first)] : 0.0));
}

}  // namespace

TEST_CASE("the accuracy protocols' learning rate, step by step, equals the original's schedulers (11 models)") {
  std::ifstream js(std::string(LIBREYOLO_SOURCE_DIR) + "/tests/train/data/schedules.json");
  REQUIRE(js.good());
  const auto ref = nlohmann::json::parse(js);
  CHECK(ref.at("models").size() == 11);
  check_schedule<libreyolo::DFineFamily>(ref, "dfine", "n");
  check_schedule<libreyolo::DEIMFamily>(ref, "deim", "n");
  check_schedule<libreyolo::DEIMv2Family>(ref, "deimv2", "atto");
  check_schedule<libreyolo::DEIMv2Family>(ref, "deimv2", "s");
  check_schedule<libreyolo::ECFamily>(ref, "ec", "s");
  check_schedule<libreyolo::RTDETRFamily>(ref, "rtdetr", "r18");
  check_schedule<libreyolo::RTDETRv2Family>(ref, "rtdetrv2", "r18");
  check_schedule<libreyolo::YoloNasFamily>(ref, "yolonas", "s");
  check_schedule<libreyolo::Yolo9Family>(ref, "yolo9", "t");
  check_schedule<libreyolo::YoloxFamily>(ref, "yolox", "t");
  check_schedule<libreyolo::RtmdetFamily>(ref, "rtmdet", "t");
}
