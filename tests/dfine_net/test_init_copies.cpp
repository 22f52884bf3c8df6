// The DETR line's freshly built networks start where the originals' do: a module the original builds once
// and deep-copies (copy.deepcopy) starts equal to its copies, and a module it builds afresh in a loop
// starts with weights of its own (nn/detr/layers.hpp start_as_copies; docs/fidelity.md row 35).
//   every family: the decoder layers (rtdetr/nn.py:615, rtdetrv2/decoder.py:265, dfine/decoder.py:318-323
//                 and DEIM's, DEIMv2's, EC's likewise) and the AIFI encoder layers;
//   DEIMv2, EC:   the score heads and the box heads up to eval_idx (deim_decoder.py:414-434,
//                 ec/decoder.py:598-619); the hybrid encoder's lateral convs, downsampling blocks and fusion
//                 blocks, FPN and PAN alike (hybrid_encoder.py:491-526, ec/encoder.py:153-164); the lite
//                 encoder's two down_samples and fpn_block / pan_block (lite_encoder.py:90-108);
//   built afresh: RT-DETR's, D-FINE's and DEIM's heads and encoder blocks, and every family's LQE layers;
//   RF-DETR:      its decoder layers are copies whose matrices and deformable attentions its Transformer
//                 redraws (transformer.py:385-391): only the 1-D tensors outside the cross-attention stay copied.
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/ec/family.hpp>
#include <libreyolo/families/rfdetr/family.hpp>
#include <libreyolo/families/rtdetr/family.hpp>
#include <libreyolo/families/rtdetrv2/family.hpp>

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

namespace ly = libreyolo;

namespace {
using Tensors = std::map<std::string, torch::Tensor>;

template <class F>
Tensors fresh_network(const char* size) {
  F f(size);
  f.restore({{"names", std::vector<std::string>(8, "c")}});
  auto net = f.make_network();
  Tensors t;
  for (const auto& p : net->named_parameters()) t[p.key()] = p.value().detach().clone();
  for (const auto& b : net->named_buffers()) t[b.key()] = b.value().detach().clone();
  return t;
}

// Pairs every tensor under `a` with the one of the same suffix under `b`: REQUIREs both hold the same names
// (at least one); returns how many pairs are equal and how many there are.
std::pair<int, int> compare(const Tensors& t, const std::string& a, const std::string& b) {
  int equal = 0, total = 0;
  for (const auto& [key, value] : t) {
    if (key.rfind(a, 0) != 0) continue;
    const auto other = t.find(b + key.substr(a.size()));
    CAPTURE(key);
    REQUIRE(other != t.end());
    ++total;
    equal += torch::equal(value, other->second) ? 1 : 0;
  }
  int under_b = 0;
  for (const auto& kv : t) under_b += kv.first.rfind(b, 0) == 0 ? 1 : 0;
  CAPTURE(a);
  CAPTURE(b);
  REQUIRE(total > 0);
  REQUIRE(under_b == total);
  return {equal, total};
}
void check_copies(const Tensors& t, const std::string& a, const std::string& b) {
  const auto [equal, total] = compare(t, a, b);
  CAPTURE(a);
  CAPTURE(b);
  CHECK(equal == total);
}
// Built afresh: some randomly initialised weight differs (constant inits, norms and biases set to a prior,
// may agree).
void check_own(const Tensors& t, const std::string& a, const std::string& b) {
  const auto [equal, total] = compare(t, a, b);
  CAPTURE(a);
  CAPTURE(b);
  CHECK(equal < total);
}
}  // namespace

TEST_CASE("RT-DETR v1 and v2: the decoder layers start as copies of one; heads and encoder blocks each their own") {
  for (const auto& t : {fresh_network<ly::RTDETRFamily>("r18"), fresh_network<ly::RTDETRv2Family>("r18")}) {
    check_copies(t, "decoder.decoder.layers.0.", "decoder.decoder.layers.1.");
    check_copies(t, "decoder.decoder.layers.0.", "decoder.decoder.layers.2.");
    check_own(t, "decoder.dec_score_head.0.", "decoder.dec_score_head.1.");
    check_own(t, "decoder.dec_bbox_head.0.", "decoder.dec_bbox_head.2.");
    check_own(t, "encoder.lateral_convs.0.", "encoder.lateral_convs.1.");
    check_own(t, "encoder.fpn_blocks.0.", "encoder.pan_blocks.0.");
  }
}

TEST_CASE("D-FINE: the decoder layers start as copies of one; heads, LQE layers and encoder blocks each their own") {
  const auto t = fresh_network<ly::DFineFamily>("n");
  check_copies(t, "decoder.decoder.layers.0.", "decoder.decoder.layers.2.");
  check_own(t, "decoder.decoder.lqe_layers.0.", "decoder.decoder.lqe_layers.1.");
  check_own(t, "decoder.dec_score_head.0.", "decoder.dec_score_head.1.");
  check_own(t, "decoder.dec_bbox_head.0.", "decoder.dec_bbox_head.1.");
  check_own(t, "encoder.fpn_blocks.0.", "encoder.pan_blocks.0.");
}

TEST_CASE("DEIMv2 atto: decoder layers, score heads, the two down_samples and the fuse blocks start as copies") {
  const auto t = fresh_network<ly::DEIMv2Family>("atto");
  check_copies(t, "decoder.decoder.layers.0.", "decoder.decoder.layers.2.");
  check_copies(t, "decoder.dec_score_head.0.", "decoder.dec_score_head.2.");
  check_copies(t, "decoder.dec_bbox_head.0.", "decoder.dec_bbox_head.2.");  // one shared module
  check_own(t, "decoder.decoder.lqe_layers.0.", "decoder.decoder.lqe_layers.1.");
  check_copies(t, "encoder.down_sample1.", "encoder.down_sample2.");
  check_copies(t, "encoder.fpn_block.", "encoder.pan_block.");
}

TEST_CASE("DEIMv2 s and EC s: heads, lateral convs, downsampling and fusion blocks start as copies of one each") {
  for (const auto& t : {fresh_network<ly::DEIMv2Family>("s"), fresh_network<ly::ECFamily>("s")}) {
    check_copies(t, "decoder.decoder.layers.0.", "decoder.decoder.layers.3.");
    check_copies(t, "decoder.dec_score_head.0.", "decoder.dec_score_head.3.");
    check_copies(t, "decoder.dec_bbox_head.0.", "decoder.dec_bbox_head.3.");
    check_own(t, "decoder.decoder.lqe_layers.0.", "decoder.decoder.lqe_layers.3.");
    check_copies(t, "encoder.lateral_convs.0.", "encoder.lateral_convs.1.");
    check_copies(t, "encoder.downsample_convs.0.", "encoder.downsample_convs.1.");
    check_copies(t, "encoder.fpn_blocks.0.", "encoder.fpn_blocks.1.");
    check_copies(t, "encoder.fpn_blocks.0.", "encoder.pan_blocks.1.");
  }
}

TEST_CASE("RF-DETR: the decoder layers' biases outside the cross-attention start copied, their matrices drawn anew") {
  const auto t = fresh_network<ly::RFDETRFamily>("n");
  const std::string a = "transformer.decoder.layers.0.", b = "transformer.decoder.layers.1.";
  for (const char* name : {"linear1.bias", "linear2.bias", "norm1.weight", "norm3.bias"}) {
    CAPTURE(name);
    REQUIRE(t.count(a + name) == 1);
    CHECK(torch::equal(t.at(a + name), t.at(b + name)));
  }
  for (const char* name : {"linear1.weight", "linear2.weight", "cross_attn.value_proj.weight"}) {
    CAPTURE(name);
    REQUIRE(t.count(a + name) == 1);
    CHECK_FALSE(torch::equal(t.at(a + name), t.at(b + name)));
  }
}
