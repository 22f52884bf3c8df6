// DetectionMetrics against values worked out by hand from pycocotools' cocoeval.py (evaluateImg,
// accumulate, summarize). Notation in the comments: rc / pr are accumulate()'s cumulative recall and
// precision over the score-sorted detections, "env" the precision envelope, and "points" the recall
// thresholds r * 0.01 (r = 0..100) read at searchsorted(rc, r * 0.01, 'left'). Precision is
// tp / (tp + fp + 2^-52), so a "1" below is 1 - 2^-52 (hence the Approx).
#include <libreyolo/eval/detection.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cfloat>
#include <initializer_list>
#include <vector>

using libreyolo::eval::DetectionMetrics;

namespace {

// pred rows x1, y1, x2, y2, score, class; gt rows class, x1, y1, x2, y2 (float64 so that the
// hand-made "hair below" coordinates stay what they say).
torch::Tensor preds(std::initializer_list<std::array<double, 6>> rows) {
  std::vector<double> v;
  for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
  return torch::tensor(v, torch::kFloat64).view({static_cast<int64_t>(rows.size()), 6});
}
torch::Tensor gts(std::initializer_list<std::array<double, 5>> rows) {
  std::vector<double> v;
  for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
  return torch::tensor(v, torch::kFloat64).view({static_cast<int64_t>(rows.size()), 5});
}
torch::Tensor no_preds() { return torch::zeros({0, 6}); }
torch::Tensor no_gts() { return torch::zeros({0, 5}); }

// Same in every COCO statistic and in the best-F1 numbers.
void check_same(const DetectionMetrics::Result& a, const DetectionMetrics::Result& b) {
  const auto sa = a.stats(), sb = b.stats();
  for (size_t i = 0; i < sa.size(); ++i) CHECK(sa[i] == sb[i]);
  CHECK(a.precision == b.precision);
  CHECK(a.recall == b.recall);
  CHECK(a.classes == b.classes);
}

}  // namespace

TEST_CASE("COCO thresholds and box IoU are numpy's / maskApi's values") {
  // np.linspace(.5, .95, 10) = t * (0.45 / 9) + 0.5, last 0.95: 0.75 is exact (summarize finds it),
  // 0.9 comes out as 0.8999999999999999.
  CHECK(DetectionMetrics::iou_threshold(0) == 0.5);
  CHECK(DetectionMetrics::iou_threshold(5) == 0.75);
  CHECK(DetectionMetrics::iou_threshold(8) < 0.9);
  CHECK(DetectionMetrics::iou_threshold(8) == doctest::Approx(0.9));
  CHECK(DetectionMetrics::iou_threshold(9) == 0.95);
  // np.linspace(0, 1, 101) = r * 0.01, last 1.0: 35 * 0.01 = 0.35000000000000003 > 0.35.
  CHECK(DetectionMetrics::recall_threshold(50) == 0.5);
  CHECK(DetectionMetrics::recall_threshold(35) > 0.35);
  CHECK(DetectionMetrics::recall_threshold(100) == 1.0);
  // (0,0,10,10) vs (5,5,15,15) as x, y, w, h: intersection 5 * 5 = 25 (no +1), union 175 -> 1/7.
  CHECK(DetectionMetrics::coco_iou({0, 0, 10, 10}, {5, 5, 10, 10}) == doctest::Approx(1.0 / 7));
  CHECK(DetectionMetrics::coco_iou({0, 0, 10, 10}, {10, 0, 10, 10}) == 0.0);  // touching: w = 0
  CHECK(DetectionMetrics::coco_iou({0, 0, 10, 5}, {0, 0, 10, 10}) == 0.5);    // exactly 50 / 100
}

// Image 0: c0 (10,10,50,50) area 1600 (medium), c1 (0,0,20,20) area 400 (small); image 1: c0
// (0,0,100,120) area 12000 (large). Every gt found exactly, nothing else. c0: rc 0.5, 1 and pr ~1 ->
// AP 1 at every threshold; c1 the same. Medium for c0: the large gt is ignored, so its detection
// (matched to it) is ignored too; large: likewise for the medium one. Small: c1 only.
TEST_CASE("a perfect prediction scores 1 everywhere (float32 input, as validate() passes it)") {
  DetectionMetrics m;
  m.add(torch::tensor({10.f, 10.f, 50.f, 50.f, 0.9f, 0.f, 0.f, 0.f, 20.f, 20.f, 0.8f, 1.f}).view({2, 6}),
        torch::tensor({0.f, 10.f, 10.f, 50.f, 50.f, 1.f, 0.f, 0.f, 20.f, 20.f}).view({2, 5}));
  m.add(torch::tensor({0.f, 0.f, 100.f, 120.f, 0.7f, 0.f}).view({1, 6}),
        torch::tensor({0.f, 0.f, 0.f, 100.f, 120.f}).view({1, 5}));
  auto r = m.compute();
  REQUIRE(r.classes == std::vector<int64_t>{0, 1});
  for (double s : r.stats()) CHECK(s == doctest::Approx(1.0));
  CHECK(r.ap_per_class[0] == doctest::Approx(1.0));
  CHECK(r.ap50_per_class[1] == doctest::Approx(1.0));
  CHECK(r.precision == doctest::Approx(1.0));
  CHECK(r.recall == doctest::Approx(1.0));
  CHECK(m.images() == 2);

  // COCO's precision is 1 / (1 + 2^-52) = 1 - 2^-52 for a lone true positive: its 1010 entries
  // average to 0.9999999999999999, not 1.
  DetectionMetrics one;
  one.add(preds({{5, 5, 25, 45, 0.99, 3}}), gts({{3, 5, 5, 25, 45}}));
  CHECK(one.compute().map50_95 < 1.0);
  CHECK(one.compute().map50_95 == doctest::Approx(1.0));
}

// One image, c0 gts g1 (0,0,10,10), g2 (20,0,30,10), IoU 1 matches, so every threshold is alike.
TEST_CASE("a false positive ranked above the true positives: the precision envelope") {
  SUBCASE("FP 0.9, TP 0.8, TP 0.7") {
    // rc 0, .5, 1; pr 0, .5, 2/3; env 2/3, 2/3, 2/3: point 0 reads index 0 (raw precision 0, the
    // envelope lifts it), (0, .5] index 1, (.5, 1] index 2 -> all 101 points 2/3 -> AP 2/3.
    // Without the envelope it would be (50 * .5 + 50 * 2/3) / 101 = 0.578.
    DetectionMetrics m;
    m.add(preds({{50, 50, 60, 60, 0.9, 0}, {0, 0, 10, 10, 0.8, 0}, {20, 0, 30, 10, 0.7, 0}}),
          gts({{0, 0, 0, 10, 10}, {0, 20, 0, 30, 10}}));
    auto r = m.compute();
    CHECK(r.map50_95 == doctest::Approx(2.0 / 3));
    CHECK(r.map50 == doctest::Approx(2.0 / 3));
    CHECK(r.ar100 == doctest::Approx(1.0));
    CHECK(r.ar10 == doctest::Approx(1.0));
    CHECK(r.ar1 == 0.0);  // the image's first detection is the FP: recall 0
    // Best F1 at IoU .5: conf (0.8, 0.9] F1 0, (0.7, 0.8] P = R = .5, <= 0.7 P 2/3 R 1 F1 0.8.
    CHECK(r.precision == doctest::Approx(2.0 / 3));
    CHECK(r.recall == doctest::Approx(1.0));
  }
  SUBCASE("TP 0.9, FP 0.8, TP 0.7") {
    // rc .5, .5, 1; pr 1, .5, 2/3; env 1, 2/3, 2/3. Points 0..0.50 (51, recThrs[50] = 0.5 exactly)
    // read index 0 -> 1; 0.51..1 (50) read index 2 -> 2/3. AP = (51 + 100/3) / 101 = 253/303.
    DetectionMetrics m;
    m.add(preds({{0, 0, 10, 10, 0.9, 0}, {50, 50, 60, 60, 0.8, 0}, {20, 0, 30, 10, 0.7, 0}}),
          gts({{0, 0, 0, 10, 10}, {0, 20, 0, 30, 10}}));
    auto r = m.compute();
    CHECK(r.map50_95 == doctest::Approx(253.0 / 303));
    CHECK(r.ar1 == doctest::Approx(0.5));
  }
}

// Equal scores keep their order: across images the image added first comes first (COCO concatenates
// in imgIds order and mergesorts); within an image the earlier row comes first.
//   FP then TP (one gt each image, npig 2): rc 0, .5; pr 0, .5; env .5, .5 -> points 0..0.5 (51)
//   read .5 -> AP 25.5/101 = 51/202. TP then FP: rc .5, .5; pr 1, .5; env 1, .5 -> 51 points of 1
//   -> AP 51/101.
TEST_CASE("ties in score keep image order, then row order") {
  auto fp = preds({{50, 50, 60, 60, 0.8, 0}});
  auto tp = preds({{0, 0, 10, 10, 0.8, 0}});
  auto gt = gts({{0, 0, 0, 10, 10}});
  DetectionMetrics fp_first, tp_first;
  fp_first.add(fp, gt);
  fp_first.add(tp, gt);
  tp_first.add(tp, gt);
  tp_first.add(fp, gt);
  CHECK(fp_first.compute().map50_95 == doctest::Approx(51.0 / 202));
  CHECK(tp_first.compute().map50_95 == doctest::Approx(51.0 / 101));

  // One image with gts (0,0,10,10) and (20,0,30,10) (npig 2): same numbers by row order.
  auto two = gts({{0, 0, 0, 10, 10}, {0, 20, 0, 30, 10}});
  DetectionMetrics rows_fp_first, rows_tp_first;
  rows_fp_first.add(preds({{50, 50, 60, 60, 0.8, 0}, {0, 0, 10, 10, 0.8, 0}}), two);
  rows_tp_first.add(preds({{0, 0, 10, 10, 0.8, 0}, {50, 50, 60, 60, 0.8, 0}}), two);
  CHECK(rows_fp_first.compute().map50_95 == doctest::Approx(51.0 / 202));
  CHECK(rows_tp_first.compute().map50_95 == doctest::Approx(51.0 / 101));
}

TEST_CASE("duplicate detections of one gt") {
  SUBCASE("an exact duplicate below the match is a harmless FP for AP, not for precision") {
    // TP 0.9, FP 0.8: rc 1, 1; pr 1, .5; env 1, .5 -> every point reads index 0 -> AP 1.
    // Best F1: conf (0.8, 0.9] P = R = 1.
    DetectionMetrics m;
    m.add(preds({{0, 0, 10, 10, 0.9, 0}, {0, 0, 10, 10, 0.8, 0}}), gts({{0, 0, 0, 10, 10}}));
    auto r = m.compute();
    CHECK(r.map50_95 == doctest::Approx(1.0));
    CHECK(r.precision == doctest::Approx(1.0));
    CHECK(r.recall == doctest::Approx(1.0));
  }
  SUBCASE("a looser duplicate ranked first takes the gt up to IoU 0.65") {
    // d1 (1,1,11,11) 0.9: IoU 81/119 = 0.681; d2 (0,0,10,10) 0.8: IoU 1.
    // t = .50..65 (4 thresholds): d1 TP, d2 FP -> AP 1. t = .70..95 (6): d1 FP, d2 TP: rc 0, 1;
    // pr 0, .5; env .5, .5 -> AP .5. AP = (4 + 3) / 10 = 0.7; AP50 1; AP75 .5. Recall is 1 at every
    // threshold (AR 1); with one detection per image only d1 counts: AR@1 = 4/10.
    DetectionMetrics m;
    m.add(preds({{1, 1, 11, 11, 0.9, 0}, {0, 0, 10, 10, 0.8, 0}}), gts({{0, 0, 0, 10, 10}}));
    auto r = m.compute();
    CHECK(r.map50_95 == doctest::Approx(0.7));
    CHECK(r.map50 == doctest::Approx(1.0));
    CHECK(r.map75 == doctest::Approx(0.5));
    CHECK(r.ar100 == doctest::Approx(1.0));
    CHECK(r.ar1 == doctest::Approx(0.4));
  }
}

// g1 (0,0,10,10), g2 (2,0,12,10); d1 (1,0,11,10) 0.9 overlaps both by 90/110 = 0.818 exactly alike;
// d2 (0,0,10,10) 0.8: IoU 1 with g1, 80/120 with g2.
// t = .50..80 (7): cocoeval's '<' lets the later gt g2 win the tie, so d1 -> g2 and d2 -> g1: AP 1.
// t = .85..95 (3): d1 below the threshold (FP), d2 -> g1: rc 0, .5; pr 0, .5 -> 51 points of .5 ->
// 25.5/101. AP = (7 + 3 * 25.5/101) / 10 = 1567/2020. (Had the first gt won, t = .70..80 would give
// d2 nothing above .667 and 51/101 there.) AR = (7 * 1 + 3 * .5) / 10 = 0.85.
TEST_CASE("an IoU tie between two gts goes to the later one") {
  DetectionMetrics m;
  m.add(preds({{1, 0, 11, 10, 0.9, 0}, {0, 0, 10, 10, 0.8, 0}}), gts({{0, 0, 0, 10, 10}, {0, 2, 0, 12, 10}}));
  auto r = m.compute();
  CHECK(r.map50_95 == doctest::Approx(1567.0 / 2020));
  CHECK(r.ar100 == doctest::Approx(0.85));
}

TEST_CASE("a class without ground truth is left out, with or without detections of it") {
  // c0: one gt found exactly (AP 1). c7 has no gt anywhere: its high-scoring detections change nothing.
  auto gt = gts({{0, 0, 0, 10, 10}});
  DetectionMetrics with, without;
  with.add(preds({{0, 0, 10, 10, 0.5, 0}, {0, 0, 10, 10, 0.99, 7}, {40, 40, 60, 60, 0.98, 7}}), gt);
  with.add(preds({{0, 0, 10, 10, 0.97, 7}}), no_gts());
  without.add(preds({{0, 0, 10, 10, 0.5, 0}}), gt);
  without.add(no_preds(), no_gts());
  auto rw = with.compute(), ro = without.compute();
  CHECK(rw.classes == std::vector<int64_t>{0});
  CHECK(rw.map50_95 == doctest::Approx(1.0));
  CHECK(rw.precision == doctest::Approx(1.0));
  check_same(rw, ro);
  // A class whose gt shows up in a later image does count, and its earlier detection is an FP:
  // c7 gets gt (0,0,10,10) in image 2 with no detection there -> c7: dets 0.99 FP, 0.98 FP, 0.97 FP
  // (images 0 and 1 have no c7 gt) -> recall 0 -> AP 0, and mAP (1 + 0) / 2.
  with.add(no_preds(), gts({{7, 0, 0, 10, 10}}));
  auto r7 = with.compute();
  CHECK(r7.classes == std::vector<int64_t>{0, 7});
  CHECK(r7.ap_per_class[1] == 0.0);
  CHECK(r7.map50_95 == doctest::Approx(0.5));
}

TEST_CASE("a class with ground truth and no detections scores 0 and counts in the mean") {
  // c0 perfect (AP 1), c1 one gt never detected (AP 0, recall 0) -> mAP .5, AR .5. Best F1: where c0's
  // detection is kept, P = (1 + 0) / 2, R = (1 + 0) / 2.
  DetectionMetrics m;
  m.add(preds({{0, 0, 10, 10, 0.9, 0}}), gts({{0, 0, 0, 10, 10}, {1, 20, 20, 40, 40}}));
  auto r = m.compute();
  REQUIRE(r.classes == std::vector<int64_t>{0, 1});
  CHECK(r.ap_per_class[0] == doctest::Approx(1.0));
  CHECK(r.ap_per_class[1] == 0.0);
  CHECK(r.ap50_per_class[1] == 0.0);
  CHECK(r.map50_95 == doctest::Approx(0.5));
  CHECK(r.map50 == doctest::Approx(0.5));
  CHECK(r.ar100 == doctest::Approx(0.5));
  CHECK(r.precision == doctest::Approx(0.5));
  CHECK(r.recall == doctest::Approx(0.5));
}

// One image: c0 gt (0,0,10,10); 100 c0 false positives at (100,100,110,110) scoring 0.9 - i/1000
// (0.900..0.801) and the true positive scoring 0.5, given as row 0 (the cut is by score, not by row);
// c1: gt (200,0,210,10) found by a detection scoring 0.1.
// max_dets 100 (default): c0 keeps the 100 FPs and loses the TP -> AP 0, recall 0. The cut is per
// class: c1 still scores 1 -> mAP .5.
// max_dets 101: the TP is the 101st: rc 0 (x100), 1; pr[100] = 1/101, env 1/101 everywhere -> every
// point reads 1/101 -> c0 AP 1/101; mAP (1/101 + 1) / 2.
TEST_CASE("only the best max_dets detections per image and class are kept") {
  auto make = [] {
    std::vector<double> v{0, 0, 10, 10, 0.5, 0};
    for (int i = 0; i < 100; ++i) v.insert(v.end(), {100, 100, 110, 110, 0.9 - i / 1000.0, 0});
    v.insert(v.end(), {200, 0, 210, 10, 0.1, 1});
    return torch::tensor(v, torch::kFloat64).view({102, 6});
  };
  auto gt = gts({{0, 0, 0, 10, 10}, {1, 200, 0, 210, 10}});
  DetectionMetrics cut;
  cut.add(make(), gt);
  auto r = cut.compute();
  REQUIRE(r.classes == std::vector<int64_t>{0, 1});
  CHECK(r.ap_per_class[0] == 0.0);
  CHECK(r.ap_per_class[1] == doctest::Approx(1.0));
  CHECK(r.map50_95 == doctest::Approx(0.5));
  CHECK(r.ar100 == doctest::Approx(0.5));

  DetectionMetrics wider(101);
  CHECK(wider.max_dets() == 101);
  wider.add(make(), gt);
  auto w = wider.compute();
  CHECK(w.ap_per_class[0] == doctest::Approx(1.0 / 101));
  CHECK(w.map50_95 == doctest::Approx((1.0 / 101 + 1) / 2));
  CHECK(w.ar100 == doctest::Approx(1.0));
  CHECK(w.ar10 == doctest::Approx(0.5));  // c0's first 10 are FPs; c1 recall 1

  CHECK_THROWS_AS(DetectionMetrics(0), libreyolo::ConfigError);
}

// gt (0,0,10,10). IoU 50/100 = 0.5 exactly matches at t = .5 only -> AP 1/10, AP50 1, AP75 0; a
// hair less (height 4.999999) matches nowhere. 75/100 = 0.75 exactly matches t = .50..75 (6) -> AP
// .6, AP75 1; height 7.4999 -> 5 thresholds -> .5, AP75 0. 95/100 matches all 10 -> AP 1.
TEST_CASE("an IoU exactly at a threshold matches, a hair below does not") {
  auto ap = [](double y2) {
    DetectionMetrics m;
    m.add(preds({{0, 0, 10, y2, 0.9, 0}}), gts({{0, 0, 0, 10, 10}}));
    return m.compute();
  };
  auto r = ap(5.0);
  CHECK(r.map50_95 == doctest::Approx(0.1));
  CHECK(r.map50 == doctest::Approx(1.0));
  CHECK(r.map75 == 0.0);
  CHECK(ap(4.999999).map50 == 0.0);
  CHECK(ap(4.999999).map50_95 == 0.0);
  CHECK(ap(7.5).map50_95 == doctest::Approx(0.6));
  CHECK(ap(7.5).map75 == doctest::Approx(1.0));
  CHECK(ap(7.4999).map50_95 == doctest::Approx(0.5));
  CHECK(ap(7.4999).map75 == 0.0);
  CHECK(ap(9.5).map50_95 == doctest::Approx(1.0));
}

// 20 gts, 7 found (IoU 1), nothing else: rc ends at 7/20 = 0.35 < recThrs[35] = 0.35000000000000003,
// so only points 0..0.34 (35) read precision 1 -> AP 35/101 (36/101 if the thresholds were i/100).
TEST_CASE("a final recall equal to a recall threshold in decimal can still miss it in binary") {
  std::vector<double> g, p;
  for (int i = 0; i < 20; ++i) {
    g.insert(g.end(), {0, 20.0 * i, 0, 20.0 * i + 10, 10});
    if (i < 7) p.insert(p.end(), {20.0 * i, 0, 20.0 * i + 10, 10, 0.9 - 0.01 * i, 0});
  }
  DetectionMetrics m;
  m.add(torch::tensor(p, torch::kFloat64).view({7, 6}), torch::tensor(g, torch::kFloat64).view({20, 5}));
  auto r = m.compute();
  CHECK(r.map50_95 == doctest::Approx(35.0 / 101));
  CHECK(r.ar100 == doctest::Approx(0.35));
}

// One class, one image. gts S (0,0,10,10) area 100, E (0,200,32,232) area 1024 = 32² (small AND
// medium: the bounds are inclusive), M (100,0,150,50) area 2500, L (300,0,420,100) area 12000.
// Detections (IoU 1 where they match): F (500,500,505,505) 0.95 area 25 matching nothing, S 0.9,
// L 0.8, E 0.7; M is missed.
//   all (npig 4): F, S, L, E = FP, TP, TP, TP: rc 0, .25, .5, .75; pr 0, .5, 2/3, .75; env .75 x4;
//     points 0..0.75 (76) -> AP 76 * .75 / 101 = 57/101; AR .75.
//   small (S, E; M, L ignored; npig 2): F is small and unmatched -> FP; S TP; the L detection matches
//     the ignored gt L -> ignored; E TP: rc 0, .5, .5, 1; pr 0, .5, .5, 2/3; env 2/3 -> AP 2/3; AR 1.
//   medium (E, M; npig 2): F unmatched and outside -> ignored; S and L detections match ignored gts ->
//     ignored; E TP: rc 0, 0, 0, .5; pr 0, 0, 0, 1; env 1 -> points 0..0.5 (51) -> AP 51/101; AR .5.
//   large (L; npig 1): F ignored (outside), S and E ignored (ignored gts), L TP -> AP 1; AR 1.
TEST_CASE("small / medium / large area ranges") {
  DetectionMetrics m;
  m.add(preds({{500, 500, 505, 505, 0.95, 0},
               {0, 0, 10, 10, 0.9, 0},
               {300, 0, 420, 100, 0.8, 0},
               {0, 200, 32, 232, 0.7, 0}}),
        gts({{0, 0, 0, 10, 10}, {0, 0, 200, 32, 232}, {0, 100, 0, 150, 50}, {0, 300, 0, 420, 100}}));
  auto r = m.compute();
  CHECK(r.map50_95 == doctest::Approx(57.0 / 101));
  CHECK(r.ap_small == doctest::Approx(2.0 / 3));
  CHECK(r.ap_medium == doctest::Approx(51.0 / 101));
  CHECK(r.ap_large == doctest::Approx(1.0));
  CHECK(r.ar100 == doctest::Approx(0.75));
  CHECK(r.ar_small == doctest::Approx(1.0));
  CHECK(r.ar_medium == doctest::Approx(0.5));
  CHECK(r.ar_large == doctest::Approx(1.0));

  // No large gt at all: the large statistics are -1 (COCO prints -1.000), the others unaffected.
  DetectionMetrics small_only;
  small_only.add(preds({{0, 0, 10, 10, 0.9, 0}}), gts({{0, 0, 0, 10, 10}}));
  auto s = small_only.compute();
  CHECK(s.ap_small == doctest::Approx(1.0));
  CHECK(s.ap_medium == -1.0);
  CHECK(s.ap_large == -1.0);
  CHECK(s.ar_large == -1.0);
}

// gt A (0,0,30,30) area 900 (small), gt B (0,0,40,40) area 1600 (medium); one detection D
// (0,0,38,38) area 1444 (medium) 0.9: IoU(D, A) = 900/1444 = 0.623, IoU(D, B) = 1444/1600 = 0.9025.
//   all (npig 2, order A, B): D takes A, then B's higher IoU replaces it -> TP at t = .50..90 (9):
//     rc .5 -> points 0..0.5 (51) -> 51/101; t = .95: FP -> AP 9 * 51 / 1010 = 459/1010.
//   small (A; B ignored and last): t = .50..60 (3): D holds the non-ignored A and stops at the first
//     ignored gt, so B's better IoU never counts -> TP although D itself is not small -> AP 1;
//     t = .65..90: A is too loose, D matches the ignored B -> ignored; t = .95: unmatched and not
//     small -> ignored. AP_small = 3/10, AR_small 3/10.
//   medium (B; A ignored): D -> B at t <= .90 -> AP 9/10; at .95 unmatched, medium -> FP.
TEST_CASE("a detection holding a non-ignored gt does not move to a better ignored one") {
  DetectionMetrics m;
  m.add(preds({{0, 0, 38, 38, 0.9, 0}}), gts({{0, 0, 0, 30, 30}, {0, 0, 0, 40, 40}}));
  auto r = m.compute();
  CHECK(r.map50_95 == doctest::Approx(459.0 / 1010));
  CHECK(r.ap_small == doctest::Approx(0.3));
  CHECK(r.ar_small == doctest::Approx(0.3));
  CHECK(r.ap_medium == doctest::Approx(0.9));
  CHECK(r.ap_large == -1.0);
}

// numpy's argsort(-score) puts NaN last: gt (0,0,10,10), a TP scoring NaN and an FP scoring 0.5 ->
// FP, TP: rc 0, 1; pr 0, .5 -> AP .5 (NaN first would give TP, FP -> AP 1).
TEST_CASE("a NaN score sorts last") {
  DetectionMetrics m;
  m.add(preds({{0, 0, 10, 10, NAN, 0}, {50, 50, 60, 60, 0.5, 0}}), gts({{0, 0, 0, 10, 10}}));
  CHECK(m.compute().map50_95 == doctest::Approx(0.5));
}

TEST_CASE("an image with detections and no ground truth: its detections are false positives") {
  // Image 0: gt (0,0,10,10) found at 0.9. Image 1: no gt, a detection at 0.95 -> FP ranked first:
  // rc 0, 1; pr 0, .5; env .5 -> all 101 points .5 -> AP .5; AR 1. An empty image changes nothing.
  DetectionMetrics m;
  m.add(preds({{0, 0, 10, 10, 0.9, 0}}), gts({{0, 0, 0, 10, 10}}));
  m.add(preds({{0, 0, 10, 10, 0.95, 0}}), no_gts());
  m.add(torch::Tensor(), torch::Tensor());
  auto r = m.compute();
  CHECK(r.map50_95 == doctest::Approx(0.5));
  CHECK(r.ar100 == doctest::Approx(1.0));
  CHECK(m.images() == 3);
}

// Two images. Image A gt: c0 (0,0,10,10), c0 (20,20,30,30), c1 (0,20,10,30); image B gt: c0 (50,50,60,60)
// and no predictions. Predictions on A:
//   p1 (0,0,10,10) 0.9 c0: IoU 1 -> TP at every threshold
//   p2 (20,20,30,31) 0.8 c0: IoU 100/110 = 0.909 -> TP at 0.50..0.90, FP at 0.95
//   p3 (1,1,11,11) 0.7 c0: its gt is taken -> FP
//   p4 (0,20,10,30) 0.6 c1: TP;  p6 (0,22,10,32) 0.4 c1: gt taken -> FP
//   p5 (100,100,110,110) 0.5 c2: class 2 has no gt -> left out of the means
// Class 0 (3 gts), IoU 0.5..0.9: rc 1/3, 2/3, 2/3, pr 1, 1, 2/3 -> points 0..0.66 (67 of 101) see
// precision 1 -> AP 67/101; IoU 0.95: rc 1/3 -> points 0..0.33 -> 34/101.
// AP50-95(c0) = (9·67 + 34) / 1010 = 0.6306931. Class 1: AP 1 everywhere.
// mAP50 = mAP75 = (67/101 + 1) / 2 = 0.8316832; mAP50-95 = (0.6306931 + 1) / 2 = 0.8153465.
// AR: c0 recall 2/3 at 9 thresholds, 1/3 at 0.95 -> 19/30; c1 1 -> AR100 = AR10 = 49/60. AR1: c0's
// first detection in A is p1 (recall 1/3 everywhere), c1's p4 -> (1/3 + 1) / 2 = 2/3.
// Every box has area <= 110: all small, so the small statistics equal the all ones and medium / large
// are -1.
// Best mean F1 at IoU 0.5 is for confidences in (0.4, 0.6]: c0 P = R = 2/3, c1 P = R = 1 -> 5/6 each.
TEST_CASE("COCO mAP on a hand-worked set, with a class without gt and an image without predictions") {
  DetectionMetrics metrics;
  auto gt_a = torch::tensor({0.f, 0.f, 0.f, 10.f, 10.f, 0.f, 20.f, 20.f, 30.f, 30.f, 1.f, 0.f, 20.f, 10.f, 30.f}).view({3, 5});
  auto pred_a = torch::tensor({20.f, 20.f, 30.f, 31.f, 0.8f, 0.f,     // p2 (given out of score order)
                               0.f, 0.f, 10.f, 10.f, 0.9f, 0.f,       // p1
                               1.f, 1.f, 11.f, 11.f, 0.7f, 0.f,       // p3
                               0.f, 20.f, 10.f, 30.f, 0.6f, 1.f,      // p4
                               100.f, 100.f, 110.f, 110.f, 0.5f, 2.f,  // p5
                               0.f, 22.f, 10.f, 32.f, 0.4f, 1.f})     // p6
                    .view({6, 6});
  metrics.add(pred_a, gt_a);
  metrics.add(torch::zeros({0, 6}), torch::tensor({0.f, 50.f, 50.f, 60.f, 60.f}).view({1, 5}));
  auto r = metrics.compute();
  REQUIRE(r.classes == std::vector<int64_t>{0, 1});
  CHECK(r.ap50_per_class[0] == doctest::Approx(67.0 / 101));
  CHECK(r.ap50_per_class[1] == doctest::Approx(1.0));
  CHECK(r.ap_per_class[0] == doctest::Approx(637.0 / 1010));
  CHECK(r.ap_per_class[1] == doctest::Approx(1.0));
  CHECK(r.map50 == doctest::Approx(0.8316832).epsilon(1e-6));
  CHECK(r.map75 == doctest::Approx(0.8316832).epsilon(1e-6));
  CHECK(r.map50_95 == doctest::Approx(0.8153465).epsilon(1e-6));
  CHECK(r.ar100 == doctest::Approx(49.0 / 60));
  CHECK(r.ar10 == doctest::Approx(49.0 / 60));
  CHECK(r.ar1 == doctest::Approx(2.0 / 3));
  CHECK(r.ap_small == r.map50_95);
  CHECK(r.ar_small == r.ar100);
  CHECK(r.ap_medium == -1.0);
  CHECK(r.ap_large == -1.0);
  CHECK(r.precision == doctest::Approx(5.0 / 6));
  CHECK(r.recall == doctest::Approx(5.0 / 6));
}

TEST_CASE("nothing to score, and malformed input") {
  // No gt at all: every COCO statistic is -1 (no entry > -1), the best-F1 numbers 0.
  DetectionMetrics empty;
  empty.add(preds({{0, 0, 10, 10, 0.9, 0}}), no_gts());
  auto r = empty.compute();
  for (double s : r.stats()) CHECK(s == -1.0);
  CHECK(r.precision == 0.0);
  CHECK(r.classes.empty());
  CHECK(DetectionMetrics().compute().map50 == -1.0);

  DetectionMetrics m;
  auto gt = gts({{3, 5, 5, 25, 45}});
  CHECK_THROWS_AS(m.add(torch::zeros({2, 5}), gt), libreyolo::DataError);
  CHECK_THROWS_AS(m.add(no_preds(), torch::zeros({2, 6})), libreyolo::DataError);
  CHECK_THROWS_WITH_AS(m.add(preds({{0, 0, 1, 1, 0.5, 1.5}}), gt), doctest::Contains("pred row 0 has class 1.5"),
                       libreyolo::DataError);
  CHECK_THROWS_AS(m.add(no_preds(), gts({{NAN, 0, 0, 1, 1}})), libreyolo::DataError);
  CHECK(m.images() == 0);  // a rejected image is not counted
}
