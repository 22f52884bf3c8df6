#pragma once
// Inference on image files for a detection network: letterbox, forward, decode + NMS, boxes mapped back
// to the original pixels. Writes predictions.json and a copy of each image with its boxes drawn.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/draw.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/families/yolo9/postprocess.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace libreyolo::families::yolo9 {

struct PredictOptions {
  int imgsz = 640;
  double conf = 0.25, iou = 0.7;
  int64_t max_det = 300;
  bool save_images = true;
};

// The images a `source=` names: one image file, or every image under a folder (sorted).
inline std::vector<std::filesystem::path> predict_sources(const std::filesystem::path& source) {
  namespace fs = std::filesystem;
  if (!fs::exists(source)) throw DataError("source=" + source.string() + ": no such file or folder");
  if (fs::is_regular_file(source)) return {source};
  std::vector<fs::path> out;
  for (auto& e : fs::recursive_directory_iterator(source))
    if (e.is_regular_file() && data::detail::is_image_file(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw DataError("source=" + source.string() + ": the folder holds no .jpg/.jpeg/.png images");
  return out;
}

// Draws a 2-pixel rectangle outline in a colour picked from the class id.
inline void draw_box(data::Image& img, double x1, double y1, double x2, double y2, int cls) {
  static const data::Rgb palette[] = {{255, 56, 56}, {255, 157, 151}, {255, 112, 31}, {255, 178, 29}, {207, 210, 49},
                                      {72, 249, 10},  {146, 204, 23},  {61, 219, 134}, {26, 147, 52},  {0, 212, 187}};
  const data::Texture tex = data::Texture::solid(palette[cls % 10]);
  data::draw_line(img, {x1, y1}, {x2, y1}, 2, tex);
  data::draw_line(img, {x2, y1}, {x2, y2}, 2, tex);
  data::draw_line(img, {x2, y2}, {x1, y2}, 2, tex);
  data::draw_line(img, {x1, y2}, {x1, y1}, 2, tex);
}

// `forward` runs the network on a float [1,3,S,S] input in [0,1] and returns its raw head maps.
inline nlohmann::json predict_images(const std::function<std::vector<torch::Tensor>(const torch::Tensor&)>& forward,
                                     const std::vector<std::string>& names, const std::vector<std::filesystem::path>& files,
                                     const PredictOptions& opt, torch::Device dev, const std::filesystem::path& out_dir) {
  namespace fs = std::filesystem;
  fs::create_directories(out_dir);
  NmsOptions nms;
  nms.conf = opt.conf;
  nms.iou = opt.iou;
  nms.max_det = opt.max_det;
  nlohmann::json all = nlohmann::json::array();
  torch::NoGradGuard ng;
  for (const auto& file : files) {
    data::Image img = data::read_image(file);
    data::DetBoxes none;
    data::LetterboxInfo lb;
    data::Image in = data::letterbox(img, opt.imgsz, opt.imgsz, none, &lb, /*scaleup=*/false);
    auto x = data::to_chw_tensor(in).unsqueeze(0).to(dev).to(torch::kFloat32).div(255.0);
    auto det = postprocess(forward(x), {8, 16, 32}, 16, nms)[0].to(torch::kCPU).to(torch::kFloat64);
    nlohmann::json boxes = nlohmann::json::array();
    for (int64_t i = 0; i < det.size(0); ++i) {
      auto d = det[i];
      // Letterboxed pixel -> original pixel: undo the padding, then the per-axis scale.
      double x1 = std::clamp((d[0].item<double>() - lb.pad_x) / lb.scale_x, 0.0, double(img.w));
      double y1 = std::clamp((d[1].item<double>() - lb.pad_y) / lb.scale_y, 0.0, double(img.h));
      double x2 = std::clamp((d[2].item<double>() - lb.pad_x) / lb.scale_x, 0.0, double(img.w));
      double y2 = std::clamp((d[3].item<double>() - lb.pad_y) / lb.scale_y, 0.0, double(img.h));
      int cls = static_cast<int>(d[5].item<double>());
      boxes.push_back({{"class", cls}, {"name", cls < static_cast<int>(names.size()) ? names[cls] : std::to_string(cls)},
                       {"score", d[4].item<double>()}, {"box", {x1, y1, x2, y2}}});
      if (opt.save_images) draw_box(img, x1, y1, x2, y2, cls);
    }
    if (opt.save_images) data::write_jpeg(out_dir / (file.stem().string() + ".jpg"), img, 90);
    all.push_back({{"file", file.string()}, {"width", img.w}, {"height", img.h}, {"boxes", boxes}});
  }
  std::ofstream(out_dir / "predictions.json") << all.dump(2) << "\n";
  log::info("predict: ", files.size(), " image(s) -> ", (out_dir / "predictions.json").string());
  return all;
}

}  // namespace libreyolo::families::yolo9
