// The semantic segmentation task: masks (read, errors), the transform (a mask moves with its pixels under
// every augmentation; HSV touches the image only), mIoU on a hand-made case, the loss's ignore index, the
// synthetic set, and predict's outputs.
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace data = libreyolo::data;

namespace {

// A distinct colour per class (far apart in every channel) and the grey pad.
data::Rgb colour_of(int k) {
  static const data::Rgb c[] = {{250, 10, 10}, {10, 250, 10}, {10, 10, 250}, {250, 250, 10}, {10, 250, 250}};
  return c[k];
}

// An h x w image + mask of rectangles of classes 0..4 (blocks of at least 10 px), the image painted with
// each class's colour, some pixels ignored (255, image black).
std::pair<data::Image, data::Image> blocks(int h, int w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  data::Image img(h, w, 3), mask(h, w, 1);
  const int bs = 12;
  for (int by = 0; by < h; by += bs)
    for (int bx = 0; bx < w; bx += bs) {
      const int k = static_cast<int>(rng() % 6);  // 5 = ignore
      for (int y = by; y < std::min(h, by + bs); ++y)
        for (int x = bx; x < std::min(w, bx + bs); ++x) {
          mask.at(y, x, 0) = static_cast<uint8_t>(k == 5 ? 255 : k);
          const data::Rgb c = k == 5 ? data::Rgb{0, 0, 0} : colour_of(k);
          img.at(y, x, 0) = c.r, img.at(y, x, 1) = c.g, img.at(y, x, 2) = c.b;
        }
    }
  return {img, mask};
}

// Every output pixel whose 3x3 neighbourhood has one mask value shows that value's colour (bilinear
// blends only across edges); pad pixels (outside the content) are mask 255 and image grey 114.
void check_aligned(const data::Image& im, const data::Image& mk, int content_h, int content_w) {
  REQUIRE(im.h == mk.h);
  REQUIRE(im.w == mk.w);
  int checked = 0, bad = 0;
  for (int y = 1; y + 1 < mk.h; ++y)
    for (int x = 1; x + 1 < mk.w; ++x) {
      if (y >= content_h || x >= content_w) {
        bad += mk.at(y, x, 0) != 255 || im.at(y, x, 0) != 114;
        continue;
      }
      const int k = mk.at(y, x, 0);
      bool uniform = true;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) uniform = uniform && mk.at(y + dy, x + dx, 0) == k;
      if (!uniform || k == 255) continue;
      const data::Rgb c = colour_of(k);
      ++checked;
      bad += std::abs(im.at(y, x, 0) - c.r) > 40 || std::abs(im.at(y, x, 1) - c.g) > 40 || std::abs(im.at(y, x, 2) - c.b) > 40;
    }
  CHECK(checked > 100);
  CHECK(bad == 0);
}

// Writes a dataset of `n` block images (PNG images: lossless, so colours stay exact) with masks.
std::filesystem::path block_dataset(const std::filesystem::path& root, int n) {
  for (const char* split : {"train", "val"}) {
    std::filesystem::create_directories(root / "images" / split);
    std::filesystem::create_directories(root / "masks" / split);
    for (int i = 0; i < n; ++i) {
      auto [img, mask] = blocks(60 + 7 * i, 100 - 5 * i, 100 + static_cast<uint64_t>(i));
      const std::string stem = "im" + std::to_string(i);
      data::write_png(root / "images" / split / (stem + ".png"), img);
      data::write_mask(root / "masks" / split / (stem + ".png"), mask);
    }
  }
  std::ofstream(root / "data.yaml") << "train: images/train\nval: images/val\nmasks_dir: masks\nnames: [a, b, c, d, e]\n";
  return root / "data.yaml";
}

}  // namespace

TEST_CASE("semantic masks: read back as written; RGB masks, unknown class ids and missing masks are named errors") {
  lry_test::TempDir dir("lry_sem_mask");
  auto [img, mask] = blocks(30, 40, 1);
  data::write_mask(dir / "m.png", mask);
  const auto back = data::read_mask(dir / "m.png", 5);
  CHECK(back.c == 1);
  CHECK(back.px == mask.px);
  // label_mapping: 0 -> 4, 1 -> 0, everything else (unmapped) -> ignore
  const std::map<int, int> mapping{{0, 4}, {1, 0}};
  const auto mapped = data::read_mask(dir / "m.png", 5, &mapping);
  for (size_t i = 0; i < mask.px.size(); ++i) {
    const int want = mask.px[i] == 0 ? 4 : mask.px[i] == 1 ? 0 : 255;
    if (mapped.px[i] != want) FAIL("mapped pixel " << i << " = " << int(mapped.px[i]) << ", want " << want);
  }
  CHECK(lry_test::message_of<ly::DataError>([&] { data::read_mask(dir / "m.png", 3); }).find("outside 0..2") != std::string::npos);
  data::write_png(dir / "rgb.png", img);
  const auto rgb = lry_test::message_of<ly::DataError>([&] { data::read_mask(dir / "rgb.png", 5); });
  CHECK(rgb.find("rgb.png") != std::string::npos);
  CHECK(rgb.find("single-channel") != std::string::npos);
  data::write_jpeg(dir / "j.jpg", img);
  CHECK(lry_test::message_of<ly::DataError>([&] { data::read_mask(dir / "j.jpg", 5); }).find("not a PNG") != std::string::npos);

  // A split whose image has no mask names the missing file.
  const auto yaml = block_dataset(dir / "ds", 2);
  std::filesystem::remove(dir / "ds" / "masks" / "val" / "im1.png");
  auto cfg = ly::parse_args({"data=" + yaml.string(), "imgsz=64"});
  ly::SegformerFamily fam("b0");
  const auto missing = lry_test::message_of<ly::DataError>([&] { fam.setup(cfg); });
  CHECK(missing.find("have no mask") != std::string::npos);
  CHECK(missing.find("im1.png") != std::string::npos);
  CHECK(data::mask_path_for("/d/images/train/a.jpg") == std::filesystem::path("/d/masks/train/a.png"));
  CHECK(data::mask_path_for("/d/images/train/a.jpg", "labels_sem") == std::filesystem::path("/d/labels_sem/train/a.png"));
}

TEST_CASE("semantic transform: the mask moves with its pixels under flip, scale, crop and letterbox") {
  auto [img, mask] = blocks(70, 110, 7);
  const int S = 96;
  // Flip alone at scale 1 on a square that fits: exactly the mirrored image and mask.
  {
    auto [sq_img, sq_mask] = blocks(S, S, 3);
    data::SemanticDraw d;
    d.flip = true;
    auto [im, mk] = data::semantic_geometry(sq_img, sq_mask, S, d);
    data::Image fi = sq_img, fm = sq_mask;
    data::flip_lr(fi), data::flip_lr(fm);
    CHECK(im.px == fi.px);
    CHECK(mk.px == fm.px);
  }
  // Every combination of flip and scale (down: letterbox pads; up: random crops) keeps them aligned.
  for (bool flip : {false, true})
    for (double scale : {0.5, 0.8, 1.0, 1.6, 2.0}) {
      CAPTURE(flip);
      CAPTURE(scale);
      const double ratio = std::min(double(S) / img.h, double(S) / img.w) * scale;
      const int nh = static_cast<int>(std::lround(img.h * ratio)), nw = static_cast<int>(std::lround(img.w * ratio));
      for (int crop : {0, 1, 2}) {
        data::SemanticDraw d;
        d.flip = flip;
        d.scale = scale;
        d.crop_y = crop == 0 ? 0 : crop == 1 ? std::max(0, nh - S) : std::max(0, nh - S) / 2;
        d.crop_x = crop == 0 ? 0 : crop == 1 ? std::max(0, nw - S) : std::max(0, nw - S) / 3;
        auto [im, mk] = data::semantic_geometry(img, mask, S, d);
        CHECK(im.h == S);
        CHECK(mk.w == S);
        check_aligned(im, mk, std::min(S, nh), std::min(S, nw));
      }
      // The mirrored draw is the mirror of the unflipped one (the flip happens before resizing).
      if (flip && scale <= 1.0) {
        data::SemanticDraw a, b;
        a.scale = b.scale = scale;
        b.flip = true;
        auto ra = data::semantic_geometry(img, mask, S, a), rb = data::semantic_geometry(img, mask, S, b);
        data::Image cropped_a = data::crop(ra.second, 0, 0, nh, nw), cropped_b = data::crop(rb.second, 0, 0, nh, nw);
        data::flip_lr(cropped_a);
        // Nearest resizing of a mirrored grid may pick the neighbouring source column at a few edges.
        int diff = 0;
        for (size_t i = 0; i < cropped_a.px.size(); ++i) diff += cropped_a.px[i] != cropped_b.px[i];
        CHECK(diff <= static_cast<int>(cropped_a.px.size() / 20));
      }
    }
}

TEST_CASE("semantic dataset: training samples stay aligned for any draw; HSV changes the image only") {
  lry_test::TempDir dir("lry_sem_ds");
  const auto yaml = block_dataset(dir / "ds", 3);
  auto cfg = ly::parse_args({"data=" + yaml.string(), "imgsz=80", "fliplr=0.5", "scale=0.6", "hsv_h=0", "hsv_s=0", "hsv_v=0"});
  ly::SegformerFamily fam("b0");
  fam.setup(cfg);
  CHECK(fam.names() == std::vector<std::string>{"a", "b", "c", "d", "e"});
  const auto& aug = fam.train_set()->augment();
  CHECK(aug.scale_lo == doctest::Approx(0.4));  // scale= given: [1 - scale, 1 + scale]
  CHECK(aug.scale_hi == doctest::Approx(1.6));
  CHECK(aug.hsv_prob == 0.0);
  int flipped = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t i = seed % 3;
    const auto s = fam.train_set()->get(i, rng, 0);
    REQUIRE(s.image.sizes() == torch::IntArrayRef({3, 80, 80}));
    REQUIRE(s.mask.sizes() == torch::IntArrayRef({80, 80}));
    // Back to Images: rows of the content region only have the class colours; find the content size
    // from the draw (same rng sequence).
    std::mt19937_64 rng2(seed);
    const auto src = data::read_image(fam.train_set()->file(i));
    const auto d = data::draw_semantic(src.h, src.w, aug, rng2);
    flipped += d.flip;
    const double ratio = std::min(80.0 / src.h, 80.0 / src.w) * d.scale;
    const int nh = std::min(80, static_cast<int>(std::lround(src.h * ratio)));
    const int nw = std::min(80, static_cast<int>(std::lround(src.w * ratio)));
    data::Image im(80, 80, 3), mk(80, 80, 1);
    auto ic = s.image.permute({1, 2, 0}).contiguous();
    std::memcpy(im.px.data(), ic.data_ptr<uint8_t>(), im.px.size());
    auto mc = s.mask.to(torch::kUInt8).contiguous();
    std::memcpy(mk.px.data(), mc.data_ptr<uint8_t>(), mk.px.size());
    check_aligned(im, mk, nh, nw);
  }
  CHECK(flipped > 3);
  CHECK(flipped < 21);
  // HSV on: same seed, same geometry: the mask is identical, the image is not.
  auto cfg_hsv = ly::parse_args({"data=" + yaml.string(), "imgsz=80", "fliplr=0.5", "scale=0.6", "hsv_prob=1", "hsv_h=0.5",
                                 "hsv_s=0.9", "hsv_v=0.9"});
  ly::SegformerFamily fam_hsv("b0");
  fam_hsv.setup(cfg_hsv);
  for (uint64_t seed = 0; seed < 6; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    const auto plain = fam.train_set()->get(seed % 3, a, 0), jittered = fam_hsv.train_set()->get(seed % 3, b, 0);
    CHECK(torch::equal(plain.mask, jittered.mask));
    CHECK_FALSE(torch::equal(plain.image, jittered.image));
  }
  // Validation: no flip, no jitter, scale 1 (letterbox): the same sample for any rng.
  std::mt19937_64 r1(1), r2(2);
  CHECK(torch::equal(fam.val_set()->get(0, r1, 0).mask, fam.val_set()->get(0, r2, 0).mask));
  // The family's recipe jitter applies while scale= is not given; scale=0 turns it off.
  ly::SegformerFamily f2("b0");
  f2.setup(ly::parse_args({"data=" + yaml.string(), "imgsz=64"}));
  CHECK(f2.train_set()->augment().scale_lo == 0.5);
  CHECK(f2.train_set()->augment().scale_hi == 2.0);
  ly::SegformerFamily f3("b0");
  f3.setup(ly::parse_args({"data=" + yaml.string(), "imgsz=64", "scale=0"}));
  CHECK(f3.train_set()->augment().scale_lo == 1.0);
  CHECK(f3.train_set()->augment().scale_hi == 1.0);
}

TEST_CASE("mIoU: per class over the whole set, ignore pixels count nowhere, classes absent from both excluded") {
  // truth           prediction
  // 0 0 1 1         0 1 1 1
  // 0 X 1 2         0 2 1 2        X = 255 (ignore); class 3 appears in neither
  auto truth = torch::tensor({0, 0, 1, 1, 0, 255, 1, 2}, torch::kInt64).reshape({2, 4});
  auto pred = torch::tensor({0, 1, 1, 1, 0, 2, 1, 2}, torch::kInt64).reshape({2, 4});
  ly::eval::SemanticMetrics m(4);
  m.add(pred, truth);
  const auto r = m.compute();
  // class 0: TP 2, truth 3, pred 2 -> 2/3; class 1: TP 3, truth 3, pred 4 -> 3/4; class 2: 1/1 (the
  // prediction 2 on the ignored pixel does not count); class 3: excluded.
  CHECK(r.iou[0] == doctest::Approx(2.0 / 3));
  CHECK(r.iou[1] == doctest::Approx(0.75));
  CHECK(r.iou[2] == doctest::Approx(1.0));
  CHECK(std::isnan(r.iou[3]));
  CHECK(r.classes_seen == 3);
  CHECK(r.miou == doctest::Approx((2.0 / 3 + 0.75 + 1.0) / 3));
  CHECK(r.labelled_pixels == 7);
  CHECK(r.pixel_accuracy == doctest::Approx(6.0 / 7));
  // Over the whole set: two halves added separately give the same matrix (not a mean of per-image IoUs).
  ly::eval::SemanticMetrics halves(4);
  halves.add(pred[0], truth[0]);
  halves.add(pred[1], truth[1]);
  CHECK(torch::equal(halves.confusion(), m.confusion()));
  CHECK(halves.compute().miou == doctest::Approx(r.miou));
  // A class predicted but absent from the truth counts with IoU 0.
  ly::eval::SemanticMetrics fp(4);
  fp.add(torch::tensor({3, 0}, torch::kInt64), torch::tensor({0, 0}, torch::kInt64));
  const auto rf = fp.compute();
  CHECK(rf.classes_seen == 2);
  CHECK(rf.iou[3] == 0.0);
  CHECK(rf.miou == doctest::Approx(0.25));
  CHECK_THROWS_AS(fp.add(torch::zeros({2}, torch::kInt64), torch::zeros({3}, torch::kInt64)), ly::ConfigError);
}

TEST_CASE("semantic loss: cross-entropy over labelled pixels only, logits upsampled to the masks; all-ignored is 0") {
  torch::manual_seed(0);
  auto logits = torch::randn({2, 3, 4, 4}, torch::requires_grad());
  data::SemanticBatch b{torch::zeros({2, 3, 8, 8}, torch::kUInt8), torch::randint(0, 3, {2, 8, 8}, torch::kInt64)};
  b.masks.index_put_({0, torch::indexing::Slice(0, 4)}, 255);
  auto l = ly::SegformerFamily::cross_entropy(logits, b);
  namespace F = torch::nn::functional;
  auto up = F::interpolate(logits, F::InterpolateFuncOptions().size(std::vector<int64_t>{8, 8}).mode(torch::kBilinear).align_corners(false));
  auto want = F::cross_entropy(up, b.masks, F::CrossEntropyFuncOptions().ignore_index(255));
  CHECK(l.total.item<double>() == doctest::Approx(want.item<double>()).epsilon(1e-6));
  CHECK(l.items.sizes() == torch::IntArrayRef({1}));
  b.masks.fill_(255);
  auto z = ly::SegformerFamily::cross_entropy(logits, b);
  CHECK(z.total.item<double>() == 0.0);
  z.total.backward();
  CHECK(logits.grad().defined());
  CHECK(torch::isfinite(logits.grad()).all().item<bool>());
}

TEST_CASE("semantic synth: images with masks of their shapes, a data.yaml the task opens; predict writes mask + overlay") {
  lry_test::TempDir dir("lry_sem_synth");
  data::SynthOptions o;
  o.out = dir / "s";
  o.images = 12;
  o.imgsz = 64;
  o.classes = 3;
  o.seed = 5;
  ly::tasks::synth("semantic", o);
  CHECK(std::filesystem::exists(dir / "s" / "data.yaml"));
  CHECK(std::filesystem::exists(dir / "s" / "masks" / "train" / "00011.png"));
  CHECK(std::filesystem::exists(dir / "s" / "images" / "val" / "00000.jpg"));
  ly::SegformerFamily fam("b0");
  fam.setup(ly::parse_args({"data=" + (dir / "s" / "data.yaml").string(), "imgsz=64"}));
  CHECK(fam.num_classes() == 4);
  CHECK(fam.names().back() == "background");
  CHECK(fam.train_set()->size() + fam.val_set()->size() == 12);
  std::vector<int64_t> seen(4, 0);
  for (size_t i = 0; i < fam.train_set()->size(); ++i) {
    const auto m = data::read_mask(fam.train_set()->mask_file(i), 4);
    const auto im = data::read_image(fam.train_set()->file(i));
    CHECK(m.h == im.h);
    CHECK(m.w == im.w);
    for (auto v : m.px) ++seen[v];
  }
  for (int k = 0; k < 4; ++k) CHECK(seen[k] > 0);  // every shape class and the background occur
  // Same seed, same files.
  data::SynthOptions o2 = o;
  o2.out = dir / "s2";
  ly::tasks::synth("semantic", o2);
  CHECK(data::read_mask(dir / "s2" / "masks" / "train" / "00005.png", 4).px == data::read_mask(dir / "s" / "masks" / "train" / "00005.png", 4).px);

  // Predict with a fresh network: one mask PNG of the image's size with valid class ids, one overlay.
  fam.restore({{"names", fam.names()}});
  auto net = fam.make_network();
  net->eval();
  auto forward = [&](const torch::Tensor& x) { return net->forward(x); };
  ly::tasks::PredictOptions po;
  po.imgsz = 64;
  const auto src = dir / "s" / "images" / "val" / "00000.jpg";
  auto j = fam.predict(forward, src, po, torch::kCPU, dir / "pred");
  REQUIRE(j.size() == 1);
  const auto im = data::read_image(src);
  const auto mk = data::read_mask(j[0]["mask"].get<std::string>(), 4);
  CHECK(mk.h == im.h);
  CHECK(mk.w == im.w);
  const auto ov = data::read_image(j[0]["overlay"].get<std::string>());
  CHECK(ov.h == im.h);
  double frac = 0;
  for (auto& c : j[0]["classes"]) frac += c["fraction"].get<double>();
  CHECK(frac == doctest::Approx(1.0));
  CHECK(std::filesystem::exists(dir / "pred" / "predictions.json"));
}

TEST_CASE("semantic task names: task=semantic, the -sem suffix, synth lists it") {
  CHECK(ly::tasks::parse_task("semantic") == ly::Task::semantic);
  CHECK(ly::to_string(ly::Task::semantic) == "semantic");
  CHECK(ly::tasks::SemanticInfo::model_suffix == "-sem");
  const auto& st = ly::tasks::synth_tasks();
  CHECK(std::find(st.begin(), st.end(), "semantic") != st.end());
}
