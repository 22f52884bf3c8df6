// FDR (nn/detr/fdr.hpp), the box transform of the D-FINE line, on values worked out by hand.
#include <libreyolo/nn/detr/fdr.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace detr = libreyolo::nn::detr;

namespace {
torch::Tensor t1(double v) { return torch::full({1}, v); }
void check_close(const torch::Tensor& a, const std::vector<double>& b, double tol = 1e-5) {
  REQUIRE(a.numel() == static_cast<int64_t>(b.size()));
  auto f = a.to(torch::kFloat64).flatten();
  for (size_t i = 0; i < b.size(); ++i) {
    CAPTURE(i);
    CHECK(f[static_cast<int64_t>(i)].item<double>() == doctest::Approx(b[i]).epsilon(tol));
  }
}
}  // namespace

TEST_CASE("weighting_function: W(n) for small reg_max, by hand") {
  // up 0.5, reg_scale 4: u1 = |0.5| * |4| = 2, u2 = 4.
  // reg_max 4: step = (2 + 1)^(2 / 2) = 3, h = 2: left = [-(3^1) + 1] = [-2], right = [3^1 - 1] = [2]
  //   W = [-4, -2, 0, 2, 4].
  check_close(detr::weighting_function(4, t1(0.5), t1(4.0)), {-4, -2, 0, 2, 4});
  // reg_max 6: step = 3^(2 / 4) = sqrt(3) = 1.7320508, h = 3: step^1 = 1.7320508, step^2 = 3
  //   left = [-3 + 1, -1.7320508 + 1] = [-2, -0.7320508], right = [0.7320508, 2]
  //   W = [-4, -2, -0.7320508, 0, 0.7320508, 2, 4].
  const double r3 = std::sqrt(3.0);
  check_close(detr::weighting_function(6, t1(0.5), t1(4.0)), {-4, -2, -(r3 - 1), 0, r3 - 1, 2, 4});
  // The signs of up and reg_scale do not matter (|.|); up 0.25, reg_scale -2: u1 = 0.5, u2 = 1,
  // reg_max 4: step = 1.5, W = [-1, -0.5, 0, 0.5, 1].
  check_close(detr::weighting_function(4, t1(-0.25), t1(-2.0)), {-1, -0.5, 0, 0.5, 1});
  // The default reg_max 32: 33 values, W(16) = 0, symmetric, W(17) = 3^(1/15) - 1, W(31) = 2, W(32) = 4.
  auto w = detr::weighting_function(32, t1(0.5), t1(4.0));
  REQUIRE(w.numel() == 33);
  CHECK(w[16].item<double>() == 0.0);
  CHECK(w[17].item<double>() == doctest::Approx(std::pow(3.0, 1.0 / 15.0) - 1).epsilon(1e-6));
  CHECK(w[31].item<double>() == doctest::Approx(2.0).epsilon(1e-6));
  CHECK(w[32].item<double>() == doctest::Approx(4.0));
  CHECK(w[0].item<double>() == doctest::Approx(-4.0));
  CHECK(torch::allclose(w, -w.flip({0}), 1e-6, 1e-6));
  CHECK((w.narrow(0, 1, 32) > w.narrow(0, 0, 32)).all().item<bool>());
  CHECK_THROWS(detr::weighting_function(5, t1(0.5), t1(4.0)));
}

TEST_CASE("distance2bbox: edge distances to a box, by hand") {
  // Reference (cx, cy, w, h) = (0.5, 0.4, 0.2, 0.1), reg_scale 4: one distance unit is w/4 = 0.05 across
  // and h/4 = 0.025 down, the half box 0.5 * 4 = 2 units.
  auto ref = torch::tensor({0.5, 0.4, 0.2, 0.1}, torch::kFloat32).reshape({1, 4});
  // Zero distances: x1 = 0.5 - 2 * 0.05 = 0.4, x2 = 0.6, y1 = 0.4 - 2 * 0.025 = 0.35, y2 = 0.45: the reference itself.
  check_close(detr::distance2bbox(ref, torch::zeros({1, 4}), t1(4.0)), {0.5, 0.4, 0.2, 0.1});
  // (l, t, r, b) = (1, 2.5, 3, -1): x1 = 0.5 - 3 * 0.05 = 0.35, y1 = 0.4 - 4.5 * 0.025 = 0.2875,
  // x2 = 0.5 + 5 * 0.05 = 0.75, y2 = 0.4 + 1 * 0.025 = 0.425 -> cx 0.55, cy 0.35625, w 0.4, h 0.1375.
  auto d = torch::tensor({1.0, 2.5, 3.0, -1.0}, torch::kFloat32).reshape({1, 4});
  check_close(detr::distance2bbox(ref, d, t1(4.0)), {0.55, 0.35625, 0.4, 0.1375});
  // The sign of reg_scale does not matter; leading dims are kept ([B, N, 4]).
  check_close(detr::distance2bbox(ref.reshape({1, 1, 4}), d.reshape({1, 1, 4}), t1(-4.0)), {0.55, 0.35625, 0.4, 0.1375});
  CHECK(detr::distance2bbox(ref.expand({2, 3, 4}), d.expand({2, 3, 4}), t1(4.0)).sizes() == torch::IntArrayRef({2, 3, 4}));
}

TEST_CASE("bbox2distance: a target box to bins and two-bin weights, by hand") {
  // reg_max 4, up 0.5, reg_scale 4: W = [-4, -2, 0, 2, 4] (above).
  // Point 0 = (0.5, 0.4, 0.2, 0.1), box (0.35, 0.2875, 0.75, 0.425): distances (1, 2.5, 3, -1) (above):
  //   1    lies in [W2, W3] = [0, 2]:  bin 2, weight_right = |1 - 0| / (1 + 1) = 0.5, weight_left 0.5
  //   2.5  lies in [W3, W4] = [2, 4]:  bin 3, weight_right = 0.5 / (0.5 + 1.5) = 0.25, weight_left 0.75
  //   3    lies in [2, 4]:             bin 3, weight_right = 1 / 2 = 0.5, weight_left 0.5
  //   -1   lies in [W1, W2] = [-2, 0]: bin 1, weight_right = 1 / 2 = 0.5, weight_left 0.5
  // Point 1 = (0.5, 0.5, 0.4, 0.4) (unit 0.1), distances (5, -5, 0.5, -3): box
  //   x1 = 0.5 - 7 * 0.1 = -0.2, y1 = 0.5 + 3 * 0.1 = 0.8, x2 = 0.5 + 2.5 * 0.1 = 0.75, y2 = 0.5 - 0.1 = 0.4:
  //   5    >= W4: bin reg_max - 0.1 = 3.9 (the clamp to reg_max - eps keeps it), weight_right 1, weight_left 0
  //   -5   <  W0: bin 0, weight_right 0, weight_left 1
  //   0.5  in [0, 2]:   bin 2, weight_right = 0.5 / 2 = 0.25, weight_left 0.75
  //   -3   in [-4, -2]: bin 0, weight_right = 1 / 2 = 0.5, weight_left 0.5
  auto pts = torch::tensor({0.5, 0.4, 0.2, 0.1, 0.5, 0.5, 0.4, 0.4}, torch::kFloat32).reshape({2, 4});
  auto box = torch::tensor({0.35, 0.2875, 0.75, 0.425, -0.2, 0.8, 0.75, 0.4}, torch::kFloat32).reshape({2, 4});
  check_close(detr::bbox2distance_continuous(pts, box, t1(4.0)), {1, 2.5, 3, -1, 5, -5, 0.5, -3}, 1e-4);
  auto [bins, wr, wl] = detr::bbox2distance(pts, box, 4, t1(4.0), t1(0.5));
  check_close(bins, {2, 3, 3, 1, 3.9, 0, 2, 0});
  check_close(wr, {0.5, 0.25, 0.5, 0.5, 1, 0, 0.25, 0.5}, 1e-4);
  check_close(wl, {0.5, 0.75, 0.5, 0.5, 0, 1, 0.75, 0.5}, 1e-4);
  CHECK_FALSE(bins.requires_grad());
}

TEST_CASE("FDR round trip: distance2bbox and its inverse; the two-bin weights rebuild the distance") {
  torch::manual_seed(3);
  auto pts = torch::cat({torch::rand({64, 2}) * 0.8 + 0.1, torch::rand({64, 2}) * 0.3 + 0.05}, 1);
  auto dist = torch::rand({64, 4}) * 6 - 2;  // within (-2, 4): boxes with positive size
  auto s = t1(4.0), up = t1(0.5);
  auto boxes = detr::box_cxcywh_to_xyxy(detr::distance2bbox(pts, dist, s));
  auto back = detr::bbox2distance_continuous(pts, boxes, s);
  CHECK(torch::allclose(back, dist, 1e-4, 1e-4));
  // In range, W(bin) * weight_left + W(bin + 1) * weight_right is the distance itself.
  const int64_t R = 32;
  auto W = detr::weighting_function(R, up, s);
  auto [idx, wr, wl] = detr::translate_gt(dist, R, s, up);
  auto i = idx.to(torch::kLong);
  auto rebuilt = W.index_select(0, i) * wl + W.index_select(0, i + 1) * wr;
  CHECK(torch::allclose(rebuilt, dist.flatten(), 1e-4, 1e-4));
  CHECK(((wl >= 0) & (wl <= 1) & (wr >= 0) & (wr <= 1)).all().item<bool>());
}

TEST_CASE("integral: a distribution peaked at bin j integrates to W(j)") {
  const int64_t R = 6;
  auto W = detr::weighting_function(R, t1(0.5), t1(4.0));  // [-4, -2, -0.732, 0, 0.732, 2, 4]
  // Edges peaked at bins 0, 3, 5, 6 (logit 60 there, 0 elsewhere): -4, 0, 2, 4.
  auto x = torch::zeros({1, 1, 4 * (R + 1)});
  const std::vector<int64_t> peaks{0, 3, 5, 6};
  for (int64_t e = 0; e < 4; ++e) x[0][0][e * (R + 1) + peaks[static_cast<size_t>(e)]] = 60.0;
  auto y = detr::integral(x, W, R);
  CHECK(y.sizes() == torch::IntArrayRef({1, 1, 4}));
  check_close(y, {-4, 0, 2, 4}, 1e-5);
  // Uniform logits: the mean of W, 0 by symmetry.
  CHECK(detr::integral(torch::zeros({2, 4 * (R + 1)}), W, R).abs().max().item<double>() < 1e-6);
}
