// RF-DETR's network beyond the fixtures (families/rfdetr/network.hpp): the ImageNet normalisation inside
// encode() (the original normalises before its network), the input-size rule (multiples of 32), the sizes'
// decoder depths, the original's from-scratch init of the Group-DETR heads, and a small-input run in eval
// and training mode (fewer tokens than queries: every token selected, per group in training; the
// position embeddings resampled; gradients reach the backbone), batch independence, and group 0 of the
// training forward against eval.
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/rfdetr/network.hpp>

#include <doctest/doctest.h>
#include <torch/torch.h>

using libreyolo::families::rfdetr::RFDETR;
using libreyolo::families::rfdetr::RFDETROptions;

namespace {
RFDETROptions opts(const std::string& size, int64_t classes, bool norm = true) {
  RFDETROptions o;
  o.size = size;
  o.num_classes = classes;
  o.imagenet_norm = norm;
  return o;
}
}  // namespace

TEST_CASE("rfdetr: encode() normalises [0, 1] RGB with ImageNet's mean and std; small inputs select every token") {
  torch::manual_seed(0);
  RFDETR net(opts("n", 3));
  net->eval();
  torch::NoGradGuard ng;
  const auto x = torch::rand({1, 3, 64, 96});
  const auto mean = torch::tensor({0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1});
  const auto stdev = torch::tensor({0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1});
  const auto ours = net->encode(x);
  const auto ref = net->backbone->forward((x - mean) / stdev);
  REQUIRE(ours.srcs.size() == 1);
  CHECK(torch::allclose(ours.srcs[0], ref.srcs[0], 1e-5, 1e-6));
  CHECK(ours.srcs[0].sizes() == torch::IntArrayRef({1, 256, 4, 6}));  // stride 16
  CHECK(ours.pos[0].sizes() == torch::IntArrayRef({1, 256, 4, 6}));
  const auto out = net->forward(x);
  CHECK(out.input_hw[0] == 64);
  CHECK(out.input_hw[1] == 96);
  // 4 x 6 = 24 tokens, all selected; the decoder still runs its 300 queries (the rows past the selection
  // keep refpoint_embed as it is), with 3 + 1 logits.
  CHECK(out.pred_logits.sizes() == torch::IntArrayRef({1, 300, 4}));
  CHECK(out.pred_boxes.sizes() == torch::IntArrayRef({1, 300, 4}));
  CHECK(out.aux_outputs.size() == 1);  // n: 2 decoder layers
  CHECK(out.enc_outputs.pred_logits.sizes() == torch::IntArrayRef({1, 24, 4}));
  CHECK(out.enc_outputs.pred_boxes.sizes() == torch::IntArrayRef({1, 24, 4}));
  // Without the normalisation, the raw input goes in.
  RFDETR raw(opts("n", 3, false));
  raw->eval();
  CHECK(torch::equal(raw->encode(x).srcs[0], raw->backbone->forward(x).srcs[0]));
}

TEST_CASE("rfdetr: a batch is its images run alone (the windows and the full-attention layers keep images apart)") {
  torch::manual_seed(4);
  RFDETR net(opts("n", 3));
  net->eval();
  torch::NoGradGuard ng;
  const auto x = torch::rand({2, 3, 96, 64});  // 6 x 4 patches, 2 x 2 windows of 3 x 2
  const auto both = net->encode(x);
  for (int64_t i = 0; i < 2; ++i) {
    const auto one = net->encode(x.narrow(0, i, 1));
    CHECK(torch::allclose(both.srcs[0].narrow(0, i, 1), one.srcs[0], 1e-4, 1e-5));
  }
  const auto a = net->forward(x), b = net->forward(x.narrow(0, 1, 1));
  CHECK(torch::allclose(a.enc_outputs.pred_logits.narrow(0, 1, 1), b.enc_outputs.pred_logits, 1e-4, 1e-4));
}

TEST_CASE("rfdetr: inputs must be multiples of 32; sizes n s m l; decoder depths 2 3 4 4") {
  RFDETR n(opts("n", 2));
  n->eval();
  torch::NoGradGuard ng;
  CHECK_THROWS_AS(n->encode(torch::rand({1, 3, 48, 64})), libreyolo::ConfigError);
  CHECK_THROWS_AS(RFDETR(opts("x", 2)), libreyolo::ConfigError);
  CHECK(n->transformer->decoder->layers->size() == 2);
  CHECK(RFDETR(opts("s", 2))->transformer->decoder->layers->size() == 3);
  CHECK(RFDETR(opts("l", 2))->transformer->decoder->layers->size() == 4);
  // m and l differ only in their position-embedding grid (36^2 + 1, 44^2 + 1 rows).
  CHECK(RFDETR(opts("m", 2))->backbone->body->encoder->encoder->embeddings->position_embeddings.size(1) == 36 * 36 + 1);
  CHECK(RFDETR(opts("l", 2))->backbone->body->encoder->encoder->embeddings->position_embeddings.size(1) == 44 * 44 + 1);
}

TEST_CASE("rfdetr: from scratch, every group's enc_out heads start as copies of class_embed / bbox_embed (the original's deepcopy)") {
  RFDETR net(opts("n", 5));
  CHECK(net->refpoint_embed->weight.abs().max().item<double>() == 0.0);
  CHECK(net->refpoint_embed->weight.size(0) == 13 * 300);
  CHECK(net->query_feat->weight.size(0) == 13 * 300);
  CHECK(net->transformer->enc_output->size() == 13);
  for (int64_t g : {0, 12}) {
    auto* cls = net->transformer->enc_out_class_embed[g]->as<torch::nn::LinearImpl>();
    CHECK(torch::equal(cls->weight, net->class_embed->weight));
    CHECK(torch::equal(cls->bias, net->class_embed->bias));
    auto* box = net->transformer->enc_out_bbox_embed[g]->as<libreyolo::nn::detr::MLPImpl>();
    CHECK(torch::equal(box->layer(0)->weight, net->bbox_embed->layer(0)->weight));
    CHECK(box->layer(2)->weight.abs().max().item<double>() == 0.0);
  }
  CHECK(std::abs(net->class_embed->bias[0].item<double>() - (-std::log(99.0))) < 1e-6);
}

TEST_CASE("rfdetr: a training-mode forward runs the 13 Group-DETR groups; gradients reach the backbone") {
  torch::manual_seed(1);
  RFDETR net(opts("n", 4));
  net->train();
  const auto x = torch::rand({2, 3, 64, 64});
  const auto out = net->forward(x);
  // Every query row: 13 groups x 300; two-stage: 4 x 4 = 16 tokens selected per group.
  CHECK(out.pred_logits.sizes() == torch::IntArrayRef({2, 3900, 5}));
  CHECK(out.pred_boxes.sizes() == torch::IntArrayRef({2, 3900, 4}));
  CHECK(out.aux_outputs.size() == 1);
  CHECK(out.enc_outputs.pred_logits.sizes() == torch::IntArrayRef({2, 13 * 16, 5}));
  CHECK(out.enc_outputs.pred_boxes.sizes() == torch::IntArrayRef({2, 13 * 16, 4}));
  (out.pred_logits.sum() + out.pred_boxes.sum() + out.enc_outputs.pred_logits.sum() + out.enc_outputs.pred_boxes.sum()).backward();
  auto& emb = net->backbone->body->encoder->encoder->embeddings;
  CHECK(emb->position_embeddings.grad().defined());
  CHECK(emb->patch_embeddings->projection->weight.grad().defined());
  CHECK(net->transformer->enc_output[12]->as<torch::nn::LinearImpl>()->weight.grad().defined());
  CHECK(net->query_feat->weight.grad().defined());
}

TEST_CASE("rfdetr: in training, group 0 computes what eval computes (the groups do not see each other)") {
  // 320 px: 20 x 20 = 400 tokens >= 300, so each group's selection refines exactly its own 300 rows.
  torch::manual_seed(2);
  RFDETR net(opts("n", 4));
  torch::NoGradGuard ng;
  const auto x = torch::rand({1, 3, 320, 320});
  net->train();
  const auto tr = net->forward(x);
  net->eval();
  const auto ev = net->forward(x);
  CHECK(tr.pred_logits.size(1) == 3900);
  CHECK(torch::allclose(tr.pred_logits.narrow(1, 0, 300), ev.pred_logits, 1e-4, 1e-4));
  CHECK(torch::allclose(tr.pred_boxes.narrow(1, 0, 300), ev.pred_boxes, 1e-4, 1e-5));
  CHECK(torch::allclose(tr.enc_outputs.pred_logits.narrow(1, 0, 300), ev.enc_outputs.pred_logits, 1e-4, 1e-4));
  CHECK(torch::allclose(tr.enc_outputs.pred_boxes.narrow(1, 0, 300), ev.enc_outputs.pred_boxes, 1e-4, 1e-5));
}
