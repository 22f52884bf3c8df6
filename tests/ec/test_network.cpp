// EC's network beyond the fixtures (families/ec/network.hpp): the ImageNet normalisation inside encode()
// (the original normalises before its network), the input-size rule (multiples of 32), the projector per
// size, and a training-mode decoder run with denoising queries at a small size.
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/ec/network.hpp>
#include <libreyolo/nn/vit.hpp>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <vector>

using libreyolo::families::ec::EC;
using libreyolo::families::ec::ECOptions;

TEST_CASE("ec: encode() normalises [0, 1] RGB with ImageNet's mean and std, then backbone + encoder") {
  torch::manual_seed(0);
  EC net(ECOptions{"s", 3, 640, true});
  net->eval();
  torch::NoGradGuard ng;
  const auto x = torch::rand({1, 3, 64, 96});
  const auto mean = torch::tensor({0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1});
  const auto stdev = torch::tensor({0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1});
  const auto ours = net->encode(x);
  const auto ref = net->hybrid_encoder->forward(net->backbone->forward((x - mean) / stdev));
  REQUIRE(ours.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(torch::allclose(ours[i], ref[i], 1e-5, 1e-6));
  // Strides 8, 16, 32 of a 64 x 96 input.
  CHECK(ours[0].sizes() == torch::IntArrayRef({1, 192, 8, 12}));
  CHECK(ours[1].sizes() == torch::IntArrayRef({1, 192, 4, 6}));
  CHECK(ours[2].sizes() == torch::IntArrayRef({1, 192, 2, 3}));
  const auto out = net->forward(x);
  CHECK(out.input_hw[0] == 64);
  CHECK(out.input_hw[1] == 96);
  // 8 x 12 + 4 x 6 + 2 x 3 = 126 tokens: fewer than 300 queries, all of them selected.
  CHECK(out.result->pred_logits.sizes() == torch::IntArrayRef({1, 126, 3}));
  // Without the normalisation, the raw input goes in.
  EC raw(ECOptions{"s", 3, 640, false});
  raw->eval();
  const auto r = raw->encode(x);
  const auto rr = raw->hybrid_encoder->forward(raw->backbone->forward(x));
  CHECK(torch::equal(r[0], rr[0]));
}

TEST_CASE("ec: inputs must be multiples of 32; s/m project the stride-32 level only, l/x every level to 256") {
  EC s(ECOptions{"s", 2, 640, true});
  s->eval();
  torch::NoGradGuard ng;
  CHECK_THROWS_AS(s->encode(torch::rand({1, 3, 48, 64})), libreyolo::ConfigError);
  CHECK(s->backbone->projector->size() == 1);
  CHECK(s->backbone->out_channels() == 192);
  EC l(ECOptions{"l", 2, 640, true});
  CHECK(l->backbone->projector->size() == 3);
  CHECK(l->backbone->out_channels() == 256);
  CHECK_THROWS_AS(EC(ECOptions{"n", 2, 640, true}), libreyolo::ConfigError);
}

TEST_CASE("ec: a training-mode forward leaves the decoder to the loss; with targets it adds denoising queries") {
  torch::manual_seed(1);
  EC net(ECOptions{"s", 4, 640, true});
  net->train();
  const auto out = net->forward(torch::rand({2, 3, 64, 64}));
  CHECK(out.pending());
  std::vector<libreyolo::nn::detr::DetrTarget> t(2);
  t[0].labels = torch::tensor({1, 2}, torch::kInt64);
  t[0].boxes = torch::tensor({0.5f, 0.5f, 0.2f, 0.3f, 0.3f, 0.6f, 0.1f, 0.1f}).view({2, 4});
  t[1].labels = torch::tensor({3}, torch::kInt64);
  t[1].boxes = torch::tensor({0.4f, 0.4f, 0.5f, 0.5f}).view({1, 4});
  const auto& r = out.run(&t);
  CHECK(r.training);
  CHECK(r.aux_outputs.size() == 3);  // 4 layers: the last is the output
  REQUIRE(r.dn_meta.has_value());
  CHECK(r.dn_outputs.size() == 4);
  CHECK(r.pred_logits.size(1) == 84);  // 8x8 + 4x4 + 2x2 tokens, all selected
  // Gradients reach the backbone through the decoder's losses.
  (r.pred_logits.sum() + r.pred_boxes.sum() + r.dn_outputs.back().pred_boxes.sum()).backward();
  CHECK(net->backbone->backbone->register_token.grad().defined());
  CHECK(net->backbone->backbone->blocks[11]->as<libreyolo::nn::vit::BlockImpl>()->mlp->fc2->weight.grad().defined());
}

TEST_CASE("vit rope_qk: q and k rotated together equal the per-tensor rotate-half form on the patch tokens, element for element") {
  namespace vit = libreyolo::nn::vit;
  torch::manual_seed(3);
  vit::RopePositionEmbedding rope(64, 2);  // D_head 32
  rope->eval();
  auto [sin, cos] = rope->forward(3, 5);   // 15 patch tokens
  const int64_t B = 2, prefix = 5, N = prefix + 15, H = 2, Dh = 32;
  const auto tables = vit::token_rope(sin, cos, prefix);
  for (auto dtype : {torch::kFloat32, torch::kHalf}) {  // half: cast to the fp32 tables and back, as under autocast
    const auto t = torch::randn({B, N, 3, H, Dh}).to(dtype);  // the fused QKV's [B, N, 3, heads, D_head] view
    const auto qk = vit::rope_qk(t.narrow(2, 0, 2), tables);
    CHECK((qk.scalar_type() == dtype));
    for (int64_t j = 0; j < 2; ++j) {
      const auto x = t.select(2, j).transpose(1, 2).to(torch::kFloat32);  // [B, heads, N, D_head], the tables' dtype
      const auto ref = torch::cat({x.narrow(2, 0, prefix), vit::rope_apply(x.narrow(2, prefix, N - prefix), sin, cos)}, 2).to(dtype);
      const auto ours = qk.select(2, j).transpose(1, 2);
      CHECK(torch::equal(ours, ref));
      CHECK(torch::equal(ours.narrow(2, 0, prefix), t.select(2, j).transpose(1, 2).narrow(2, 0, prefix)));  // prefix unrotated
      CHECK_FALSE(torch::equal(ours.narrow(2, prefix, 1), t.select(2, j).transpose(1, 2).narrow(2, prefix, 1)));  // not vacuous
    }
  }
}
