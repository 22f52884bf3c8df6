// LingBot-Vision: the original's architecture (parameter counts, state-dict names and buffers), RoPE,
// the K-bias mask, the frozen-backbone linear-probe recipe and the stretch resize.
#include <doctest/doctest.h>
#include <libreyolo/families/lingbot/family.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <numbers>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace lb = libreyolo::lingbot;

namespace {
int64_t n_params(torch::nn::Module& m) {
  int64_t n = 0;
  for (auto& p : m.parameters()) n += p.numel();
  return n;
}
}  // namespace

TEST_CASE("lingbot: parameter counts equal the original's architecture") {
  // Summed from the original's modules (libreyolo/models/lingbotvision/nn.py): ViT-S/16 (384 wide, 12
  // blocks, 6 heads, MLP 4x, fused QKV with bias, LayerScale, cls + 4 storage + mask tokens) + 1x1 head.
  CHECK(n_params(*lb::LingBot("s", 150)) == 21658902);
  CHECK(n_params(*lb::LingBot("s", 4)) == 21602692);
  CHECK(n_params(*lb::LingBot("b", 150)) == 85784982);
  CHECK_THROWS_WITH_AS(lb::LingBot("x", 3), doctest::Contains("allowed: s, b, l, g"), ly::ConfigError);
}

TEST_CASE("lingbot: state-dict names and buffers are the original's") {
  lb::LingBot net("s", 150);
  std::map<std::string, std::vector<int64_t>> keys;
  for (auto& kv : net->named_parameters()) keys[kv.key()] = kv.value().sizes().vec();
  for (auto& kv : net->named_buffers()) keys[kv.key()] = kv.value().sizes().vec();
  const std::map<std::string, std::vector<int64_t>> want{
      {"backbone.patch_embed.proj.weight", {384, 3, 16, 16}},
      {"backbone.cls_token", {1, 1, 384}},
      {"backbone.storage_tokens", {1, 4, 384}},
      {"backbone.mask_token", {1, 384}},
      {"backbone.rope_embed.periods", {16}},
      {"backbone.blocks.0.norm1.weight", {384}},
      {"backbone.blocks.0.attn.qkv.weight", {1152, 384}},
      {"backbone.blocks.0.attn.qkv.bias", {1152}},
      {"backbone.blocks.0.attn.qkv.bias_mask", {1152}},
      {"backbone.blocks.11.attn.proj.weight", {384, 384}},
      {"backbone.blocks.3.ls1.gamma", {384}},
      {"backbone.blocks.3.ls2.gamma", {384}},
      {"backbone.blocks.5.mlp.fc1.weight", {1536, 384}},
      {"backbone.blocks.5.mlp.fc2.bias", {384}},
      {"backbone.norm.weight", {384}},
      {"predict.weight", {150, 384, 1, 1}},
      {"predict.bias", {150}}};
  for (auto& [k, shape] : want) {
    CAPTURE(k);
    REQUIRE(keys.count(k));
    CHECK(keys[k] == shape);
  }
  CHECK(keys.size() == 2 + 4 + 12 * 15 + 2 + 2);  // patch w/b, 3 tokens + periods, 12 x 15 per block, norm, head
  // periods = 100 ** (2 i / (d_head / 2)), i < d_head / 4 (d_head 64)
  auto per = net->backbone->rope_embed->periods;
  for (int64_t i = 0; i < 16; ++i) CHECK(per[i].item<double>() == doctest::Approx(std::pow(100.0, 2.0 * i / 32)).epsilon(1e-6));
  // K third of the QKV bias masked, Q and V pass.
  auto mask = net->backbone->blocks[0]->as<lb::SelfAttentionBlockImpl>()->attn->qkv->bias_mask;
  CHECK(mask.narrow(0, 0, 384).min().item<double>() == 1.0);
  CHECK(mask.narrow(0, 384, 384).max().item<double>() == 0.0);
  CHECK(mask.narrow(0, 768, 384).min().item<double>() == 1.0);
  auto gamma = net->backbone->blocks[0]->as<lb::SelfAttentionBlockImpl>()->ls1->gamma;
  CHECK(gamma.max().item<double>() == doctest::Approx(1e-5));
}

TEST_CASE("lingbot: RoPE tables, the K-bias, output at a sixteenth of the input, a frozen backbone") {
  lb::RopePositionEmbedding rope(384, 6);
  auto [sin, cos] = rope->forward(2, 3);
  REQUIRE(sin.sizes() == torch::IntArrayRef({6, 64}));
  // Token (row 1, col 2): coords (2 * 1.5/2 - 1, 2 * 2.5/3 - 1) = (0.5, 2/3); angle j < 16 uses the row
  // coordinate, 16..31 the column one, and the second half repeats the first.
  const double cy = 0.5, cx = 2.0 / 3;
  for (int j : {0, 5, 15}) {
    const double period = std::pow(100.0, 2.0 * j / 32);
    CHECK(sin[5][j].item<double>() == doctest::Approx(std::sin(2 * std::numbers::pi * cy / period)).epsilon(1e-5));
    CHECK(cos[5][16 + j].item<double>() == doctest::Approx(std::cos(2 * std::numbers::pi * cx / period)).epsilon(1e-5));
    CHECK(sin[5][32 + j].item<double>() == doctest::Approx(sin[5][j].item<double>()));
  }
  // The fused QKV: the K slice of the output carries no bias.
  lb::LinearKMaskedBias qkv(4, 12, true);
  auto y = qkv->forward(torch::zeros({1, 4}));
  CHECK(y.narrow(1, 4, 4).abs().max().item<double>() == 0.0);
  CHECK(torch::allclose(y.narrow(1, 0, 4), qkv->bias.narrow(0, 0, 4).unsqueeze(0)));

  torch::manual_seed(0);
  lb::LingBot net("s", 5);
  net->eval();
  auto out = net->forward(torch::rand({2, 3, 64, 48}));
  CHECK(out.sizes() == torch::IntArrayRef({2, 5, 4, 3}));
  CHECK_THROWS_WITH_AS(net->forward(torch::rand({1, 3, 60, 64})), doctest::Contains("divisible by the patch size 16"), ly::ConfigError);
  // The recipe's linear probe: only the head trains.
  int64_t trainable = 0;
  for (auto& p : net->parameters()) trainable += p.requires_grad() ? p.numel() : 0;
  CHECK(trainable == 384 * 5 + 5);
  auto groups = ly::LingBotFamily::param_groups(*net, 1e-4);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].params.size() == 1);  // predict.weight
  CHECK(groups[1].params.size() == 1);  // predict.bias
  // A clone (the EMA copy) keeps the frozen backbone and the buffers.
  auto copy = std::dynamic_pointer_cast<lb::LingBotImpl>(net->clone());
  REQUIRE(copy);
  CHECK(torch::equal(copy->backbone->rope_embed->periods, net->backbone->rope_embed->periods));
  CHECK_FALSE(copy->backbone->patch_embed->proj->weight.requires_grad());
}

TEST_CASE("lingbot: the stretch resize (whole canvas, no jitter, no padding) and the imgsz grid") {
  lry_test::TempDir dir("lry_lingbot");
  ly::data::SynthOptions o;
  o.out = dir / "s";
  o.images = 6;
  o.imgsz = 64;
  o.classes = 2;
  ly::tasks::synth("semantic", o);
  ly::LingBotFamily fam("s");
  fam.setup(ly::parse_args({"data=" + (dir / "s" / "data.yaml").string(), "imgsz=48"}));
  CHECK(fam.train_set()->augment().stretch);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    std::mt19937_64 rng(seed);
    auto s = fam.train_set()->get(0, rng, 0);
    CHECK(s.image.sizes() == torch::IntArrayRef({3, 48, 48}));
    CHECK(s.mask.ne(255).all().item<bool>());  // stretched: no padding, no ignore pixels
  }
  ly::LingBotFamily bad("s");
  CHECK_THROWS_WITH_AS(bad.setup(ly::parse_args({"data=" + (dir / "s" / "data.yaml").string(), "imgsz=50"})),
                       doctest::Contains("multiple of 16"), ly::ConfigError);
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, ly::family_traits<ly::LingBotFamily>::overrides);
  CHECK(cfg.lr0 == doctest::Approx(1e-3));
  CHECK(cfg.scheduler == "flat_cosine");
  CHECK(cfg.epochs == 20);
  CHECK(cfg.batch == 16);
}
