// Decoding (anchors, DFL), class-aware NMS and letterbox inverse mapping, each on a tiny hand-worked
// case. The COCO mAP cases (eval/detection.hpp) are in tests/eval/test_detection_metrics.cpp.
#include <libreyolo/families/yolo9/postprocess.hpp>

#include <doctest/doctest.h>

#include <cmath>

namespace y9 = libreyolo::families::yolo9;

TEST_CASE("make_anchors: cell centres level by level, row-major, with their strides") {
  std::vector<torch::Tensor> feats{torch::zeros({1, 5, 2, 3}), torch::zeros({1, 5, 1, 2})};
  auto a = y9::make_anchors(feats, {8, 16});
  auto expected_points = torch::tensor({0.5f, 0.5f, 1.5f, 0.5f, 2.5f, 0.5f, 0.5f, 1.5f, 1.5f, 1.5f, 2.5f, 1.5f,
                                        0.5f, 0.5f, 1.5f, 0.5f}).view({8, 2});
  CHECK(torch::equal(a.points, expected_points));
  CHECK(torch::equal(a.strides.view({-1}), torch::tensor({8.f, 8.f, 8.f, 8.f, 8.f, 8.f, 16.f, 16.f})));
  CHECK_THROWS_AS(y9::make_anchors(feats, {8}), libreyolo::ConfigError);
}

TEST_CASE("DFL decode of known distributions and ltrb -> xyxy") {
  // reg_max 4, bins 0..3: uniform -> 1.5; (0.1, 0.2, 0.3, 0.4) -> 0.2 + 0.6 + 1.2 = 2.0;
  // (0.7, 0.1, 0.1, 0.1) -> 0.1 + 0.2 + 0.3 = 0.6; one huge logit at bin 3 -> 3.
  auto logits = torch::cat({torch::zeros({4}), torch::tensor({0.1f, 0.2f, 0.3f, 0.4f}).log(),
                            torch::tensor({0.7f, 0.1f, 0.1f, 0.1f}).log(), torch::tensor({0.f, 0.f, 0.f, 60.f})})
                    .view({1, 1, 16});
  auto d = y9::dfl_decode(logits, 4);
  REQUIRE(d.sizes() == torch::IntArrayRef({1, 1, 4}));
  CHECK(d[0][0][0].item<double>() == doctest::Approx(1.5));
  CHECK(d[0][0][1].item<double>() == doctest::Approx(2.0));
  CHECK(d[0][0][2].item<double>() == doctest::Approx(0.6));
  CHECK(d[0][0][3].item<double>() == doctest::Approx(3.0));
  // Anchor (10, 20): (10 - 1.5, 20 - 2, 10 + 0.6, 20 + 3) = (8.5, 18, 10.6, 23).
  auto b = y9::dist2bbox(d, torch::tensor({10.f, 20.f}).view({1, 1, 2}));
  CHECK(torch::allclose(b, torch::tensor({8.5f, 18.f, 10.6f, 23.f}).view({1, 1, 4})));
  // bbox2dist inverts it, clamped to the bins.
  auto back = y9::bbox2dist(torch::tensor({10.f, 20.f}), torch::tensor({8.5f, 18.f, 10.6f, 23.f}), 2.99);
  CHECK(torch::allclose(back, torch::tensor({1.5f, 2.f, 0.6f, 2.99f})));

  // decode_predictions: one 1x1 map at stride 32 with reg_max 4 and 1 class, logit 0 -> score 0.5;
  // anchor (0.5, 0.5) cells -> box (0.5-1.5, 0.5-2, 0.5+0.6, 0.5+3) · 32 = (-32, -48, 35.2, 112).
  auto map = torch::cat({logits.view({16}), torch::zeros({1})}).view({1, 17, 1, 1});
  auto dec = y9::decode_predictions({map}, {32}, 4);
  CHECK(torch::allclose(dec, torch::tensor({-32.f, -48.f, 35.2f, 112.f, 0.5f}).view({1, 1, 5}), 1e-4, 1e-4));
}

// Six boxes, two classes, IoU threshold 0.5 (hand-worked IoUs):
//   0 (0,0,10,10) 0.90 c0 | 1 (1,1,11,11) 0.80 c0: IoU(0,1) = 81/119 = 0.68 -> suppressed by 0
//   2 (1,1,11,11) 0.85 c1 | 5 (2,0,12,10) 0.75 c1: IoU(2,5) = 81/119 -> suppressed by 2
//   3 (20,20,30,30) 0.70 c0: no overlap -> kept
//   4 (0,0,10,5) 0.60 c1: IoU(2,4) = 36/114 = 0.32, IoU(5,4) = 40/110 -> kept
// Class-aware keep order: 0, 2, 3, 4. Class-agnostic: 2 and 5 fall to box 0 (0.68, 80/120 = 0.67);
// 4 vs 0 is exactly 50/100 = 0.5, not above the threshold -> kept: 0, 3, 4.
TEST_CASE("class-aware NMS on overlapping boxes of two classes") {
  auto boxes = torch::tensor({0.f, 0.f, 10.f, 10.f, 1.f, 1.f, 11.f, 11.f, 1.f, 1.f, 11.f, 11.f, 20.f, 20.f, 30.f, 30.f,
                              0.f, 0.f, 10.f, 5.f, 2.f, 0.f, 12.f, 10.f}).view({6, 4});
  auto scores = torch::tensor({0.9f, 0.8f, 0.85f, 0.7f, 0.6f, 0.75f});
  auto classes = torch::tensor({0, 0, 1, 0, 1, 1}, torch::kInt64);
  CHECK(torch::equal(y9::batched_nms(boxes, scores, classes, 0.5), torch::tensor({0, 2, 3, 4}, torch::kInt64)));
  CHECK(torch::equal(y9::batched_nms(boxes, scores, torch::zeros({6}, torch::kInt64), 0.5),
                     torch::tensor({0, 3, 4}, torch::kInt64)));
  CHECK(torch::equal(y9::batched_nms(boxes, scores, classes, 0.5, 2), torch::tensor({0, 2}, torch::kInt64)));
  CHECK(y9::batched_nms(torch::zeros({0, 4}), torch::zeros({0}), torch::zeros({0}, torch::kInt64), 0.5).numel() == 0);

  // Through non_max_suppression: the same boxes as decoded rows [1, 7, 4 + 2] (one extra low-score
  // row that the confidence filter drops); scores are put on each box's class.
  auto decoded = torch::zeros({1, 7, 6});
  for (int i = 0; i < 6; ++i) {
    decoded[0][i].narrow(0, 0, 4).copy_(boxes[i]);
    decoded[0][i][4 + classes[i].item<int64_t>()] = scores[i];
  }
  decoded[0][6] = torch::tensor({0.f, 0.f, 5.f, 5.f, 0.1f, 0.05f});
  y9::NmsOptions opt;
  opt.conf = 0.25;
  opt.iou = 0.5;
  auto det = y9::non_max_suppression(decoded, opt);
  REQUIRE(det.size() == 1);
  REQUIRE(det[0].sizes() == torch::IntArrayRef({4, 6}));
  CHECK(torch::allclose(det[0].select(1, 4), torch::tensor({0.9f, 0.85f, 0.7f, 0.6f})));
  CHECK(torch::equal(det[0].select(1, 5), torch::tensor({0.f, 1.f, 0.f, 1.f})));
  CHECK(torch::equal(det[0][1].narrow(0, 0, 4), torch::tensor({1.f, 1.f, 11.f, 11.f})));
  opt.max_det = 3;
  CHECK(y9::non_max_suppression(decoded, opt)[0].size(0) == 3);
  // multi_label: a row scoring 0.6 for class 0 and 0.5 for class 1 gives two detections.
  auto two = torch::tensor({40.f, 40.f, 50.f, 50.f, 0.6f, 0.5f}).view({1, 1, 6});
  opt.multi_label = true;
  auto ml = y9::non_max_suppression(two, opt)[0];
  REQUIRE(ml.size(0) == 2);
  CHECK(torch::equal(ml.select(1, 5), torch::tensor({0.f, 1.f})));
  opt.conf = 0.7;  // nothing passes: an empty [0, 6] result, not an error
  CHECK(y9::non_max_suppression(two, opt)[0].sizes() == torch::IntArrayRef({0, 6}));
}

TEST_CASE("NMS with clip regions: boxes clamped to the image before NMS, the empty ones dropped (the originals' order)") {
  // Class 0: A [10,0,30,10] 0.9, B [0,0,20,10] 0.8 (IoU 1/3), C [25,0,35,10] 0.7 (IoU with A 1/3).
  auto decoded = torch::tensor({10.f, 0.f, 30.f, 10.f, 0.9f, 0.f, 10.f, 20.f, 0.8f, 0.f, 25.f, 0.f, 35.f, 10.f, 0.7f})
                     .view({1, 3, 5});
  decoded[0][1] = torch::tensor({0.f, 0.f, 20.f, 10.f, 0.8f});
  y9::NmsOptions opt;
  opt.conf = 0.25;
  opt.iou = 0.45;
  CHECK(y9::non_max_suppression(decoded, opt)[0].size(0) == 3);  // no clip: nothing overlaps enough
  // The image ends at x = 20 (padding right of it): A becomes [10,0,20,10], whose IoU with B is 1/2 > 0.45, so
  // B goes; C becomes empty and is dropped.
  opt.clip = {{0, 0, 20, 64}};
  const auto det = y9::non_max_suppression(decoded, opt)[0];
  REQUIRE(det.size(0) == 1);
  CHECK(torch::equal(det[0].narrow(0, 0, 5), torch::tensor({10.f, 0.f, 20.f, 10.f, 0.9f})));
  CHECK(torch::equal(decoded[0][0].narrow(0, 0, 4), torch::tensor({10.f, 0.f, 30.f, 10.f})));  // the input is untouched
  opt.clip.push_back({0, 0, 64, 64});
  CHECK_THROWS_WITH(y9::non_max_suppression(decoded, opt), doctest::Contains("2 clip regions for a batch of 1"));
}

TEST_CASE("scale_boxes undoes a letterbox") {
  // A 300x400 (h x w) image letterboxed into 640x640: ratio min(640/300, 640/400) = 1.6, resized to
  // 480x640, padded (640 - 480) / 2 = 80 px top and bottom. (100,180,300,400) -> x / 1.6, (y - 80) / 1.6
  // = (62.5, 62.5, 187.5, 200). A box sticking out is clipped to the 400x300 image.
  auto boxes = torch::tensor({100.f, 180.f, 300.f, 400.f, 0.9f, 2.f, -10.f, 60.f, 700.f, 600.f, 0.5f, 1.f}).view({2, 6});
  auto out = y9::scale_boxes(boxes, {640, 640}, {300, 400});
  CHECK(torch::allclose(out, torch::tensor({62.5f, 62.5f, 187.5f, 200.f, 0.9f, 2.f, 0.f, 0.f, 400.f, 300.f, 0.5f, 1.f})
                                 .view({2, 6})));
  // Explicit ratio and padding (left 8, top 4, ratio 0.5): (18, 14, 28, 24) -> (20, 20, 40, 40).
  auto explicit_pad = y9::scale_boxes(torch::tensor({18.f, 14.f, 28.f, 24.f}).view({1, 4}), {64, 64}, {100, 100}, 0.5,
                                      {8.0, 4.0});
  CHECK(torch::allclose(explicit_pad, torch::tensor({20.f, 20.f, 40.f, 40.f}).view({1, 4})));
  CHECK_THROWS_AS(y9::scale_boxes(boxes, {640, 640}, {300, 400}, 0.0, {0, 0}), libreyolo::ConfigError);
}
