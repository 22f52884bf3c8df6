// The D-FINE line through the task layer: the recipe's optimizer (AdamW betas 0.9 / 0.999, the original's
// four groups, the backbone at 0.5x, the frozen stem in none), the flat-cosine schedule, a short eager CPU
// run on the synthetic detection set ending with finite losses and a validation, a single-image overfit
// with the NMS-free decode, and the capture boundary.
#include <libreyolo/capture/eager.hpp>
#include <libreyolo/capture/region.hpp>
#include <libreyolo/data/synth.hpp>
#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/policy.hpp>
#include <libreyolo/train/trainer.hpp>

#include "support.hpp"
#include "support_synth.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace df = libreyolo::families::dfine;

static_assert(ly::capture::EncoderBoundary<df::DFineImpl>);
static_assert(ly::family_traits<ly::DFineFamily>::capture_region == ly::CaptureRegion::backbone_encoder);
static_assert(ly::DFineFamily::name == "dfine" && ly::DEIMFamily::name == "deim");

namespace {

std::filesystem::path synth_set(const std::filesystem::path& dir, int images, int imgsz, int classes) {
  ly::data::SynthOptions o;
  o.out = dir / "data";
  o.images = images;
  o.imgsz = imgsz;
  o.classes = classes;
  o.seed = 5;
  ly::DFineFamily::synth(o);
  return ly::DFineFamily::synth_data(o.out);
}

}  // namespace

TEST_CASE("dfinen trains eager on the synthetic set: recipe groups, EMA restart, finite losses, a validation") {
  lry_test::TempDir tmp("lry_dfine_train");
  const auto data = synth_set(tmp.path, 8, 96, 3);
  using T = ly::Trainer<ly::DFineFamily, ly::precision::FamilyDefault, ly::capture::Eager, ly::profile::Off>;
  T t(ly::parse_args({"data=" + data.string(), "imgsz=96", "batch=4", "workers=0", "device=cpu", "epochs=3",
                      "eval_interval=3", "no_aug_epochs=1", "warmup_epochs=1", "multi_scale=false", "seed=1",
                      "project=" + tmp.path.string(), "name=run", "exist_ok=true"}),
      ly::DFineFamily("n"));
  t.setup();
  auto& opt = t.optimizer();
  CHECK(opt.name() == "AdamW");
  CHECK(opt.momentum() == doctest::Approx(0.9));  // beta1, not the config's SGD momentum 0.937
  REQUIRE(opt.num_groups() == 4);
  CHECK(opt.group(0).name == "decay");
  CHECK(opt.group(1).weight_decay == 0);
  CHECK(opt.group(2).weight_decay == doctest::Approx(1e-4));
  CHECK(opt.group(3).weight_decay == 0);
  size_t n = 0;
  for (size_t g = 0; g < 4; ++g) n += opt.group(g).params.size();
  size_t trainable = 0;
  for (auto& p : t.network()->parameters()) trainable += p.requires_grad();
  CHECK(n == trainable);  // every trainable parameter in exactly one group; the frozen stem in none
  CHECK(trainable < t.network()->parameters().size());

  auto r = t.fit();
  CHECK(r.epochs_done == 3);
  std::ifstream f(r.run_dir / "results.json");
  auto j = nlohmann::json::parse(f);
  REQUIRE(j["epochs"].size() == 3);
  for (auto& row : j["epochs"])
    for (const char* k : {"train/vfl", "train/bbox", "train/giou", "train/fgl", "train/ddf"}) {
      CAPTURE(k);
      REQUIRE(row.contains(k));
      CHECK(std::isfinite(row[k].get<double>()));
    }
  const auto& last = j["epochs"].back();
  REQUIRE(last.contains("val/mAP50-95"));
  CHECK(last["val/mAP50-95"].get<double>() >= 0);
  // The flat-cosine tail ends at lr0 * min_lr_ratio; the backbone keeps its 0.5x.
  CHECK(opt.lr(0) == doctest::Approx(2e-4 * 0.05).epsilon(1e-3));
  CHECK(opt.lr(2) == doctest::Approx(0.5 * opt.lr(0)));
}

TEST_CASE("deimn's loss falls when it overfits one synthetic image; decode gives top-k rows") {
  torch::manual_seed(0);
  ly::DEIMFamily fam("n");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}});
  auto net = fam.make_network();
  net->train();
  const auto b = lry_test::two_box_batch();
  std::vector<torch::Tensor> params;
  for (auto& p : net->parameters())
    if (p.requires_grad()) params.push_back(p);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(4e-4).weight_decay(0));
  const auto x = ly::DEIMFamily::input(b);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    auto l = fam.loss(net->forward(x), b);
    REQUIRE(l.items.size(0) == 5);
    l.total.backward();
    opt.step();
    if (step == 0) first = l.total.item<double>();
    last = l.total.item<double>();
  }
  MESSAGE("deimn overfit loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.75 * first);
  {
    // On the real decoder output: the layers have drifted apart (DDF > 0 for layer 0), the last denoising
    // layer is its own teacher (DDF 0 there, found without comparing values), 38 terms as the original.
    const auto targets = df::dfine_targets(b, torch::kCPU);
    const auto out = net->forward(x);
    const auto& res = out.run(&targets);
    ly::nn::detr::DFineCriterionOptions co;
    co.num_classes = 2;
    co.class_loss = ly::nn::detr::DFineClassLoss::mal;
    co.gamma = 1.5;
    const auto l = ly::nn::detr::DFineCriterion(co)(res, targets);
    std::map<std::string, double> terms;
    for (auto& [k, v] : l.terms) terms[k] = v.item<double>();
    CHECK(terms.size() == 38);
    REQUIRE(terms.count("loss_ddf_aux_0"));
    REQUIRE(terms.count("loss_ddf_dn_2"));
    CHECK(terms["loss_ddf_aux_0"] > 0);
    CHECK(terms["loss_ddf_dn_2"] == 0);
    CHECK(terms["loss_ddf_dn_0"] > 0);
  }
  net->eval();
  torch::NoGradGuard ng;
  auto out = net->forward(x);
  CHECK_FALSE(out.pending());
  ly::tasks::DecodeOptions o;
  o.conf = 0.0;
  o.max_det = 50;
  auto d = fam.decode(out, o);
  REQUIRE(d.size() == 1);
  CHECK(d[0].size(0) == 50);
  CHECK(d[0].size(1) == 6);
  CHECK(d[0].select(1, 5).max().item<double>() <= 1);
  CHECK(torch::equal(std::get<0>(d[0].select(1, 4).sort(0, true)), d[0].select(1, 4)));
}

TEST_CASE("the DETR targets of a batch: normalised cx cy w h clamped to [0, 1], empty rows dropped") {
  ly::data::DetectBatch b;
  b.images = torch::zeros({2, 3, 100, 200}, torch::kUInt8);
  b.boxes = {torch::tensor({2.f, 20.f, 10.f, 60.f, 50.f, 1.f, 150.f, 40.f, 210.f, 80.f, 0.f, 5.f, 5.f, 5.f, 9.f}).view({3, 5}),
             torch::zeros({0, 5})};
  const auto t = df::dfine_targets(b, torch::kCPU);
  REQUIRE(t.size() == 2);
  REQUIRE(t[0].labels.size(0) == 2);  // the zero-width third row is dropped
  CHECK(t[0].labels[1].item<int64_t>() == 1);
  CHECK(torch::allclose(t[0].boxes[0], torch::tensor({40.f / 200, 30.f / 100, 40.f / 200, 40.f / 100})));
  // The second box reaches past the right edge: its centre x 180 / 200 and width 60 / 200 stay, clamped only above 1.
  CHECK(torch::allclose(t[0].boxes[1], torch::tensor({0.9f, 0.6f, 0.3f, 0.4f})));
  CHECK(t[1].labels.size(0) == 0);
  CHECK(t[1].boxes.size(0) == 0);
}
