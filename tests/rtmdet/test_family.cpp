// RTMDet through the task layer: the original's input normalisation, decode at cell-corner priors, and a
// short CPU training run with the original's recipe (AdamW 0.004) whose losses stay finite.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include <doctest/doctest.h>

#include "support.hpp"
#include "support_data.hpp"

#include <cmath>
#include <fstream>

namespace ly = libreyolo;

TEST_CASE("rtmdet: the input is BGR normalised with mmdet's mean / std; decode at cell-corner priors") {
  auto rgb = torch::tensor({123.675f, 116.28f, 103.53f + 57.375f}).view({1, 3, 1, 1});
  auto x = ly::RtmdetFamily::from_pixels(rgb).flatten();
  CHECK(x[0].item<float>() == doctest::Approx(1.0));  // B
  CHECK(x[1].item<float>() == doctest::Approx(0.0));  // G
  CHECK(x[2].item<float>() == doctest::Approx(0.0));  // R

  const int64_t nc = 2;
  std::vector<torch::Tensor> maps;
  for (int64_t h : {8, 4, 2}) {
    auto t = torch::full({1, 4 + nc, h, h}, -10.0f);
    t.narrow(1, 0, 4).fill_(1.0f);
    maps.push_back(t);
  }
  // Level 0 (stride 8), cell (x 3, y 2): prior (24, 16); distances l t r b = 4 6 8 10 pixels.
  auto& m = maps[0];
  m[0][0][2][3] = 4.0f;
  m[0][1][2][3] = 6.0f;
  m[0][2][2][3] = 8.0f;
  m[0][3][2][3] = 10.0f;
  m[0][4 + 0][2][3] = 10.0f;
  ly::RtmdetFamily f("t");
  auto det = f.decode(maps, ly::tasks::DecodeOptions{});
  REQUIRE(det[0].size(0) == 1);
  auto d = det[0][0];
  CHECK(d[0].item<float>() == doctest::Approx(20.0));
  CHECK(d[1].item<float>() == doctest::Approx(10.0));
  CHECK(d[2].item<float>() == doctest::Approx(32.0));
  CHECK(d[3].item<float>() == doctest::Approx(26.0));
  CHECK(d[5].item<float>() == 0);
  CHECK_NOTHROW(ly::RtmdetFamily("s"));
  CHECK_THROWS_WITH_AS(ly::RtmdetFamily("q"), doctest::Contains("unknown size; available: rtmdett, rtmdets, rtmdetm, rtmdetl, rtmdetx"), ly::ConfigError);
}

TEST_CASE("rtmdet trains with the original's recipe (AdamW 0.004, mosaic, mixup) and its losses stay finite") {
  lry_test::TempDir dir("lry_rtmdet_train");
  const auto data = lry_test::small_detect_set(dir.path, 16, 9);
  auto cfg = ly::parse_args({"model=rtmdett", "data=" + data.string(), "imgsz=64", "batch=4", "workers=0", "device=cpu",
                             "epochs=3", "no_aug_epochs=1", "eval_interval=3", "project=" + dir.path.string(),
                             "name=run", "seed=2"});
  ly::Trainer<ly::RtmdetFamily, ly::precision::Fp32> t(cfg, ly::RtmdetFamily("t"));
  auto r = t.fit();
  // The family's recipe was applied (the user set none of these keys).
  CHECK(t.config().lr0 == doctest::Approx(0.004));
  CHECK(ly::config_detail::lower(t.config().optimizer) == "adamw");
  CHECK(t.config().weight_decay == doctest::Approx(0.05));
  std::ifstream in(r.run_dir / "results.json");
  auto j = nlohmann::json::parse(in);
  REQUIRE(j["epochs"].size() == 3);
  for (const auto& row : j["epochs"]) {
    CAPTURE(row.dump());
    CHECK(std::isfinite(row.at("train/cls").get<double>()));
    CHECK(std::isfinite(row.at("train/bbox").get<double>()));
  }
  CHECK(j["epochs"].back().contains("val/mAP50-95"));
}
