// YOLOv9 network: sizes, output shapes, parameter / FLOP counts against the published figures,
// cloning, and size errors.
#include <libreyolo/families/yolo9/classify_network.hpp>
#include <libreyolo/families/yolo9/network.hpp>

#include "support.hpp"

#include <doctest/doctest.h>

#include <string>

using libreyolo::families::yolo9::Yolo9;
using libreyolo::families::yolo9::Yolo9Options;

namespace {
int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
}  // namespace

TEST_CASE("yolo9 rejects sizes that are not built, naming the allowed ones") {
  // e: the original's size table (YOLO9_CONFIGS, snapshot c41461e) has no e either.
  try {
    Yolo9 net(Yolo9Options{"e", 80, 16});
    FAIL("no error for size e");
  } catch (const libreyolo::ConfigError& e) {
    CHECK(std::string(e.what()) == "yolo9 size 'e' is not implemented yet; available: t, s, m, c");
  }
  try {
    Yolo9 net(Yolo9Options{"x", 80, 16});
    FAIL("no error for size x");
  } catch (const libreyolo::ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("'x'") != std::string::npos);
    CHECK(msg.find("t, s, m, c") != std::string::npos);
  }
  Yolo9 net(Yolo9Options{"t", 3, 16});
  CHECK_THROWS_AS(net->forward(torch::zeros({1, 3, 100, 128})), libreyolo::ConfigError);
}

// Published (WongKinYiu/yolov9 README, MS COCO table, 640 px): YOLOv9-T 2.0M params, 7.7 GFLOPs;
// YOLOv9-S 7.1M params, 26.4 GFLOPs. Those figures are for the re-parameterised (deploy) model.
// Our training-form counts, worked out by hand from the conv shapes (weights + 2 BN params per conv,
// RepConvN counted as its 3x3 and 1x1 branches, head output convs with bias):
//   t: 2,036,544 params, 7.7939 GFLOPs   s: 7,226,192 params, 26.7076 GFLOPs
// (folding BN and the RepConvN 1x1 branches gives 2,001,824 / 7.712 and 7,105,872 / 26.378, the
// published figures; the same hand count with Ultralytics' wider class tower gives 2,128,704 params for
// t, which is Ultralytics' own yolov9t.yaml figure 2,128,720 less its 16 fixed DFL weights).
// YOLOv9-M 20.0M / 76.3 GFLOPs and YOLOv9-C 25.3M / 102.1 GFLOPs (published, deploy form); ours
//   m: 20,123,984 params, 76.7992064 GFLOPs   c: 25,498,736 params, 102.817792 GFLOPs
// counted the same way from the original's conv shapes (fixtures' keys.tsv: Σ weight numel × the
// output map's pixels at 640 px, ×2), which gives the t and s figures above too.
TEST_CASE("yolo9 t, s, m and c: output shapes, parameter count and GFLOPs at 640 px") {
  struct Case {
    std::string size;
    int64_t params;
    double gflops;
    double published_params, published_gflops;
    int64_t p3_width, up2_in;  // the neck's stride-8 GELAN: its output and input widths
  };
  for (const Case& c : {Case{"t", 2036544, 7.7938688, 2.0e6, 7.7, 64, 160}, Case{"s", 7226192, 26.7075584, 7.1e6, 26.4, 128, 320},
                        Case{"m", 20123984, 76.7992064, 20.0e6, 76.3, 240, 600},
                        Case{"c", 25498736, 102.817792, 25.3e6, 102.1, 256, 1024}}) {
    CAPTURE(c.size);
    Yolo9 net(Yolo9Options{c.size, 80, 16});
    net->eval();
    const int64_t params = parameter_count(*net);
    CHECK(params == c.params);
    CHECK(std::abs(params / c.published_params - 1.0) < 0.03);
    CHECK(net->strides() == std::vector<int64_t>{8, 16, 32});
    CHECK(net->neck->elan_up2->forward(torch::zeros({1, c.up2_in, 8, 8})).size(1) == c.p3_width);

    torch::NoGradGuard no_grad;
    libreyolo::nn::ConvMacCounter counter;
    auto out = net->forward(torch::zeros({1, 3, 640, 640}));
    CHECK(counter.gflops() == doctest::Approx(c.gflops).epsilon(1e-9));
    CHECK(std::abs(counter.gflops() / c.published_gflops - 1.0) < 0.03);
    REQUIRE(out.size() == 3);
    CHECK(out[0].sizes() == torch::IntArrayRef({1, 144, 80, 80}));
    CHECK(out[1].sizes() == torch::IntArrayRef({1, 144, 40, 40}));
    CHECK(out[2].sizes() == torch::IntArrayRef({1, 144, 20, 20}));
  }
}

TEST_CASE("yolo9 output shapes at 320 px, other nc / reg_max, non-square input") {
  torch::NoGradGuard no_grad;
  for (std::string size : {"t", "s", "m", "c"}) {
    Yolo9 net(Yolo9Options{size, 80, 16});
    net->eval();
    auto out = net->forward(torch::zeros({2, 3, 320, 320}));
    CHECK(out[0].sizes() == torch::IntArrayRef({2, 144, 40, 40}));
    CHECK(out[1].sizes() == torch::IntArrayRef({2, 144, 20, 20}));
    CHECK(out[2].sizes() == torch::IntArrayRef({2, 144, 10, 10}));
  }
  Yolo9 small(Yolo9Options{"t", 3, 8});
  small->eval();
  auto out = small->forward(torch::zeros({1, 3, 96, 160}));
  CHECK(out[0].sizes() == torch::IntArrayRef({1, 35, 12, 20}));
  CHECK(out[2].sizes() == torch::IntArrayRef({1, 35, 3, 5}));
}

TEST_CASE("yolo9 head bias initialisation follows the Ultralytics prior") {
  const int64_t nc = 3;
  Yolo9 net(Yolo9Options{"t", nc, 16});
  auto params = net->named_parameters();
  // cls bias = log(5 / nc / (640 / s)^2): s = 8 -> log(5 / 3 / 6400) = -8.25319...
  const double expected[3] = {std::log(5.0 / 3 / 6400), std::log(5.0 / 3 / 1600), std::log(5.0 / 3 / 400)};
  for (int level = 0; level < 3; ++level) {
    auto cls_bias = params["head.cv3." + std::to_string(level) + ".2.bias"];
    auto box_bias = params["head.cv2." + std::to_string(level) + ".2.bias"];
    REQUIRE(cls_bias.numel() == nc);
    CHECK(cls_bias[0].item<double>() == doctest::Approx(expected[level]));
    CHECK(box_bias.numel() == 64);
    CHECK(box_bias.min().item<double>() == 1.0);
    CHECK(box_bias.max().item<double>() == 1.0);
  }
  // The state-dict layout of LibreYOLO9 checkpoints.
  CHECK(params.contains("backbone.elan2.cv2.0.m.0.cv1.conv1.conv.weight"));
  CHECK(params.contains("neck.elan_down2.cv4.bn.weight"));
  CHECK(params["head.cv2.0.1.conv.weight"].sizes() == torch::IntArrayRef({64, 16, 3, 3}));  // 4 groups
}

TEST_CASE("yolo9 clone is a deep copy that computes the same outputs") {
  // t: ELAN1 and AConv; c: a GELAN after the stem and ADown (the slots that hold one of two module types).
  for (std::string size : {"t", "c"}) {
    CAPTURE(size);
    torch::manual_seed(0);
    Yolo9 net(Yolo9Options{size, 2, 16});
    net->eval();
    auto copy = std::dynamic_pointer_cast<libreyolo::families::yolo9::Yolo9Impl>(net->clone());
    REQUIRE(copy != nullptr);
    copy->eval();
    // The copy's slots hold the copy's own registered children, of the size's types.
    auto held = [](auto& slot) -> torch::nn::Module* {
      return slot.a.is_empty() ? static_cast<torch::nn::Module*>(slot.b.get()) : slot.a.get();
    };
    const bool c = size == "c";
    auto children = copy->backbone->named_children();
    CHECK(held(copy->backbone->elan1) == children["elan1"].get());
    CHECK(c == copy->backbone->elan1.a.is_empty());
    CHECK(c != copy->backbone->elan1.b.is_empty());
    for (auto* slot : {&copy->backbone->down2, &copy->backbone->down3, &copy->backbone->down4,
                       &copy->neck->down1, &copy->neck->down2}) {
      CHECK(c == slot->a.is_empty());
      CHECK(c != slot->b.is_empty());
    }
    CHECK(held(copy->backbone->down3) == children["down3"].get());
    CHECK(held(copy->neck->down1) == copy->neck->named_children()["down1"].get());
    CHECK(held(copy->backbone->down3) != held(net->backbone->down3));
    torch::NoGradGuard no_grad;
    auto x = torch::rand({1, 3, 64, 64});
    auto a = net->forward(x), b = copy->forward(x);
    for (int i = 0; i < 3; ++i) CHECK(torch::equal(a[i], b[i]));
    // Changing the copy leaves the original alone.
    for (auto& p : copy->parameters()) p.add_(1.0);
    auto d = net->forward(x);
    CHECK(torch::equal(a[0], d[0]));
    CHECK_FALSE(torch::equal(copy->forward(x)[0], d[0]));
  }
}

TEST_CASE("ADown (used by the larger YOLOv9 sizes) halves the resolution with split branches") {
  // cv1: Conv 16->32 3x3 s2 = 32·16·9 + 2·32 (BN) = 4672; cv2: Conv 16->32 1x1 = 512 + 64 = 576.
  libreyolo::nn::ADown down(32, 64);
  CHECK(parameter_count(*down) == 5248);
  torch::NoGradGuard no_grad;
  down->eval();
  CHECK(down->forward(torch::zeros({2, 32, 16, 16})).sizes() == torch::IntArrayRef({2, 64, 8, 8}));
}

// The original's initialisation for training from scratch (libreyolo/models/yolo9/nn.py): PyTorch's
// default module init (Conv2d / Linear kaiming-uniform a=√5 with uniform(±1/√fan_in) biases, BN
// weight 1, bias 0, eps 1e-3, momentum 0.03), then DDetect._init_bias (box output bias 1.0, class
// output bias log(5 / nc / (640 / stride)²)); nothing else touches the weights. LibTorch's CPU
// generator and module init are PyTorch's, so built in the same order from the same seed the two
// networks start from the same weights. Reference values from the original (python3-torch 1.13):
//   spec = importlib.util.spec_from_file_location("y9nn", ".../libreyolo/models/yolo9/nn.py"), loaded;
//   torch.manual_seed(0); sd = LibreYOLO9Model(cfg, nb_classes=80[, classification=True]).state_dict()
//   total = Σ over floating tensors of v.double().sum(); per tensor: sum and flatten()[0].
TEST_CASE("yolo9 initialisation from a seed equals the original's, tensor for tensor") {
  struct Probe {
    std::string name;
    double sum, first;
  };
  struct Case {
    std::string size;
    bool classify;
    double total;
    std::vector<Probe> probes;
  };
  const std::vector<Case> cases{
      {"t", false, 13738.378518553884,
       {{"backbone.conv0.conv.weight", -0.5913192177831661, -0.0014408392598852515},
        {"neck.elan_down2.cv4.conv.weight", 10.28922612965107, 0.0071799904108047485},
        {"head.cv2.2.2.weight", -5.926298439502716, 0.12258711457252502},
        {"head.cv2.2.2.bias", 64.0, 1.0},
        {"head.cv3.0.2.weight", -3.6987726735314936, -0.026088794693350792},
        {"head.cv3.0.2.bias", -922.9313659667969, -11.536642074584961}}},
      {"s", false, 28574.055434585247,
       {{"backbone.conv0.conv.weight", -0.07490452515048673, -0.0014408392598852515},
        {"neck.elan_down2.cv4.conv.weight", -0.8077908881236908, 0.03552691638469696},
        {"head.cv2.2.2.weight", 4.303711920976639, -0.14628222584724426},
        {"head.cv3.0.2.weight", -0.37645471161704336, -0.0035357095766812563}}},
      {"t", true, 9307.852898023462,
       {{"backbone.conv0.conv.weight", -0.5913192177831661, -0.0014408392598852515},
        {"head.linear.weight", 3.1900171072583703, -0.02163187600672245},
        {"head.linear.bias", -0.029390168319423537, -0.011880949139595032}}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.size);
    CAPTURE(c.classify);
    torch::manual_seed(0);
    std::shared_ptr<torch::nn::Module> net;
    if (c.classify)
      net = libreyolo::families::yolo9::Yolo9Classify(libreyolo::families::yolo9::Yolo9ClassifyOptions{c.size, 80}).ptr();
    else
      net = Yolo9(Yolo9Options{c.size, 80, 16}).ptr();
    double total = 0;
    for (const auto& p : net->named_parameters()) total += p.value().to(torch::kFloat64).sum().item<double>();
    for (const auto& b : net->named_buffers())
      if (b.value().is_floating_point()) total += b.value().to(torch::kFloat64).sum().item<double>();
    CHECK(total == doctest::Approx(c.total).epsilon(1e-9));
    auto params = net->named_parameters();
    for (const auto& p : c.probes) {
      CAPTURE(p.name);
      REQUIRE(params.contains(p.name));
      CHECK(params[p.name].to(torch::kFloat64).sum().item<double>() == doctest::Approx(p.sum).epsilon(1e-9));
      CHECK(params[p.name].flatten()[0].item<double>() == p.first);
    }
    int64_t bns = 0;
    for (const auto& m : net->modules(/*include_self=*/false))
      if (auto* bn = dynamic_cast<libreyolo::nn::BatchNorm2dImpl*>(m.get())) {
        ++bns;
        CHECK(bn->options.eps() == 1e-3);
        CHECK(bn->options.momentum().value_or(-1) == 0.03);
      }
    CHECK(bns > 0);
  }
}

TEST_CASE("yolo9 classify: logits in train and eval, dropout only in train, input and option errors") {
  using libreyolo::families::yolo9::Yolo9Classify;
  using libreyolo::families::yolo9::Yolo9ClassifyOptions;
  torch::manual_seed(1);
  Yolo9Classify net(Yolo9ClassifyOptions{"t", 5});
  // t: backbone 708,720 (the detection backbone's) + head.conv 128·1280 + 2·1280 + linear 1280·5 + 5.
  CHECK(parameter_count(*Yolo9(Yolo9Options{"t", 80, 16})->backbone) == 708720);
  CHECK(parameter_count(*net) == 708720 + 163840 + 2560 + 6405);
  CHECK(parameter_count(*Yolo9Classify(Yolo9ClassifyOptions{"s", 10})) ==
        parameter_count(*Yolo9(Yolo9Options{"s", 80, 16})->backbone) + 256 * 1280 + 2560 + 12810);
  auto x = torch::rand({2, 3, 224, 224});
  torch::NoGradGuard no_grad;
  net->train();
  auto a = net->forward(x), b = net->forward(x);
  CHECK(a.sizes() == torch::IntArrayRef({2, 5}));
  CHECK_FALSE(torch::equal(a, b));  // dropout(0.2) before the linear layer
  net->eval();
  auto e1 = net->forward(x), e2 = net->forward(x);
  CHECK(torch::equal(e1, e2));
  // Logits, not probabilities (no softmax): the rows do not sum to 1.
  CHECK(e1.sizes() == torch::IntArrayRef({2, 5}));
  CHECK(e1.sum(1).sub(1).abs().max().item<double>() > 1e-3);
  // The head is conv -> global mean -> linear: recomputed here by hand.
  auto feat = net->backbone->forward(x)[2];
  auto by_hand = net->head->linear->forward(net->head->conv->forward(feat).mean({2, 3}));
  CHECK(torch::allclose(e1, by_hand, 1e-5, 1e-6));
  // Any input size of at least 32 px works (no stride constraint: no concatenation across levels).
  CHECK(net->forward(torch::rand({1, 3, 100, 70})).sizes() == torch::IntArrayRef({1, 5}));

  CHECK_THROWS_AS(net->forward(torch::zeros({1, 1, 224, 224})), libreyolo::ConfigError);
  CHECK_THROWS_AS(net->forward(torch::zeros({1, 3, 16, 224})), libreyolo::ConfigError);
  using lry_test::message_of;
  using libreyolo::ConfigError;
  CHECK(message_of<ConfigError>([] { Yolo9Classify(Yolo9ClassifyOptions{"t", 0}); }) ==
        "yolo9 classify nc must be >= 1, got 0");
  CHECK(message_of<ConfigError>([] { Yolo9Classify(Yolo9ClassifyOptions{"t", 3, 1280, 1.0}); }) ==
        "yolo9 classify dropout must lie in [0, 1), got 1.000000");
  CHECK(message_of<ConfigError>([] { Yolo9Classify(Yolo9ClassifyOptions{"e", 3}); }) ==
        "yolo9 size 'e' is not implemented yet; available: t, s, m, c");
}
