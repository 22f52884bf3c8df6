// Detection resume is bit-exact (CPU): a YOLOv9-t run with mosaic and EMA stopped mid-epoch (what
// Ctrl-C does: train::request_stop at a step) and a YOLOX-t run stopped in the epoch before its L1 switch
// are resumed with resume=true and trained to the end. An uninterrupted run with the same seed is the
// reference: every tensor of the final checkpoints (model, EMA, optimizer) equal bit for bit
// (torch::equal), the losses of the steps after the resume point equal the reference's at the same steps
// bit for bit (each micro-batch's own loss parts and the epoch's running sums), and so do the results rows.
#include <doctest/doctest.h>

#include "harden_support.hpp"

#include <fstream>
#include <map>

namespace ly = libreyolo;
namespace fs = std::filesystem;

namespace {

using Yolo9Trainer = ly::Trainer<ly::Yolo9Family, ly::precision::FamilyDefault, ly::capture::Eager, ly::profile::Off>;
using YoloxTrainer = ly::Trainer<ly::YoloxFamily, ly::precision::FamilyDefault, ly::capture::Eager, ly::profile::Off>;

// 24 images of 64 px, 3 classes (about 19 train / 5 val), made once per test process.
const fs::path& detect_set_64() {
  static lry_test::TempDir dir("lry_resume_detect");
  static const fs::path yaml = [] {
    ly::data::SynthOptions o;
    o.task = "detect";
    o.out = dir.path / "data";
    o.images = 24;
    o.imgsz = 64;
    o.classes = 3;
    o.seed = 3;
    ly::data::synth(o);
    return o.out / "data.yaml";
  }();
  return yaml;
}

// What a run's steps did, by iteration (micro-batches since the start of the run): each micro-batch's
// own loss parts, the epoch's running sum after it, and whether the train set's mosaic was open.
struct Steps {
  std::map<int64_t, torch::Tensor> batch, sum;
  std::map<int64_t, bool> mosaic;
  std::map<int64_t, int> epoch;
};

// The step_end hook: records the step, and requests a stop (as SIGINT does) after micro-batch `stop_at`.
template <class T>
struct Record {
  Steps* out;
  T* trainer;
  int64_t stop_at = -1;
  void operator()(ly::event::step_end, const ly::StepInfo& s) {
    out->batch[s.iteration] = s.batch_loss_items.detach().cpu().clone();
    out->sum[s.iteration] = s.loss_items.detach().cpu().clone();
    out->mosaic[s.iteration] = trainer->family().train_set()->mosaic_active();
    out->epoch[s.iteration] = s.epoch;
    if (s.iteration == stop_at) ly::train::request_stop();
  }
};

void reset_stop_request() { ly::train::interrupt_flag().store(false); }

struct LogLines {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> prev;
  LogLines() {  // the earlier sink still gets every line (nested captures each see them)
    prev = ly::log::set_sink([this](ly::log::Level l, std::string_view m) {
      lines.emplace_back(m);
      if (prev) prev(l, m);
    });
  }
  ~LogLines() { ly::log::set_sink(prev); }
  int count(const std::string& part) const {
    int n = 0;
    for (auto& l : lines) n += l.find(part) != std::string::npos;
    return n;
  }
};

// Every tensor of two checkpoints equal bit for bit (torch::equal); returns how many differ or are
// missing from one of them; *compared: how many were compared, *names: the first few that differ.
int differing_named(const fs::path& a, const fs::path& b, size_t* compared, std::string* names) {
  const auto x = ly::train::load_checkpoint(a), y = ly::train::load_checkpoint(b);
  int diff = 0;
  size_t n = 0;
  for (const auto& [k, v] : x.tensors) {
    const bool same = y.tensors.count(k) && torch::equal(v, y.tensors.at(k));
    n += y.tensors.count(k);
    if (!same && ++diff <= 5) *names += k + " ";
  }
  for (const auto& [k, v] : y.tensors)
    if (!x.tensors.count(k) && ++diff <= 5) *names += k + " (only in the second) ";
  *compared = n;
  return diff;
}

std::string parts(const torch::Tensor& t) {
  std::string s;
  const auto d = t.to(torch::kFloat64).flatten();
  for (int64_t i = 0; i < d.numel(); ++i) s += (i ? " " : "") + std::to_string(d[i].item<double>());
  return s;
}

nlohmann::json results_rows(const fs::path& run) {
  std::ifstream f(run / "results.json");
  return nlohmann::json::parse(f).at("epochs");
}

// The reference run, a run stopped after micro-batch `stop_at`, its resume; then the assertions.
template <class T>
void check_resume(const std::string& tag, const std::vector<std::string>& base, const std::string& size, int64_t stop_at,
                  int epochs, int64_t batches_per_epoch, const std::function<void(T&, const Steps&)>& extra) {
  lry_test::TempDir runs("lry_resume_" + tag);
  auto args = [&](const std::string& name, std::vector<std::string> more = {}) {
    auto a = base;
    a.insert(a.end(), {"project=" + runs.path.string(), "name=" + name});
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  reset_stop_request();
  Steps ref, first, second;
  {
    T t(ly::parse_args(args("ref")), typename T::Family(size));
    const auto r = t.fit(Record<T>{&ref, &t});
    REQUIRE(r.epochs_done == epochs);
    REQUIRE_FALSE(r.interrupted);
    REQUIRE(static_cast<int64_t>(ref.batch.size()) == epochs * batches_per_epoch);
    extra(t, ref);
    MESSAGE(tag, ": ", ref.batch.size(), " steps; loss parts at step 1: ", parts(ref.batch.begin()->second),
            "; at the last step: ", parts(ref.batch.rbegin()->second));
  }
  {
    T t(ly::parse_args(args("cut")), typename T::Family(size));
    const auto r = t.fit(Record<T>{&first, &t, stop_at});
    reset_stop_request();
    REQUIRE(r.interrupted);
    CHECK(t.iteration() == stop_at);  // no accumulation: the stop lands right after that micro-batch
    CHECK(stop_at % batches_per_epoch != 0);  // mid-epoch
    const auto ck = ly::train::load_checkpoint(runs.path / "cut" / "weights" / "last.ckpt");
    CHECK(ck.meta["state"]["batch_in_epoch"] == stop_at % batches_per_epoch);
    CHECK(ck.tensors.count("ema.__present__") == 1);
  }
  LogLines log;
  {
    T t(ly::parse_args(args("cut", {"resume=true"})), typename T::Family(size));
    const auto r = t.fit(Record<T>{&second, &t});
    CHECK(r.epochs_done == epochs);
    CHECK_FALSE(r.interrupted);
    CHECK(log.count("resume: ") == 1);
  }
  // The steps before the stop, and the steps after the resume, equal the reference's at the same
  // iterations bit for bit: the next three first (as the brief of the check), then all the rest.
  REQUIRE(static_cast<int64_t>(first.batch.size()) == stop_at);
  REQUIRE(static_cast<int64_t>(second.batch.size()) == epochs * batches_per_epoch - stop_at);
  REQUIRE(second.batch.begin()->first == stop_at + 1);
  for (int64_t i = stop_at + 1; i <= stop_at + 3; ++i) {
    CAPTURE(i);
    CHECK(torch::equal(second.batch.at(i), ref.batch.at(i)));
    CHECK(torch::equal(second.sum.at(i), ref.sum.at(i)));
  }
  int batch_diff = 0, sum_diff = 0, mosaic_diff = 0;
  for (const auto& [i, v] : second.batch) {
    batch_diff += !torch::equal(v, ref.batch.at(i));
    sum_diff += !torch::equal(second.sum.at(i), ref.sum.at(i));
    mosaic_diff += second.mosaic.at(i) != ref.mosaic.at(i);
  }
  for (const auto& [i, v] : first.batch) batch_diff += !torch::equal(v, ref.batch.at(i));
  CHECK(batch_diff == 0);
  CHECK(sum_diff == 0);
  CHECK(mosaic_diff == 0);
  // Every tensor of the final checkpoints: model, EMA, optimizer state, precision state.
  size_t n = 0;
  std::string names;
  const fs::path a = runs.path / "ref" / "weights" / "last.ckpt", b = runs.path / "cut" / "weights" / "last.ckpt";
  CHECK_MESSAGE(differing_named(a, b, &n, &names) == 0, "differing_named tensors: ", names);
  CHECK(n > 300);
  const auto ca = ly::train::load_checkpoint(a), cb = ly::train::load_checkpoint(b);
  int groups = 0;
  for (const char* prefix : {"model.", "ema.", "optim."}) {
    size_t m = 0;
    for (const auto& [k, v] : ca.tensors) m += k.rfind(prefix, 0) == 0;
    CAPTURE(prefix);
    CHECK(m > 0);
    groups += m > 0;
  }
  CHECK(groups == 3);
  CHECK(ca.meta["state"] == cb.meta["state"]);
  CHECK(ca.meta["ema"] == cb.meta["ema"]);  // the EMA's update count and decay
  CHECK(ca.meta["ema"]["updates"] == epochs * batches_per_epoch);
  CHECK(ca.meta["optim"] == cb.meta["optim"]);
  // The results rows' losses (the interrupted epoch's mean included) and learning rates.
  const auto ra = results_rows(runs.path / "ref"), rb = results_rows(runs.path / "cut");
  REQUIRE(ra.size() == static_cast<size_t>(epochs));
  REQUIRE(rb.size() == ra.size());
  for (size_t e = 0; e < ra.size(); ++e)
    for (const auto& [k, v] : ra[e].items()) {
      if (k == "time_s") continue;
      CAPTURE(e);
      CAPTURE(k);
      CHECK(rb[e].at(k) == v);
    }
}

}  // namespace

TEST_CASE("resume: YOLOv9-t with mosaic and EMA stopped mid-epoch continues bit-exactly") {
  // About 19 train images at batch 4: 4 full batches per epoch (the partial fifth dropped). Mosaic open in
  // epochs 1-2, closed in 3; the stop is after micro-batch 6 (epoch 2, batch 2). The warm-up (3 epochs) spans the whole run.
  const std::vector<std::string> base{"model=yolo9t", "data=" + detect_set_64().string(), "imgsz=64", "batch=4",
                                      "workers=2", "device=cpu", "epochs=3", "no_aug_epochs=1", "mosaic=1.0",
                                      "ema=true", "seed=7"};
  LogLines log;
  check_resume<Yolo9Trainer>("yolo9", base, "t", 6, 3, 4,
                             [](Yolo9Trainer& t, const Steps& s) {
                               CHECK(t.config().ema);
                               CHECK(t.config().mosaic == 1.0);
                               CHECK(t.config().warmup_epochs == 3);  // the whole run is in the warm-up
                               CHECK(s.mosaic.at(1));
                               CHECK(s.mosaic.at(6));
                               CHECK_FALSE(s.mosaic.rbegin()->second);
                             });
  CHECK(log.count("mosaic closed from epoch 3") >= 1);
}

TEST_CASE("resume: YOLOX-t stopped in the epoch before its L1 switch continues bit-exactly across it") {
  // Mosaic (with mixup and the affine) open in epochs 1-2; epoch 3 closes it and turns the L1 loss on.
  // The stop is after micro-batch 7 (epoch 2, batch 3 of 4): the resumed run crosses the switch.
  const std::vector<std::string> base{"model=yoloxt", "data=" + detect_set_64().string(), "imgsz=64", "batch=4",
                                      "workers=0", "device=cpu", "epochs=3", "no_aug_epochs=1", "warmup_epochs=1",
                                      "ema=true", "seed=9"};
  LogLines log;
  check_resume<YoloxTrainer>("yolox", base, "t", 7, 3, 4,
                             [](YoloxTrainer& t, const Steps& s) {
                               CHECK(t.config().ema);
                               CHECK(t.family().use_l1());
                               CHECK(s.mosaic.at(7));
                               for (const auto& [i, v] : s.batch) {  // the l1 part: 0 before the switch, > 0 after
                                 CAPTURE(i);
                                 CHECK((s.epoch.at(i) == 2) == (v[3].item<double>() > 0));
                               }
                             });
  CHECK(log.count("yolox: mosaic closed for the last 1 epoch(s) (from epoch 3): L1 loss on") == 2);  // ref, resume
}
