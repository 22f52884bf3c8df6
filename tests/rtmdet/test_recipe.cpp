// RTMDet's recipe details from the original's trainer: its optimizer groups (torch.optim.AdamW's default
// weight decay 0.01 on the BatchNorm-weight and bias groups, which carry no weight_decay key) and its
// training pipeline (YOLOX's MosaicMixupDataset, families/yolox/augment.hpp).
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include <doctest/doctest.h>

#include "support.hpp"
#include "support_data.hpp"

namespace ly = libreyolo;

TEST_CASE("rtmdet: the original's AdamW groups: conv weights weight_decay, BatchNorm weights and biases 0.01") {
  lry_test::TempDir td("lry_rtmdet_groups");
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::RtmdetFamily::traits::overrides);
  cfg.data = lry_test::small_detect_set(td.path, 8, 3).string();
  REQUIRE(cfg.optimizer == "AdamW");
  ly::RtmdetFamily f("t");
  f.setup(cfg);
  auto net = f.make_network();
  auto g = f.param_groups(*net, cfg.weight_decay);
  REQUIRE(g.size() == 3);
  CHECK(g[0].name == "decay");
  CHECK(g[0].weight_decay == doctest::Approx(0.05));
  CHECK(g[1].weight_decay == doctest::Approx(0.01));
  CHECK(g[2].weight_decay == doctest::Approx(0.01));
  CHECK(!g[1].params.empty());
  CHECK(!g[2].params.empty());
  int64_t n = 0;
  for (const auto& grp : g) n += static_cast<int64_t>(grp.params.size());
  CHECK(n == static_cast<int64_t>(net->parameters().size()));
  // Under SGD (the default weight decay 0 for groups without one) they stay undecayed, as there.
  cfg.optimizer = "SGD";
  ly::RtmdetFamily s("t");
  s.setup(cfg);
  auto gs = s.param_groups(*net, cfg.weight_decay);
  CHECK(gs[1].weight_decay == 0);
  CHECK(gs[2].weight_decay == 0);
  CHECK(gs[0].weight_decay == doctest::Approx(0.05));
  // The training pipeline is the original's MosaicMixupDataset.
  CHECK(static_cast<bool>(ly::RtmdetFamily::augment_from(cfg).pipeline));
}
