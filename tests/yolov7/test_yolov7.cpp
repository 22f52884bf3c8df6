// YOLOv7-b: the original's state-dict layout and parameter count, the forward, and the SimOTA loss
// against the original's numbers. There is no LibreYOLO fixture for YOLOv7; the reference data were
// produced by running the original's own builder and loss on CPU under PyTorch 1.13.1:
//   - original_keys.tsv: every state_dict name and shape of the original's YOLOv7Model(num_classes=80)
//     (Libre-YOLO/libreyolo libreyolo/models/yolo7/net.py + blocks.py on the upstream v7.yaml); its
//     parameter count is 37,622,682 (37,212,738 at 4 classes). The YOLOv7 paper's 36.9M is the deployed
//     model (RepConv fused, implicit knowledge folded into the head conv).
//   - the loss values: the original's YOLOv7Loss (libreyolo/models/yolo7/loss.py) on the deterministic
//     maps built here (float64 formulas cast to float32): 2 images of 64 px, 3 classes; gts image 0:
//     class 1 (8,8,40,36), class 2 (30,20,60,56); image 1: class 0 (4,30,28,62).
#include <libreyolo/families/yolov7/family.hpp>

#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace v7 = libreyolo::families::yolov7;

namespace {

std::vector<std::pair<std::string, std::string>> original_keys() {
  std::ifstream in(LIBREYOLO_SOURCE_DIR "/tests/yolov7/original_keys.tsv");
  REQUIRE(in.good());
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

std::string shape_of(const torch::Tensor& t) {
  std::string s;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d) s += 'x';
    s += std::to_string(t.size(d));
  }
  return s;
}

int64_t count(torch::nn::Module& m) {
  int64_t n = 0;
  for (auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("yolov7-b has the original's 564 state-dict entries, names and shapes, and its parameter count") {
  v7::Yolov7 net(v7::Yolov7Options{"b", 80});
  std::map<std::string, std::string> ours;
  for (auto& p : net->named_parameters()) ours[p.key()] = shape_of(p.value());
  for (auto& b : net->named_buffers()) ours[b.key()] = shape_of(b.value());
  const auto theirs = original_keys();
  CHECK(theirs.size() == 564);
  CHECK(ours.size() == theirs.size());
  std::string diffs;
  for (const auto& [name, shape] : theirs) {
    auto it = ours.find(name);
    if (it == ours.end()) diffs += "missing " + name + "\n";
    else if (it->second != shape) diffs += "shape " + name + " ours " + it->second + " original " + shape + "\n";
  }
  CHECK_MESSAGE(diffs.empty(), diffs);
  const int64_t original = 37622682;
  CHECK(count(*net) == original);  // exact, so within the 1% the issue asks for
  v7::Yolov7 four(v7::Yolov7Options{"b", 4});
  CHECK(count(*four) == 37212738);
  // The prior: objectness and class biases at -log(99), box biases left at PyTorch's init.
  auto bias = net->head()->heads[0]->as<v7::IDetectionImpl>()->head_conv->bias.view({3, 85});
  CHECK(bias.narrow(1, 4, 81).sub(-std::log(99.0)).abs().max().item<double>() < 1e-6);
  CHECK(bias.narrow(1, 0, 4).abs().max().item<double>() < 1.0);
  CHECK_THROWS_AS(v7::Yolov7(v7::Yolov7Options{"x", 80}), libreyolo::ConfigError);
}

TEST_CASE("yolov7-b forward: three raw maps at strides 8, 16, 32; decode and NMS") {
  libreyolo::Yolov7Family fam("b");
  fam.restore({{"names", std::vector<std::string>{"a", "b", "c"}}});
  torch::manual_seed(1);
  auto net = fam.make_network();
  net->eval();
  torch::NoGradGuard ng;
  auto maps = net->forward(torch::rand({2, 3, 64, 96}));
  REQUIRE(maps.size() == 3);
  CHECK(maps[0].sizes() == torch::IntArrayRef({2, 24, 8, 12}));
  CHECK(maps[1].sizes() == torch::IntArrayRef({2, 24, 4, 6}));
  CHECK(maps[2].sizes() == torch::IntArrayRef({2, 24, 2, 3}));
  auto dec = libreyolo::Yolov7Family::decode_predictions(maps, 3);
  CHECK(dec.sizes() == torch::IntArrayRef({2, 3 * (96 + 24 + 6), 7}));
  CHECK((dec.narrow(2, 2, 2) >= dec.narrow(2, 0, 2)).all().item<bool>());
  libreyolo::tasks::DecodeOptions o;
  o.conf = 0.0;
  o.max_det = 5;
  auto det = fam.decode(maps, o);
  REQUIRE(det.size() == 2);
  CHECK(det[0].size(0) == 5);
  CHECK(det[0].size(1) == 6);
  CHECK_THROWS_AS(net->forward(torch::rand({1, 3, 48, 64})), libreyolo::ConfigError);
}

TEST_CASE("yolov7 decode: a zero map gives the anchor boxes at the cell centres") {
  // σ(0) = 0.5: centre = (2·0.5 - 0.5 + col + ... ) -> (col + 0.5)·s, size (2·0.5)²·anchor = anchor.
  std::vector<torch::Tensor> maps{torch::zeros({1, 24, 2, 2}), torch::zeros({1, 24, 1, 1}), torch::zeros({1, 24, 1, 1})};
  auto d = v7::decode_maps(maps, 3);
  REQUIRE(d.out.sizes() == torch::IntArrayRef({1, 18, 8}));
  // Level 0, anchor 1 (19 x 36), cell (row 1, col 0) = index 4 + 2 = 6.
  auto r = d.out[0][6];
  CHECK(r[0].item<double>() == doctest::Approx(4.0));
  CHECK(r[1].item<double>() == doctest::Approx(12.0));
  CHECK(r[2].item<double>() == doctest::Approx(19.0));
  CHECK(r[3].item<double>() == doctest::Approx(36.0));
  CHECK(d.centres[6][0].item<double>() == doctest::Approx(4.0));
  CHECK(d.centres[6][1].item<double>() == doctest::Approx(12.0));
  // Level 2 (stride 32), anchor 2 = 459 x 401.
  CHECK(d.out[0][17][2].item<double>() == doctest::Approx(459.0));
  CHECK(d.strides[17].item<double>() == 32.0);
}

namespace {
struct V7Case {
  double scale, offset, bias;
  double iou, obj, cls, total;
  int64_t num_fg;
  std::array<std::array<double, 2>, 3> grads;  // per map: sum, abs sum
};
}  // namespace

TEST_CASE("yolov7 SimOTA loss equals the original's: values, positives and gradients") {
  const V7Case cases[] = {
      {1.0, 0.3, 0.0, 3.874447107, 38.77125168, 2.237557888, 44.883255, 10,
       {{{19.05296146, 21.9198248}, {5.20088557, 5.831866814}, {1.567135264, 2.283578624}}}},
      {2.0, 1.7, -1.0, 3.927356243, 52.01462936, 2.053530693, 57.99551773, 5,
       {{{24.18493094, 29.90154411}, {6.552408045, 6.552408045}, {1.705304181, 1.705304181}}}},
  };
  auto t = torch::zeros({2, 3, 5});
  t.select(2, 0).fill_(-1);
  const float rows[3][6] = {{0, 1, 8, 8, 40, 36}, {0, 2, 30, 20, 60, 56}, {1, 0, 4, 30, 28, 62}};
  int next[2] = {0, 0};
  for (const auto& r : rows) {
    const int b = static_cast<int>(r[0]);
    for (int k = 0; k < 5; ++k) t[b][next[b]][k] = r[k + 1];
    ++next[b];
  }
  v7::SimOTALoss loss(3);
  for (const auto& c : cases) {
    CAPTURE(c.scale);
    std::vector<torch::Tensor> maps;
    const int64_t hw[3][2] = {{8, 8}, {4, 4}, {2, 2}};
    int64_t k = 0;
    for (auto& s : hw) {
      const int64_t n = 2 * 24 * s[0] * s[1];
      auto j = torch::arange(k, k + n, torch::kFloat64);
      k += n;
      maps.push_back((c.scale * torch::sin(0.13 * j + c.offset) + c.bias).to(torch::kFloat32).view({2, 24, s[0], s[1]}).set_requires_grad(true));
    }
    auto r = loss(maps, t);
    CHECK(r.num_fg.item<double>() == static_cast<double>(c.num_fg));
    CHECK(r.items[0].item<double>() == doctest::Approx(c.iou).epsilon(1e-5));
    CHECK(r.items[1].item<double>() == doctest::Approx(c.obj).epsilon(1e-5));
    CHECK(r.items[2].item<double>() == doctest::Approx(c.cls).epsilon(1e-5));
    CHECK(r.total.item<double>() == doctest::Approx(c.total).epsilon(1e-5));
    r.total.backward();
    for (size_t l = 0; l < 3; ++l) {
      CAPTURE(l);
      auto g = maps[l].grad().to(torch::kFloat64);
      CHECK(g.sum().item<double>() == doctest::Approx(c.grads[l][0]).epsilon(1e-4));
      CHECK(g.abs().sum().item<double>() == doctest::Approx(c.grads[l][1]).epsilon(1e-4));
    }
  }
  // No gt: only the objectness term, pushing every anchor down; finite.
  std::vector<torch::Tensor> zero{torch::zeros({2, 24, 8, 8}), torch::zeros({2, 24, 4, 4}), torch::zeros({2, 24, 2, 2})};
  auto none = loss(zero, torch::full({2, 1, 5}, -1.0));
  CHECK(none.num_fg.item<double>() == 0.0);
  CHECK(none.items[0].item<double>() == 0.0);
  CHECK(none.items[2].item<double>() == 0.0);
  CHECK(none.items[1].item<double>() == doctest::Approx(2 * 3 * 84 * std::log(2.0)).epsilon(1e-5));
  CHECK_THROWS_AS(loss(zero, torch::zeros({3, 1, 5})), libreyolo::DataError);
}

TEST_CASE("yolov7-b overfits one synthetic image: the loss falls") {
  libreyolo::Yolov7Family fam("b");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}});
  torch::manual_seed(0);
  auto net = fam.make_network();
  net->train();
  libreyolo::data::DetectBatch b;
  b.images = (torch::rand({1, 3, 64, 64}) * 255).to(torch::kUInt8);
  b.targets = torch::tensor({0.f, 8.f, 8.f, 40.f, 36.f, 1.f, 30.f, 20.f, 60.f, 56.f}).view({1, 2, 5});
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0));
  std::vector<double> losses;
  for (int step = 0; step < 80; ++step) {
    opt.zero_grad();
    auto r = fam.loss(net->forward(libreyolo::Yolov7Family::input(b)), b);
    REQUIRE(std::isfinite(r.total.item<double>()));
    r.total.backward();
    opt.step();
    losses.push_back(r.total.item<double>());
  }
  // SimOTA's assignment jumps from step to step (4.5 -> 6.4 and back within a few steps), so one final value is a
  // noisy measure: at 40 steps it was 5.57 with one OpenMP thread and 4.27 with two (session 40, against a bound of
  // 5.31). The mean of the last 10 of 80 steps: about 3.9 and 3.7 from 10.6.
  const double tail = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10;
  MESSAGE("yolov7-b one-image loss " << losses.front() << " -> mean of the last 10 of " << losses.size() << " steps "
                                     << tail);
  CHECK(tail < 0.5 * losses.front());
}

TEST_CASE("yolov7 optimizer groups: the implicit tensors go with the biases, without weight decay, as in the original") {
  libreyolo::Yolov7Family fam("b");
  fam.restore({{"names", {"a", "b", "c"}}});
  auto net = fam.make_network();
  const auto g = fam.param_groups(*net, 5e-4);
  REQUIRE(g.size() == 3);
  CHECK(g[0].weight_decay == doctest::Approx(5e-4));
  CHECK(g[2].weight_decay == 0);
  auto holds = [](const libreyolo::train::ParamGroup& grp, const torch::Tensor& t) {
    for (const auto& p : grp.params)
      if (p.is_same(t)) return true;
    return false;
  };
  int implicit = 0;
  size_t total = 0;
  for (const auto& grp : g) total += grp.params.size();
  for (const auto& item : net->named_parameters()) {
    if (!item.key().ends_with(".implicit")) continue;
    ++implicit;
    CAPTURE(item.key());
    CHECK(holds(g[2], item.value()));
    CHECK_FALSE(holds(g[0], item.value()));
  }
  CHECK(implicit == 6);  // ImplicitA and ImplicitM at each of the 3 levels
  CHECK(total == net->parameters().size());
  for (const auto& p : g[0].params) CHECK(p.dim() == 4);  // conv weights only
}
