#pragma once
// The detection task: YOLO-format datasets (a dataset YAML with path, train, val, names; labels
// `class cx cy w h`), COCO mAP on the validation split (fitness = mAP50-95), predict to boxes in the
// original pixels plus annotated images.
//
// A detection family derives from DetectTask<Family> and supplies:
//   static constexpr std::string_view name; sizes; struct traits : family_defaults {...};
//   using Network = ...;                              a torch ModuleHolder
//   explicit Family(std::string size)                 validates the size, calls DetectTask(size)
//   Network make_network() const                      for num_classes()
//   train::LossOutput loss(const Output&, const Batch&)
//   static std::vector<std::string> loss_names()
//   std::vector<torch::Tensor> decode(const Output&, const DecodeOptions&) const
//                                                     per image [n, 6] x1 y1 x2 y2 score class, in
//                                                     network-input pixels, after NMS (DecodeOptions and
//                                                     the shared NMS: tasks/detect_postprocess.hpp)
// and may hide val_decode() (the validation thresholds), from_pixels() (float RGB 0..255 [B,3,H,W] -> the
// network input; default /255, used by input() and predict()) or input() (the network input of a batch).
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/draw.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/synth.hpp>
#include <libreyolo/eval/detection.hpp>
#include <libreyolo/plot/charts.hpp>
#include <libreyolo/tasks/detect_postprocess.hpp>
#include <libreyolo/tasks/task.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace libreyolo::tasks {

struct DetectInfo {
  static constexpr Task task = Task::detect;
  static constexpr std::string_view name = "detect";
  static constexpr std::string_view model_suffix = "-det";
  static constexpr std::string_view data_help =
      "dataset YAML with path, train, val, names; labels `class cx cy w h` (YOLO format)";
};

namespace detect {

// Undo a letterbox (data/augment.hpp's unletterbox): xyxy columns 0..3 back to the original image.
using data::unletterbox;

// The images a `source=` names: a file, a folder or a glob (tasks::sources, task.hpp).
inline std::vector<std::filesystem::path> sources(const std::filesystem::path& source) { return tasks::sources(source); }

// Rows of a [n, 6] prediction (x1 y1 x2 y2 score class) or, gt=true, a [n, 5] ground truth (class x1 y1
// x2 y2) tensor as plot boxes.
inline std::vector<plot::DetBox> boxes_of(const torch::Tensor& t_in, bool gt) {
  std::vector<plot::DetBox> out;
  if (!t_in.defined() || t_in.numel() == 0) return out;
  const auto t = t_in.to(torch::kCPU).to(torch::kFloat64).contiguous();
  const auto* d = t.data_ptr<double>();
  const int64_t cols = t.size(1);
  for (int64_t i = 0; i < t.size(0); ++i, d += cols) {
    if (gt) out.push_back({d[1], d[2], d[3], d[4], static_cast<int64_t>(d[0]), 1.0});
    else out.push_back({d[0], d[1], d[2], d[3], static_cast<int64_t>(d[5]), d[4]});
  }
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

// The task's synthetic set: JPEGs with shapes to find, a data.yaml, YOLO labels.
inline void synth(data::SynthOptions o) {
  o.task = "detect";
  data::synth_detect(o);
}

}  // namespace detect

template <class Derived>
class DetectTask : public TaskBase<Derived, DetectInfo, data::DetectDataset, data::DetectBatch> {
  using Base = TaskBase<Derived, DetectInfo, data::DetectDataset, data::DetectBatch>;

 public:
  // The optional members every family of this task has (train/members.hpp).
  using task_members = member::list<member::size, member::plots, member::step_padding>;
  using typename Base::Batch;
  using typename Base::Dataset;
  using Base::num_classes;

  explicit DetectTask(std::string size) : Base(std::move(size)) {}

  // Where a letterboxed image sits in validation, predict and the training samples without a mosaic:
  // centred here; a family whose original pads right and below (its `preproc`: YOLOv9, YOLOX, RTMDet)
  // declares `static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::top_left;`.
  static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::centre;
  // The square a letterboxed image is resized into in validation and predict, on the imgsz canvas: 0 here,
  // the canvas itself (data::letterbox's `fit`); YOLO-NAS hides it: its original resizes to 636 and centres
  // that on 640.
  static int letterbox_fit(int /*imgsz*/) { return 0; }

  // Opens the dataset YAML named by cfg.data; the augmentation settings come from the config.
  void setup(const TrainConfig& cfg) {
    this->require_data(cfg, "a detection dataset YAML is required (path, train, val, names)");
    const auto yaml = data::load_dataset_yaml(cfg.data);
    this->adopt_names(yaml.names, "the classes of " + cfg.data);
    this->open_splits(augment_from(cfg, this->size_), [&](const char* split, const data::DetectAugment& aug) {
      return Dataset::open(yaml, split, aug);
    });
  }
  // The model's size: this family's (the family may read its recipe by size; cfg.model can be a checkpoint
  // path); the first of the family's sizes when not given.
  static data::DetectAugment augment_from(const TrainConfig& cfg, const std::string& size = std::string(Derived::sizes[0])) {
    data::DetectAugment a;
    a.imgsz = cfg.imgsz;
    a.mosaic = cfg.mosaic;
    a.mixup = cfg.mixup;
    a.degrees = cfg.degrees;
    a.translate = cfg.translate;
    a.scale = cfg.scale;
    a.shear = cfg.shear;
    a.perspective = cfg.perspective;
    a.fliplr = cfg.fliplr;
    a.flipud = cfg.flipud;
    a.hsv_h = cfg.hsv_h;
    a.hsv_s = cfg.hsv_s;
    a.hsv_v = cfg.hsv_v;
    a.hsv_mode = cfg.hsv_mode;
    a.hsv_prob = cfg.hsv_prob;
    a.affine = cfg.affine;
    a.no_aug_epochs = cfg.no_aug_epochs;
    a.epochs = cfg.epochs;
    a.cache = cfg.cache;
    a.multi_scale = cfg.multi_scale;
    a.stretch = cfg.train_resize == "stretch";
    a.val_stretch = cfg.val_stretch();
    a.letterbox_place = Derived::letterbox_place;
    a.letterbox_fit = Derived::letterbox_fit(cfg.imgsz);
    // A family may adjust them (e.g. bring its own training pipeline): static void adjust_augment(a, cfg, size).
    if constexpr (requires { Derived::adjust_augment(a, cfg, size); }) Derived::adjust_augment(a, cfg, size);
    if (a.stretch && !a.can_stretch)
      throw ConfigError("train_resize=stretch: " + std::string(Derived::name) + "'s training pipeline letterboxes only; allowed: letterbox "
                        "(stretch: the D-FINE line's pipeline, dfine, deim, deimv2, rtdetrv4, ec)");
    return a;
  }
  // cuda_graph=step: the batch with its targets padded to a power-of-two box count (one graph per bucket).
  static Batch pad_for_step_graph(const Batch& b) {
    Batch out = b;
    out.targets = data::pad_targets_to_bucket(b.targets);
    return out;
  }
  static torch::Tensor from_pixels(const torch::Tensor& rgb255) { return rgb255.div(255.0); }
  static torch::Tensor input(const Batch& b) { return Derived::from_pixels(b.images.to(torch::kFloat32)); }

  // The original's validation post-processing: every (box, class) pair above conf 0.001, class-aware NMS
  // at IoU 0.65, 300 detections per image (a family may hide it: validation_decode(false), the best class).
  static DecodeOptions val_decode() { return validation_decode(/*multi_label=*/true); }

  // COCO mAP (COCOeval's rules, eval/detection.hpp) on the validation split: boxes mapped back to the
  // original image and clipped to it, empty ones dropped; ground truth mapped back the same way, so areas
  // are original pixels as COCO's are.
  template <class Forward>
  train::ValResult validate(Forward&& forward, data::Loader<Dataset>& loader, torch::Device dev) const {
    torch::NoGradGuard ng;
    eval::DetectionMetrics metrics;
    auto opts = Derived::val_decode();
    if (val_nms_iou_ > 0) opts.iou = val_nms_iou_;
    const bool plots = !plot_dir_.empty() && plot::available;
    plot::ConfusionMatrix confusion(num_classes());
    plot::PrCollector pr;
    bool first_batch = true;
    loader.start_epoch(0);
    while (auto batch = loader.next()) {
      auto b = Derived::to_device(*batch, dev);
      opts.clip.clear();  // each image's own region of the input: orig_h, orig_w, ratio_x, ratio_y, pad_x, pad_y
      for (const auto& lb : batch->letterbox) opts.clip.push_back({lb[4], lb[5], lb[4] + lb[1] * lb[2], lb[5] + lb[0] * lb[3]});
      auto preds = derived().decode(forward(Derived::input(b)), opts);
      const std::array<int64_t, 2> in_hw{b.images.size(2), b.images.size(3)};
      if (plots && first_batch) plot_batch(*batch, preds);
      first_batch = false;
      for (size_t i = 0; i < preds.size(); ++i) {
        const auto& lb = batch->letterbox[i];  // orig_h, orig_w, ratio_x, ratio_y, pad_x, pad_y
        const std::array<int64_t, 2> orig{static_cast<int64_t>(lb[0]), static_cast<int64_t>(lb[1])};
        const std::array<double, 2> ratio{lb[2], lb[3]}, pad{lb[4], lb[5]};
        auto p = detect::unletterbox(preds[i].to(torch::kCPU), in_hw, orig, ratio, pad);
        if (p.size(0) > 0) {
          auto keep = ((p.select(1, 2) > p.select(1, 0)) & (p.select(1, 3) > p.select(1, 1))).nonzero().squeeze(1);
          p = p.index_select(0, keep);
        }
        auto g = batch->boxes[i];
        if (g.size(0) > 0)
          g = torch::cat({g.narrow(1, 0, 1), detect::unletterbox(g.narrow(1, 1, 4), in_hw, orig, ratio, pad)}, 1);
        metrics.add(p, g);
        if (plots) {
          const auto pb = detect::boxes_of(p, /*gt=*/false), gb = detect::boxes_of(g, /*gt=*/true);
          confusion.add_detections(pb, gb);
          pr.add(pb, gb);
        }
      }
    }
    if (plots) {
      plot::confusion_png(confusion, names_, plot_dir_ / "confusion_matrix.png");
      plot::pr_curve_png(pr.curves(), names_, plot_dir_ / "PR_curve.png");
    }
    auto r = metrics.compute();
    train::ValResult v;
    v.fitness = std::max(0.0, r.map50_95);  // COCO's -1 (no ground truth at all) ranks as 0
    v.metrics = {{"mAP50", r.map50}, {"mAP50-95", r.map50_95}, {"mAP75", r.map75},   {"AP_small", r.ap_small},
                 {"AP_medium", r.ap_medium}, {"AP_large", r.ap_large}, {"AR100", r.ar100},
                 {"precision", r.precision}, {"recall", r.recall}};
    char buf[96];
    std::snprintf(buf, sizeof buf, "mAP50 %.4f  mAP50-95 %.4f", r.map50, r.map50_95);
    v.summary = buf;
    return v;
  }

  // Predict on image files: letterbox (opt.stretch: stretch to a square), forward (from_pixels of the float [1,3,S,S] image), decode + NMS, boxes
  // mapped back to the original pixels. Writes predictions.json, a copy of each image with its boxes,
  // class names and scores, and with save_txt labels/<stem>.txt (`class cx cy w h conf`, normalised).
  template <class Forward>
  nlohmann::json predict(Forward&& forward, const std::filesystem::path& source, const PredictOptions& opt,
                         torch::Device dev, const std::filesystem::path& out_dir) const {
    namespace fs = std::filesystem;
    const auto files = tasks::sources(source);
    fs::create_directories(out_dir);
    DecodeOptions dec;
    dec.conf = opt.conf;
    dec.iou = opt.iou;
    dec.max_det = opt.max_det;
    dec.multi_label = Derived::val_decode().multi_label;  // the family's postprocess: YOLOv9's keeps every class above conf
    torch::NoGradGuard ng;
    auto one = [&](const fs::path& file) -> nlohmann::json {
      data::Image img = data::read_image(file);
      data::DetBoxes none;
      data::LetterboxInfo lb;
      data::Image in = opt.stretch ? data::stretch_resize(img, opt.imgsz, opt.imgsz, none, &lb)
                                   : data::letterbox(img, opt.imgsz, opt.imgsz, none, &lb, /*scaleup=*/false, Derived::letterbox_place,
                                                     Derived::letterbox_fit(opt.imgsz));
      auto x = Derived::from_pixels(data::to_chw_tensor(in).unsqueeze(0).to(dev).to(torch::kFloat32));
      DecodeOptions dec_one = dec;  // boxes clamped to the image before NMS, as in validate()
      dec_one.clip = {{double(lb.pad_x), double(lb.pad_y), lb.pad_x + img.w * lb.scale_x, lb.pad_y + img.h * lb.scale_y}};
      torch::Tensor det = derived().decode(forward(x), dec_one)[0].to(torch::kCPU).to(torch::kFloat64);
      nlohmann::json boxes = nlohmann::json::array();
      std::vector<plot::DetBox> drawn;
      std::vector<std::string> lines;
      for (int64_t i = 0; i < det.size(0); ++i) {
        torch::Tensor d = det[i];
        // Letterboxed (or stretched) pixel -> original pixel: undo the padding, then the per-axis scale.
        double x1 = std::clamp((d[0].item<double>() - lb.pad_x) / lb.scale_x, 0.0, double(img.w));
        double y1 = std::clamp((d[1].item<double>() - lb.pad_y) / lb.scale_y, 0.0, double(img.h));
        double x2 = std::clamp((d[2].item<double>() - lb.pad_x) / lb.scale_x, 0.0, double(img.w));
        double y2 = std::clamp((d[3].item<double>() - lb.pad_y) / lb.scale_y, 0.0, double(img.h));
        int cls = static_cast<int>(d[5].item<double>());
        const double score = d[4].item<double>();
        boxes.push_back({{"class", cls}, {"name", cls < static_cast<int>(names_.size()) ? names_[cls] : std::to_string(cls)},
                         {"score", score}, {"box", {x1, y1, x2, y2}}});
        drawn.push_back({x1, y1, x2, y2, cls, score});
        char line[160];
        std::snprintf(line, sizeof line, "%d %.6f %.6f %.6f %.6f %.6f", cls, (x1 + x2) / 2 / img.w, (y1 + y2) / 2 / img.h,
                      (x2 - x1) / img.w, (y2 - y1) / img.h, score);
        lines.emplace_back(line);
      }
      if (opt.save_images) {
        plot::annotate(img, drawn, names_, /*show_score=*/true);
        data::write_jpeg(out_dir / (file.stem().string() + ".jpg"), img, 90);
      }
      if (opt.save_txt) write_label_lines(out_dir, file, lines);
      return {{"file", json_file_name(file)}, {"width", img.w}, {"height", img.h}, {"boxes", boxes}};
    };
    return predict_images(files, out_dir, one,
                          (opt.save_images ? ", annotated images in " + out_dir.string() : std::string()) +
                              (opt.save_txt ? ", labels in " + (out_dir / "labels").string() : std::string()));
  }
  // One line per image for the command line.
  static std::string predict_summary(const nlohmann::json& j) {
    size_t n = 0;
    for (auto& f : j) n += f["boxes"].size();
    return std::to_string(j.size()) + " image(s), " + std::to_string(n) + " box(es)";
  }

  // The task's synthetic set: JPEGs with shapes to find, a data.yaml, YOLO labels.
  static void synth(const data::SynthOptions& o) { detect::synth(o); }
  // What the conformance suite and `data synth` point data= at after synth(o).
  static std::filesystem::path synth_data(const std::filesystem::path& out) { return out / "data.yaml"; }

  // Pictures (plots=true; the trainer calls these): where validate() writes val_batch0_labels.jpg,
  // val_batch0_pred.jpg, confusion_matrix.png and PR_curve.png ("" = none), and labels.png of the
  // training split (boxes per class, centres, sizes).
  void set_plot_dir(const std::filesystem::path& dir) { plot_dir_ = dir; }
  // The NMS IoU validate() runs (> 0; default: val_decode()'s, the original's in-training 0.65): the facade's
  // `val` sets kStandaloneValIou, the original's val() default. NMS-free decoders (the DETR line) ignore it.
  void set_val_nms_iou(double iou) {
    if (!(iou > 0 && iou <= 1)) throw ConfigError("validation NMS IoU " + std::to_string(iou) + ": allowed 0 < iou <= 1");
    val_nms_iou_ = iou;
  }
  void plot_labels(const std::filesystem::path& out) const {
    if (!train_) return;
    std::vector<std::array<float, 5>> boxes;
    for (const auto& e : train_->index().entries) boxes.insert(boxes.end(), e.boxes.begin(), e.boxes.end());
    plot::labels_png(names_, boxes, out);
  }

 protected:
  using Base::derived;
  using Base::names_;
  using Base::train_;

  // The first validation batch (network-input pixels): its labels and the predictions above conf 0.25.
  void plot_batch(const Batch& batch, const std::vector<torch::Tensor>& preds) const {
    std::vector<data::Image> labelled, predicted;
    const torch::Tensor images = batch.images;
    for (int64_t i = 0; i < images.size(0) && i < 16; ++i) {
      auto img = plot::image_from_chw(images[i]);
      auto pimg = img;
      plot::annotate(img, detect::boxes_of(batch.boxes[static_cast<size_t>(i)], /*gt=*/true), names_, false);
      std::vector<plot::DetBox> p;
      for (const auto& d : detect::boxes_of(preds[static_cast<size_t>(i)].to(torch::kCPU), false))
        if (d.score >= 0.25) p.push_back(d);
      plot::annotate(pimg, p, names_, true);
      labelled.push_back(std::move(img));
      predicted.push_back(std::move(pimg));
    }
    plot::grid_jpeg(labelled, plot_dir_ / "val_batch0_labels.jpg");
    plot::grid_jpeg(predicted, plot_dir_ / "val_batch0_pred.jpg");
  }

  std::filesystem::path plot_dir_;
  double val_nms_iou_ = -1;  // set_val_nms_iou; -1: val_decode()'s
};

}  // namespace libreyolo::tasks
