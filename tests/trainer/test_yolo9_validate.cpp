// The YOLOv9 family's validation path end to end (loader -> decode -> NMS -> COCO mAP) with a "network"
// whose head maps encode the ground truth exactly: mAP must then be (almost) perfect, and a network
// that predicts the wrong class must score zero.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support_data.hpp"

#include <doctest/doctest.h>

namespace ly = libreyolo;

namespace {

// Head maps for one image at strides 8/16/32 that decode to `boxes` ([n,5] cls,x1,y1,x2,y2): each box is
// put on the stride-8 anchor of its centre cell, with a two-bin DFL distribution per side whose mean is
// the exact distance (in stride units), and a confident class logit; every other anchor is background.
std::vector<torch::Tensor> encode(const torch::Tensor& boxes, int64_t imgsz, int64_t nc, int64_t cls_shift) {
  const int64_t R = 16, C = 4 * R + nc;
  std::vector<torch::Tensor> maps;
  for (int64_t s : {8, 16, 32}) {
    auto m = torch::full({C, imgsz / s, imgsz / s}, -1e4);
    m.narrow(0, 4 * R, nc).fill_(-12.0);  // background: sigmoid(-12) ~ 6e-6 < conf 0.001
    maps.push_back(m);
  }
  auto acc = boxes.accessor<float, 2>();
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    const double x1 = acc[i][1], y1 = acc[i][2], x2 = acc[i][3], y2 = acc[i][4];
    const int64_t gx = static_cast<int64_t>((x1 + x2) / 2 / 8), gy = static_cast<int64_t>((y1 + y2) / 2 / 8);
    const double px = (gx + 0.5) * 8, py = (gy + 0.5) * 8;
    const double d[4] = {(px - x1) / 8, (py - y1) / 8, (x2 - px) / 8, (y2 - py) / 8};
    for (int side = 0; side < 4; ++side) {
      const double v = std::clamp(d[side], 0.0, double(R - 1) - 1e-6);
      const int64_t lo = static_cast<int64_t>(v);
      const double frac = v - lo;
      maps[0][side * R + lo][gy][gx] = std::log(std::max(1 - frac, 1e-12));
      maps[0][side * R + lo + 1][gy][gx] = std::log(std::max(frac, 1e-12));
    }
    const int64_t cls = (static_cast<int64_t>(acc[i][0]) + cls_shift) % nc;
    maps[0][4 * R + cls][gy][gx] = 12.0;
  }
  return maps;
}

double val_map50(ly::Yolo9Family& fam, int64_t cls_shift) {
  ly::data::LoaderOptions lo;
  lo.batch = 4;
  lo.workers = 0;
  lo.shuffle = false;
  ly::data::Loader<ly::data::DetectDataset> loader(fam.val_set(), lo), truth(fam.val_set(), lo);
  truth.start_epoch(0);
  const int64_t nc = static_cast<int64_t>(fam.names().size());
  auto forward = [&](const torch::Tensor& x) {
    auto b = truth.next();  // the same batch the validation loader is on (same order)
    std::vector<std::vector<torch::Tensor>> per_image;
    for (auto& bx : b->boxes) per_image.push_back(encode(bx, x.size(-1), nc, cls_shift));
    std::vector<torch::Tensor> out;
    for (size_t lvl = 0; lvl < 3; ++lvl) {
      std::vector<torch::Tensor> stack;
      for (auto& m : per_image) stack.push_back(m[lvl]);
      out.push_back(torch::stack(stack));
    }
    return out;
  };
  auto r = fam.validate(forward, loader, torch::kCPU);
  MESSAGE("mAP50 " << r.metrics["mAP50"] << " mAP50-95 " << r.metrics["mAP50-95"]);
  CHECK(r.fitness == doctest::Approx(r.metrics["mAP50-95"].get<double>()));
  return r.metrics["mAP50"].get<double>();
}

}  // namespace

TEST_CASE("yolo9 validation: ground truth encoded as head maps scores ~1 mAP, wrong classes score 0") {
  lry_test::TempDir dir("lry_y9val");
  auto cfg = ly::parse_args({"model=yolo9t", "data=" + lry_test::small_detect_set(dir.path, 30, 11).string(), "imgsz=128"});
  ly::Yolo9Family fam("t");
  fam.setup(cfg);
  REQUIRE(fam.val_set()->size() > 0);
  CHECK(val_map50(fam, 0) > 0.9);
  CHECK(val_map50(fam, 1) == doctest::Approx(0.0));
}
