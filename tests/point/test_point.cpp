// The point task: target encoding, the dataset, decoding, matching and the grid metric on hand-worked
// cases, FOMO's weighted cross-entropy, and the synthetic set.
#include <libreyolo/data/point.hpp>
#include <libreyolo/eval/point.hpp>
#include <libreyolo/tasks/all.hpp>
#include <libreyolo/tasks/point.hpp>

#include "support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>

namespace ly = libreyolo;
namespace ev = libreyolo::eval;

namespace {
// A minimal point family for the task's static helpers.
struct Stride8 : ly::tasks::PointTask<Stride8> {
  static constexpr int output_stride = 8;
  Stride8() : PointTask("s") {}
};

// logits [1, 3, 4, 4]: background 0 everywhere, foreground -10, except three cells.
torch::Tensor hand_logits() {
  auto l = torch::full({1, 3, 4, 4}, -10.0);
  l.select(1, 0).fill_(0.0);
  l[0][1][1][1] = 4.0;  // (x 1, y 1) class 0: p = e^4 / (1 + e^4 + e^-10) = 0.98201
  l[0][1][1][2] = 3.0;  // (x 2, y 1) class 0: p = 0.95257, next to the first
  l[0][2][3][3] = 2.0;  // (x 3, y 3) class 1: p = 0.88080
  return l;
}
double p_of(double z) { return std::exp(z) / (1 + std::exp(z) + std::exp(-10.0)); }
}  // namespace

TEST_CASE("point targets: a centre's cell is int(c / imgsz * G) clamped, 1 + class, the later object wins") {
  // imgsz 96, grid 12 (stride 8).
  auto pts = torch::tensor({0.f, 10.f, 20.f,    // cell (1, 2): 10/96*12 = 1.25, 20/96*12 = 2.5
                            2.f, 95.9f, 0.f,    // (11, 0)
                            1.f, 96.f, 48.f,    // x = 12 clamps to 11; y = 6
                            0.f, 47.f, 47.f,    // (5, 5)
                            2.f, 41.f, 44.f})   // (5, 5) again: this later row wins
                 .reshape({5, 3});
  auto g = ly::data::points_to_grid(pts, 96, 12);
  REQUIRE(g.sizes() == torch::IntArrayRef({12, 12}));
  CHECK(g.dtype() == torch::kInt64);
  CHECK(g[2][1].item<int64_t>() == 1);
  CHECK(g[0][11].item<int64_t>() == 3);
  CHECK(g[6][11].item<int64_t>() == 2);
  CHECK(g[5][5].item<int64_t>() == 3);
  CHECK(g.ne(0).sum().item<int64_t>() == 4);
  CHECK(ly::data::point_cell(-3.0, 96, 12) == 0);
}

TEST_CASE("point dataset: YOLO boxes and polygons become centres of the stretched image, flips move them") {
  lry_test::TempDir dir("lry_point_ds");
  const auto root = dir.path;
  std::filesystem::create_directories(root / "images" / "train");
  std::filesystem::create_directories(root / "labels" / "train");
  ly::data::Image img(40, 80, 3, 90);  // 80 wide, 40 high: stretched to 64 x 64
  ly::data::write_png(root / "images" / "train" / "a.png", img);
  std::ofstream(root / "labels" / "train" / "a.txt") << "1 0.25 0.5 0.1 0.2\n0 0.1 0.1 0.3 0.1 0.3 0.3 0.1 0.3\n";
  std::ofstream(root / "data.yaml") << "train: images/train\nval: images/train\nnames: [a, b]\n";
  auto yaml = ly::data::load_dataset_yaml(root / "data.yaml");
  ly::data::PointAugment aug;
  aug.imgsz = 64;
  aug.stride = 8;
  aug.train = false;
  auto ds = ly::data::PointDataset::open(yaml, "train", aug);
  REQUIRE(ds->size() == 1);
  std::mt19937_64 rng(1);
  auto s = ds->get(0, rng, 0);
  CHECK(s.image.sizes() == torch::IntArrayRef({3, 64, 64}));
  REQUIRE(s.points.size(0) == 2);
  CHECK(s.points[0][0].item<float>() == 1.f);
  CHECK(s.points[0][1].item<float>() == doctest::Approx(16.0));  // 0.25 * 64
  CHECK(s.points[0][2].item<float>() == doctest::Approx(32.0));
  CHECK(s.points[1][1].item<float>() == doctest::Approx(12.8));  // polygon box centre 0.2 * 64
  CHECK(s.points[1][2].item<float>() == doctest::Approx(12.8));
  CHECK(s.grid[4][2].item<int64_t>() == 2);  // (16 / 64 * 8, 32 / 64 * 8) = (2, 4)
  CHECK(s.grid[1][1].item<int64_t>() == 1);  // 12.8 / 8 = 1.6
  CHECK(s.grid.ne(0).sum().item<int64_t>() == 2);
  CHECK(s.orig_w == 80);
  CHECK(s.orig_h == 40);

  aug.train = true;
  aug.fliplr = 1.0;
  auto flipped = ly::data::PointDataset::open(yaml, "train", aug)->get(0, rng, 0);
  CHECK(flipped.points[0][1].item<float>() == doctest::Approx(48.0));  // 64 - 16
  CHECK(flipped.grid[4][6].item<int64_t>() == 2);
  auto b = ly::data::PointDataset::collate({s, flipped});
  CHECK(b.images.sizes() == torch::IntArrayRef({2, 3, 64, 64}));
  CHECK(b.grid.sizes() == torch::IntArrayRef({2, 8, 8}));
  CHECK(b.points.size() == 2);

  aug.imgsz = 60;
  CHECK_THROWS_WITH_AS(ly::data::PointDataset::open(yaml, "train", aug),
                       doctest::Contains("imgsz=60: the point task needs a positive multiple of the network's output stride 8"),
                       ly::ConfigError);
}

TEST_CASE("point decode: per-cell arg-max above conf, clustered by square suppression") {
  const auto l = hand_logits();
  auto d = ev::decode_points(l, {0.5, 1, 0});
  REQUIRE(d.size() == 1);
  REQUIRE(d[0].size(0) == 2);  // (2, 1) is inside the square of (1, 1)
  CHECK(d[0][0][0].item<float>() == 1.f);
  CHECK(d[0][0][1].item<float>() == 1.f);
  CHECK(d[0][0][2].item<float>() == doctest::Approx(p_of(4.0)));
  CHECK(d[0][0][3].item<float>() == 0.f);
  CHECK(d[0][1][0].item<float>() == 3.f);
  CHECK(d[0][1][1].item<float>() == 3.f);
  CHECK(d[0][1][2].item<float>() == doctest::Approx(p_of(2.0)));
  CHECK(d[0][1][3].item<float>() == 1.f);
  CHECK(ev::decode_points(l, {0.5, 0, 0})[0].size(0) == 3);  // radius 0: every cell is its own point
  CHECK(ev::decode_points(l, {0.9, 0, 0})[0].size(0) == 2);  // 0.982 and 0.953
  CHECK(ev::decode_points(l, {0.99, 1, 0})[0].size(0) == 0);
  CHECK(ev::decode_points(l, {0.5, 1, 1})[0].size(0) == 1);  // max_points
  auto two = ev::decode_points(torch::cat({l, torch::zeros_like(l)}), {0.5, 1, 0});
  REQUIRE(two.size() == 2);
  CHECK(two[1].size(0) == 0);  // uniform logits: p = 1/3 everywhere
}

TEST_CASE("point matching: class-aware, within the tolerance, most matches first, then confidence") {
  using P = ev::PointXY;
  // TP 2 (each at distance 1), the class-1 prediction matches nothing: FP 1, FN 1.
  auto m = ev::match_points({P{0, 0, 0}, P{5, 5, 0}, P{2, 0, 1}}, {0.9, 0.8, 0.7}, {P{1, 0, 0}, P{5, 6, 0}, P{2, 0, 0}}, 1.5);
  CHECK(m.tp() == 2);
  CHECK(m.fp == 1);
  CHECK(m.fn == 1);
  CHECK(m.total_distance == doctest::Approx(2.0));
  // Greedy nearest-first would pair A with Y and leave B alone; the assignment matches both.
  auto c = ev::match_points({P{1.2, 0, 0}, P{2.2, 0, 0}}, {0.9, 0.5}, {P{0, 0, 0}, P{2, 0, 0}}, 1.5);
  CHECK(c.tp() == 2);
  CHECK(c.fp == 0);
  CHECK(c.total_distance == doctest::Approx(1.2 + 0.2));
  // One ground truth, two candidates: the more confident one wins although it is farther.
  auto k = ev::match_points({P{0.2, 0, 0}, P{1.0, 0, 0}}, {0.6, 0.9}, {P{0, 0, 0}}, 1.5);
  REQUIRE(k.tp() == 1);
  CHECK(k.pairs[0][0] == 1);
  CHECK(k.total_distance == doctest::Approx(1.0));
  CHECK(k.fp == 1);
  // Outside the tolerance; empty sides.
  auto far = ev::match_points({P{0, 0, 0}}, {0.9}, {P{2, 0, 0}}, 1.5);
  CHECK((far.tp() == 0 && far.fp == 1 && far.fn == 1));
  auto none = ev::match_points({}, {}, {P{0, 0, 0}, P{1, 1, 0}}, 1.5);
  CHECK((none.tp() == 0 && none.fp == 0 && none.fn == 2));
  // More predictions than ground truth and the other way round (the assignment transposes).
  auto wide = ev::match_points({P{0, 0, 0}}, {0.5}, {P{3, 3, 0}, P{0, 1, 0}, P{9, 9, 0}}, 1.5);
  CHECK((wide.tp() == 1 && wide.pairs[0][1] == 1 && wide.fn == 2));
}

TEST_CASE("point metric: grid precision / recall / F1 on a hand-made batch, best setting reported") {
  auto grid = torch::zeros({1, 4, 4}, torch::kInt64);
  grid[0][1][1] = 1;  // class 0 at (1, 1): found exactly
  grid[0][2][3] = 2;  // class 1 at (3, 2): the prediction at (3, 3) is 1 cell away
  grid[0][3][0] = 1;  // class 0 at (0, 3): missed
  ev::PointMetrics m({0.5, 0.99}, {1}, 1.5);
  m.add(hand_logits(), grid);
  REQUIRE(m.settings().size() == 2);
  const auto& c = m.settings()[0].counts;
  CHECK(c.tp == 2);
  CHECK(c.fp == 0);
  CHECK(c.fn == 1);
  CHECK(c.precision() == doctest::Approx(1.0));
  CHECK(c.recall() == doctest::Approx(2.0 / 3.0));
  CHECK(c.f1() == doctest::Approx(0.8));
  CHECK(c.mean_distance() == doctest::Approx(0.5));
  const auto& hi = m.settings()[1].counts;  // conf 0.99: nothing predicted
  CHECK((hi.tp == 0 && hi.fp == 0 && hi.fn == 3));
  CHECK(hi.f1() == 0.0);
  CHECK(m.best().conf == 0.5);
  // With radius 0 the neighbour (2, 1) becomes a false positive: P = 2/3, R = 2/3.
  ev::PointMetrics r0({0.5}, {0}, 1.5);
  r0.add(hand_logits(), grid);
  CHECK(r0.best().counts.fp == 1);
  CHECK(r0.best().counts.f1() == doctest::Approx(2.0 / 3.0));
  CHECK_THROWS_AS(m.add(hand_logits(), torch::zeros({1, 5, 5}, torch::kInt64)), ly::Error);
}

TEST_CASE("point loss: FOMO's weighted cross-entropy is the weighted mean (background 1, foreground 100)") {
  auto logits = torch::tensor({0.5f, -1.0f, 2.0f, 0.0f, 0.3f, 1.0f}).reshape({1, 3, 1, 2});  // [B, C, H, W]
  auto target = torch::tensor({0L, 2L}, torch::kInt64).reshape({1, 1, 2});
  const auto lsm = torch::log_softmax(logits, 1);
  const double l0 = -lsm[0][0][0][0].item<double>(), l1 = -lsm[0][2][0][1].item<double>();
  const auto got = Stride8::weighted_ce(logits, target);
  CHECK(got.item<double>() == doctest::Approx((1 * l0 + 100 * l1) / 101).epsilon(1e-6));
  CHECK(Stride8::weighted_ce(logits, target, 1.0).item<double>() == doctest::Approx((l0 + l1) / 2).epsilon(1e-6));
  CHECK_THROWS_AS(Stride8::weighted_ce(logits, torch::zeros({1, 2, 2}, torch::kInt64)), ly::Error);
  // The value and gradient of PyTorch's CrossEntropyLoss(weight=[1, 100, 100]) on random cells.
  namespace F = torch::nn::functional;
  torch::manual_seed(3);
  auto lg = torch::randn({2, 3, 4, 5}, torch::requires_grad());
  auto tg = torch::randint(0, 3, {2, 4, 5}, torch::kInt64);
  auto ours = Stride8::weighted_ce(lg, tg);
  auto ref = F::cross_entropy(lg, tg, F::CrossEntropyFuncOptions().weight(torch::tensor({1.0f, 100.0f, 100.0f})));
  CHECK(ours.item<double>() == doctest::Approx(ref.item<double>()).epsilon(1e-6));
  auto g_ours = torch::autograd::grad({ours}, {lg})[0], g_ref = torch::autograd::grad({ref}, {lg})[0];
  CHECK(torch::allclose(g_ours, g_ref, 1e-5, 1e-7));
  // The network input: (x / 255 - 0.5) / 0.5.
  auto x = Stride8::normalise(torch::tensor({0, 255, 51}, torch::kUInt8));
  CHECK(x[0].item<float>() == doctest::Approx(-1.0));
  CHECK(x[1].item<float>() == doctest::Approx(1.0));
  CHECK(x[2].item<float>() == doctest::Approx(-0.6));
}

TEST_CASE("point synth: `data synth --task point` writes a YOLO set whose centres lie inside the images") {
  lry_test::TempDir dir("lry_point_synth");
  ly::data::SynthOptions o;
  o.out = dir.path / "set";
  o.images = 10;
  o.imgsz = 64;
  o.classes = 3;
  o.seed = 5;
  ly::tasks::synth("point", o);
  const auto& tasks = ly::tasks::synth_tasks();
  CHECK(std::find(tasks.begin(), tasks.end(), "point") != tasks.end());
  auto yaml = ly::data::load_dataset_yaml(o.out / "data.yaml");
  CHECK(yaml.names.size() == 3);
  ly::data::PointAugment aug;
  aug.imgsz = 64;
  aug.train = false;
  auto train = ly::data::PointDataset::open(yaml, "train", aug);
  auto val = ly::data::PointDataset::open(yaml, "val", aug);
  CHECK(train->size() == 8);
  CHECK(val->size() == 2);
  std::mt19937_64 rng(0);
  int64_t points = 0;
  for (size_t i = 0; i < train->size(); ++i) {
    auto s = train->get(i, rng, 0);
    CHECK(s.points.size(0) >= 1);
    CHECK(s.points.size(0) <= 5);
    CHECK(s.points.select(1, 1).ge(0).all().item<bool>());
    CHECK(s.points.select(1, 1).lt(64).all().item<bool>());
    CHECK(s.grid.ne(0).sum().item<int64_t>() >= 1);
    points += s.points.size(0);
  }
  CHECK(points >= 8);
  o.imgsz = 32;
  CHECK_THROWS_AS(ly::tasks::synth("point", o), ly::ConfigError);
}
