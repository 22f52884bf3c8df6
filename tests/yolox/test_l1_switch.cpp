// YOLOX's L1 switch: when mosaic closes (epoch epochs - no_aug_epochs) the family turns the L1 loss on and
// tells the capture policy exactly once; through the real trainer the l1 column is 0 before and > 0 after.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include <doctest/doctest.h>

#include "support.hpp"
#include "support_data.hpp"

#include <fstream>
#include <string>
#include <vector>

namespace ly = libreyolo;

namespace {
struct CountingCapture {
  std::vector<std::string> reasons;
  void invalidate(std::string_view r) { reasons.emplace_back(r); }
};
struct LogLines {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> prev;
  LogLines() { prev = ly::log::set_sink([this](ly::log::Level, std::string_view m) { lines.emplace_back(m); }); }
  ~LogLines() { ly::log::set_sink(prev); }
  int count_prefix(const std::string& p) const {
    int n = 0;
    for (auto& l : lines) n += l.rfind(p, 0) == 0;
    return n;
  }
};
}  // namespace

TEST_CASE("yolox: the epoch hook turns L1 on at epochs - no_aug_epochs and invalidates the capture once") {
  ly::TrainConfig cfg;
  cfg.epochs = 10;
  cfg.no_aug_epochs = 3;
  ly::YoloxFamily f("t");
  CountingCapture cap;
  ly::train::EpochContext<CountingCapture> ctx{cap, nullptr, true};
  for (int e = 0; e < cfg.epochs; ++e) {
    f.on(ly::event::epoch_begin{}, ly::EpochInfo{e, cfg.epochs, {}}, cfg, ctx);
    CHECK(f.use_l1() == (e >= 7));
  }
  REQUIRE(cap.reasons.size() == 1);
  CHECK(cap.reasons[0] == "yolox L1 loss on");

  // Resuming past the switch: on at the first epoch run, still one invalidation.
  ly::YoloxFamily resumed("t");
  CountingCapture cap2;
  ly::train::EpochContext<CountingCapture> ctx2{cap2, nullptr, true};
  for (int e = 8; e < cfg.epochs; ++e) resumed.on(ly::event::epoch_begin{}, ly::EpochInfo{e, cfg.epochs, {}}, cfg, ctx2);
  CHECK(resumed.use_l1());
  CHECK(cap2.reasons.size() == 1);

  // no_aug_epochs = 0: mosaic never closes, L1 never on.
  cfg.no_aug_epochs = 0;
  ly::YoloxFamily never("t");
  CountingCapture cap3;
  ly::train::EpochContext<CountingCapture> ctx3{cap3, nullptr, true};
  for (int e = 0; e < cfg.epochs; ++e) never.on(ly::event::epoch_begin{}, ly::EpochInfo{e, cfg.epochs, {}}, cfg, ctx3);
  CHECK_FALSE(never.use_l1());
  CHECK(cap3.reasons.empty());
}

TEST_CASE("yolox trains through the trainer: the L1 column joins at the switch, one invalidation, finite losses") {
  lry_test::TempDir dir("lry_yolox_l1");
  const auto data = lry_test::small_detect_set(dir.path, 12, 5);
  LogLines log;
  auto cfg = ly::parse_args({"model=yoloxt", "data=" + data.string(), "imgsz=64", "batch=4", "workers=0", "device=cpu",
                             "epochs=3", "no_aug_epochs=1", "warmup_epochs=1", "val=false", "cuda_graph=true",
                             "project=" + dir.path.string(), "name=run", "seed=1"});
  ly::Trainer<ly::YoloxFamily, ly::precision::Fp32, ly::capture::CudaGraph<>> t(cfg, ly::YoloxFamily("t"));
  auto r = t.fit();
  CHECK(t.capture().invalidations() == 1);
  CHECK(t.family().use_l1());
  CHECK(log.count_prefix("yolox: mosaic closed") == 1);
  std::ifstream in(r.run_dir / "results.json");
  auto j = nlohmann::json::parse(in);
  REQUIRE(j["epochs"].size() == 3);
  for (int e = 0; e < 3; ++e) {
    const auto& row = j["epochs"][e];
    CAPTURE(row.dump());
    for (const char* k : {"train/iou", "train/obj", "train/cls", "train/l1"}) CHECK(std::isfinite(row.at(k).get<double>()));
    if (e < 2) CHECK(row.at("train/l1").get<double>() == 0);
    else CHECK(row.at("train/l1").get<double>() > 0);
  }
  CHECK(j["capture"]["invalidations"] == 1);
}

TEST_CASE("yolox: the network input is 0..255 BGR; decode places a box at (grid + offset) · stride, exp(wh) · stride") {
  auto rgb = torch::tensor({10.f, 20.f, 30.f}).view({1, 3, 1, 1});
  auto x = ly::YoloxFamily::from_pixels(rgb);
  CHECK(x.flatten().equal(torch::tensor({30.f, 20.f, 10.f})));

  // 64 px input: maps 8x8, 4x4, 2x2; one confident anchor at level 1, cell (x 2, y 1).
  const int64_t nc = 2;
  std::vector<torch::Tensor> maps;
  for (int64_t h : {8, 4, 2}) maps.push_back(torch::full({1, 5 + nc, h, h}, -10.0f));
  auto& m = maps[1];
  m[0][0][1][2] = 0.5f;             // x offset -> (2 + 0.5) · 16 = 40
  m[0][1][1][2] = 0.25f;            // y offset -> (1 + 0.25) · 16 = 20
  m[0][2][1][2] = std::log(2.0f);   // w = 2 · 16 = 32
  m[0][3][1][2] = std::log(1.0f);   // h = 16
  m[0][4][1][2] = 10.0f;            // objectness
  m[0][6][1][2] = 10.0f;            // class 1
  ly::YoloxFamily f("t");
  auto det = f.decode(maps, ly::tasks::DecodeOptions{});
  REQUIRE(det.size() == 1);
  REQUIRE(det[0].size(0) == 1);
  auto d = det[0][0];
  CHECK(d[0].item<float>() == doctest::Approx(24.0));
  CHECK(d[1].item<float>() == doctest::Approx(12.0));
  CHECK(d[2].item<float>() == doctest::Approx(56.0));
  CHECK(d[3].item<float>() == doctest::Approx(28.0));
  CHECK(d[4].item<float>() == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(d[5].item<float>() == 1);
}
