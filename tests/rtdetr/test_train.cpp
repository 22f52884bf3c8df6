// RT-DETR through the task layer: the recipe's optimizer (AdamW betas 0.9 / 0.999, the backbone at 0.05x
// the LR, the original's decay groups, frozen stem), a short eager CPU run on the synthetic detection set
// ending with a finite loss and a validation, a single-image overfit, the NMS-free decode, and the
// capture boundary.
#include <libreyolo/capture/region.hpp>
#include <libreyolo/data/synth.hpp>
#include <libreyolo/families/rtdetr/family.hpp>
#include <libreyolo/families/rtdetrv2/family.hpp>
#include <libreyolo/capture/eager.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/policy.hpp>
#include <libreyolo/train/trainer.hpp>

#include "support.hpp"
#include "support_synth.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace rd = libreyolo::families::rtdetr;

static_assert(ly::capture::EncoderBoundary<rd::RTDETRImpl>);
static_assert(ly::family_traits<ly::RTDETRFamily>::capture_region == ly::CaptureRegion::backbone_encoder);
static_assert(ly::RTDETRFamily::name == "rtdetr-" && ly::RTDETRv2Family::name == "rtdetrv2-");

namespace {

std::filesystem::path synth_set(const std::filesystem::path& dir, int images, int imgsz, int classes) {
  ly::data::SynthOptions o;
  o.out = dir / "data";
  o.images = images;
  o.imgsz = imgsz;
  o.classes = classes;
  o.seed = 5;
  ly::RTDETRFamily::synth(o);
  return ly::RTDETRFamily::synth_data(o.out);
}

}  // namespace

TEST_CASE("rtdetr-r18 trains eager on the synthetic set: recipe groups, finite loss, a validation") {
  lry_test::TempDir tmp("lry_rtdetr_train");
  const auto data = synth_set(tmp.path, 12, 96, 3);
  using T = ly::Trainer<ly::RTDETRFamily, ly::precision::FamilyDefault, ly::capture::Eager, ly::profile::Off>;
  T t(ly::parse_args({"data=" + data.string(), "imgsz=96", "batch=4", "workers=0", "device=cpu", "epochs=2",
                      "eval_interval=1", "seed=1", "project=" + tmp.path.string(), "name=run", "exist_ok=true"}),
      ly::RTDETRFamily("r18"));
  t.setup();
  // The recipe (overrides): AdamW 1e-4 constant, clip 0.1, multi-scale on, batch 4 given here.
  auto& opt = t.optimizer();
  CHECK(opt.name() == "AdamW");
  CHECK(opt.momentum() == doctest::Approx(0.9));  // beta1, not the config's SGD momentum 0.937
  REQUIRE(opt.num_groups() == 4);
  CHECK(opt.group(0).name == "decay");
  CHECK(opt.lr(0) == doctest::Approx(1e-4));
  CHECK(opt.lr(2) == doctest::Approx(5e-6));  // backbone
  CHECK(opt.lr(3) == doctest::Approx(5e-6));  // backbone norms
  CHECK(opt.group(1).weight_decay == 0);
  CHECK(opt.group(3).weight_decay == 0);
  CHECK(opt.group(2).weight_decay == doctest::Approx(1e-4));
  size_t n = 0;
  for (size_t g = 0; g < 4; ++g) n += opt.group(g).params.size();
  size_t trainable = 0;
  for (auto& p : t.network()->parameters()) trainable += p.requires_grad();
  CHECK(n == trainable);  // every trainable parameter in exactly one group; the frozen stem in none
  CHECK(trainable < t.network()->parameters().size());

  auto r = t.fit();
  CHECK(r.epochs_done == 2);
  std::ifstream f(r.run_dir / "results.json");
  auto j = nlohmann::json::parse(f);
  REQUIRE(j["epochs"].size() == 2);
  for (auto& row : j["epochs"]) {
    for (const char* k : {"train/vfl", "train/bbox", "train/giou"}) {
      REQUIRE(row.contains(k));
      CHECK(std::isfinite(row[k].get<double>()));
    }
    CHECK(row.contains("val/mAP50-95"));
    CHECK(row["val/mAP50-95"].get<double>() >= 0);
  }
  // The schedule is constant and keeps the backbone ratio.
  CHECK(opt.lr(0) == doctest::Approx(1e-4));
  CHECK(opt.lr(2) == doctest::Approx(5e-6));
}

TEST_CASE("rtdetr-r18's loss falls when it overfits one synthetic image") {
  torch::manual_seed(0);
  rd::RTDETR net(rd::RTDETROptions{"r18", 2, false, 0});
  net->train();
  rd::RTDETRFamilyT<rd::V1> fam("r18");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}});
  const auto b = lry_test::two_box_batch();
  std::vector<torch::Tensor> params;
  for (auto& p : net->parameters())
    if (p.requires_grad()) params.push_back(p);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(2e-4).weight_decay(0));
  const auto x = ly::RTDETRFamily::input(b);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    auto l = fam.loss(net->forward(x), b);
    l.total.backward();
    opt.step();
    if (step == 0) first = l.total.item<double>();
    last = l.total.item<double>();
  }
  MESSAGE("rtdetr-r18 overfit loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.7 * first);
  // Eval: NMS-free decode, at most max_det rows of x1 y1 x2 y2 score class in input pixels.
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
  CHECK(d[0].select(1, 4).min().item<double>() >= 0);
  CHECK(d[0].select(1, 5).max().item<double>() <= 1);
  // Scores sorted descending, boxes scaled to the 128 px input.
  CHECK(torch::equal(std::get<0>(d[0].select(1, 4).sort(0, true)), d[0].select(1, 4)));
  CHECK(d[0].narrow(1, 0, 4).max().item<double>() <= 128 * 1.5);
}

TEST_CASE("the capture boundary: forward == decode(encode(x)); encoder() holds backbone + encoder only") {
  torch::manual_seed(1);
  rd::RTDETR net(rd::RTDETROptions{"r18", 3, false, 0});
  net->eval();
  torch::NoGradGuard ng;
  auto x = torch::rand({2, 3, 64, 64});
  auto a = net->forward(x);
  auto b = net->decode(net->encode(x));
  CHECK(torch::equal(a.result->pred_logits, b.result->pred_logits));
  CHECK(torch::equal(a.result->pred_boxes, b.result->pred_boxes));
  int64_t region = 0, bb = 0;
  for (auto& p : net->encoder().parameters()) region += p.numel();
  for (auto& p : net->backbone->parameters()) bb += p.numel();
  for (auto& p : net->hybrid_encoder->parameters()) bb += p.numel();
  CHECK(region == bb);
  CHECK(net->encoder().buffers().size() == net->backbone->buffers().size() + net->hybrid_encoder->buffers().size());
  // Training mode: the decoder waits for the loss (the batch's targets).
  net->train();
  auto t = net->forward(x);
  CHECK(t.pending());
  const auto& r = t.run();
  CHECK(r.pred_logits.size(1) == 84);  // 64 px: 8x8 + 4x4 + 2x2 tokens, fewer than 300 queries
  // A clone (EMA, checkpoints) has its own boundary over its own modules.
  auto c = std::dynamic_pointer_cast<rd::RTDETRImpl>(net->clone());
  REQUIRE(c);
  auto& cp = c->encoder();
  CHECK(cp.parameters().front().data_ptr() == c->backbone->parameters().front().data_ptr());
  CHECK(cp.parameters().front().data_ptr() != net->backbone->parameters().front().data_ptr());
  // The frozen stem: every network the trainer builds (the model, the EMA copy) comes from make_network();
  // LibTorch's Cloneable re-creates children with requires_grad on, and nothing in libreyolo clones a
  // network, so only fresh builds are checked.
  CHECK_FALSE(rd::RTDETR(rd::RTDETROptions{"r18", 3, false, 0})->backbone->parameters().front().requires_grad());
}

TEST_CASE("rtdetrv2-r18: the v2 policy's names, its 640 px anchors and other input sizes") {
  auto fam = ly::RTDETRv2Family("r18");
  fam.restore({{"names", std::vector<std::string>{"a", "b", "c"}}});
  auto net = fam.make_network();
  int points_scale = 0;
  for (auto& b : net->named_buffers()) points_scale += b.key().find("num_points_scale") != std::string::npos;
  CHECK(points_scale == 3);
  CHECK(net->decoder->anchors.sizes() == torch::IntArrayRef({1, 8400, 4}));
  // Finite (checkpoints reject non-finite tensors): invalid cells hold a large value, not +inf.
  CHECK(torch::isfinite(net->decoder->anchors).all().item<bool>());
  CHECK(net->decoder->valid_mask.logical_not().sum().item<int64_t>() > 0);
  net->eval();
  torch::NoGradGuard ng;
  auto out = net->forward(torch::rand({1, 3, 96, 96}));  // not the eval size: anchors made for 96 px
  CHECK(out.result->pred_boxes.size(1) == 189);          // 12x12 + 6x6 + 3x3
  CHECK(torch::isfinite(out.result->pred_logits).all().item<bool>());
  CHECK_NOTHROW(ly::RTDETRv2Family("r34"));
  CHECK_NOTHROW(ly::RTDETRFamily("r50"));
  CHECK_NOTHROW(ly::RTDETRFamily("r101"));
  CHECK_NOTHROW(ly::RTDETRv2Family("r50m"));
  CHECK_THROWS_WITH_AS(ly::RTDETRFamily("r152"),
                       doctest::Contains("unknown size; available: rtdetr-r18, rtdetr-r34, rtdetr-r50, rtdetr-r50m, rtdetr-r101"),
                       ly::ConfigError);
  CHECK_THROWS_WITH_AS(ly::RTDETRv2Family("r152"),
                       doctest::Contains("unknown size; available: rtdetrv2-r18, rtdetrv2-r34, rtdetrv2-r50, rtdetrv2-r50m, rtdetrv2-r101"),
                       ly::ConfigError);
}

TEST_CASE("rtdetr-r50: the backbone's norms are frozen buffers (no parameters, unchanged by a training forward); its groups") {
  auto fam = ly::RTDETRFamily("r50");
  fam.restore({{"names", std::vector<std::string>{"a", "b", "c"}}});
  auto net = fam.make_network();
  int64_t bb_params = 0, frozen_norms = 0;
  for (auto& p : net->backbone->named_parameters()) {
    ++bb_params;
    CHECK_MESSAGE(p.key().size() >= 11, p.key());
    CHECK_MESSAGE(p.key().substr(p.key().size() - 11) == "conv.weight", p.key());  // convs only, no norm affine
  }
  CHECK(bb_params == 55);  // 3 stem + 16 blocks x 3 + 4 shortcuts
  std::vector<std::pair<std::string, torch::Tensor>> before;
  for (auto& b : net->backbone->named_buffers()) {
    before.emplace_back(b.key(), b.value().clone());
    if (b.key().size() > 11 && b.key().substr(b.key().size() - 11) == "norm.weight") {
      ++frozen_norms;
      CHECK(torch::equal(b.value(), torch::ones_like(b.value())));
    }
  }
  CHECK(frozen_norms == bb_params);  // one frozen norm per conv
  net->train();
  auto out = net->forward(torch::rand({1, 3, 64, 64}));
  CHECK(torch::isfinite(out.run().pred_logits).all().item<bool>());
  size_t i = 0;
  for (auto& b : net->backbone->named_buffers()) CHECK_MESSAGE(torch::equal(b.value(), before[i++].second), b.key());
  // The groups: the backbone's norm group is empty (its norms are buffers), the frozen stem in none.
  auto g = ly::RTDETRFamily::param_groups(*net, 1e-4);
  REQUIRE(g.size() == 4);
  CHECK(g[3].params.empty());
  CHECK(static_cast<int64_t>(g[2].params.size()) == bb_params - 3);
  // r18's backbone norms are BatchNorm2d parameters, in group 3.
  auto fam18 = ly::RTDETRFamily("r18");
  fam18.restore({{"names", std::vector<std::string>{"a", "b", "c"}}});
  auto net18 = fam18.make_network();
  CHECK_FALSE(ly::RTDETRFamily::param_groups(*net18, 1e-4)[3].params.empty());
}
