#pragma once
// The task layer: what every family of one task shares. A task owns its dataset and batch types, its
// set-up from the config, the network input, validation and its metrics, predict's decoding contract and
// outputs, its synthetic data set (`libreyolo data synth --task ...`) and its command-line help. A family
// supplies its network, loss, decode and traits, and reaches its task through CRTP:
//
//   class MyFamily : public tasks::DetectTask<MyFamily> { ... };   // tasks/detect.hpp says what to supply
//
// A task never includes a family header. The task contract below is what the trainer, the facade
// (model.hpp) and the command line rely on; each task header states what its family must add.
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/core/utf8.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/train/family.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fnmatch.h>

#include <algorithm>
#include <concepts>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::tasks {

// What predict is asked for, whatever the task (each task reads the fields it needs).
//
// The predict contract, the same for every task (detect, classify here; point and semantic tasks
// implement it the same way): `nlohmann::json predict(forward, source, PredictOptions, device, out_dir)`
// reads the images sources(source) names, writes out_dir/predictions.json (one object per image:
// file, width, height and the task's results) with write_predictions(), an annotated copy of each image
// (class names and scores drawn: plot/charts.hpp) when save_images, and with save_txt one
// out_dir/labels/<stem>.txt per image in the task's YOLO label format plus a confidence column.
struct PredictOptions {
  int imgsz = 640;
  double conf = 0.25, iou = 0.45;  // detection: score threshold and NMS IoU (the originals' predict defaults)
  int64_t max_det = 300;          // detection: boxes kept per image
  int64_t top_k = 5;              // classification: classes reported per image
  bool save_images = true;        // annotated copies of the images
  bool save_txt = false;          // labels/<stem>.txt: YOLO-format lines with a confidence column
  bool stretch = false;           // detection: stretch the image to imgsz x imgsz instead of letterboxing it (val_resize)
};

// The images a `source=` names: one image file, every image under a folder (recursive, sorted), or a
// glob pattern (*, ?, [...]; `*` also matches across folders), e.g. source='data/images/val/*.jpg'.
inline std::vector<std::filesystem::path> sources(const std::filesystem::path& source) {
  namespace fs = std::filesystem;
  const std::string s = source.string();
  std::vector<fs::path> out;
  if (s.find_first_of("*?[") != std::string::npos && !fs::exists(source)) {
    // The folder to walk: the components before the first one with a wildcard.
    fs::path root;
    for (const auto& part : source) {
      if (part.string().find_first_of("*?[") != std::string::npos) break;
      root /= part;
    }
    if (root.empty()) root = ".";
    std::error_code ec;
    if (fs::is_directory(root, ec))
      for (auto& e : fs::recursive_directory_iterator(root, ec))
        if (e.is_regular_file() && data::detail::is_image_file(e.path()) &&
            ::fnmatch(s.c_str(), (root == "." && s.rfind("./", 0) != 0 ? e.path().lexically_relative(".") : e.path()).c_str(), 0) == 0)
          out.push_back(e.path());
    std::sort(out.begin(), out.end());
    if (out.empty()) throw DataError("source=" + s + ": the pattern matches no .jpg/.jpeg/.png image");
    return out;
  }
  if (!fs::exists(source)) throw DataError("source=" + s + ": no such file or folder (or glob pattern)");
  if (fs::is_regular_file(source)) return {source};
  for (auto& e : fs::recursive_directory_iterator(source))
    if (e.is_regular_file() && data::detail::is_image_file(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw DataError("source=" + s + ": the folder holds no .jpg/.jpeg/.png images");
  return out;
}

// A file name as predictions.json holds it: unchanged when it is valid UTF-8, else with each bad byte
// written as \xNN (JSON text must be UTF-8), and a warning that names the file. The work done on the
// image is never lost to its name. `warn` = false for names derived from one already warned about.
inline std::string json_file_name(const std::filesystem::path& p, bool warn = true) {
  const std::string s = p.string();
  if (utf8::valid(s)) return s;
  const std::string shown = utf8::escaped(s);
  if (warn)
      log::warn("predict: the file name '", shown, "' is not valid UTF-8; predictions.json names it with each bad byte ",
              "written as \\xNN");
  return shown;
}

// predictions.json under out_dir, written atomically (core/atomic_file.hpp). Text that is still not
// UTF-8 is replaced rather than lost (json_file_name() escapes file names before they get here).
inline void write_predictions(const std::filesystem::path& out_dir, const nlohmann::json& all) {
  atomic_file::write_or_throw<SetupError>(out_dir / "predictions.json", "predictions.json",
                                          all.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

// The loop every task's predict runs: `one(file)` returns the image's entry of predictions.json (and
// writes its images/labels), under a progress bar; then predictions.json and the `done` log line. What is
// predicted is never lost to a later image: one that cannot be read (DataError: corrupt, truncated, not
// an image) is named in a warning and skipped, the rest are predicted and written, and then a DataError
// says how many were skipped (exit 4, so a script notices). Any other failure (out of memory, a LibTorch
// error) stops the loop, but predictions.json still holds every image done before it is rethrown.
template <class One>
nlohmann::json predict_images(const std::vector<std::filesystem::path>& files, const std::filesystem::path& out_dir,
                              One&& one, const std::string& done = {}) {
  nlohmann::json all = nlohmann::json::array();
  std::vector<std::string> skipped;
  progress::Bar bar("predict", static_cast<int64_t>(files.size()), 30, progress::choose_mode(30), "img");
  try {
    for (const auto& file : files) {
      try {
        all.push_back(one(file));
      } catch (const DataError& e) {
        if (files.size() == 1) throw;  // a single image: its own error says it all
        skipped.push_back(json_file_name(file, false));
        log::warn("predict: skipped ", skipped.back(), ": ", e.what());
      }
      bar.update(static_cast<int64_t>(all.size() + skipped.size()));
    }
  } catch (...) {
    if (!all.empty()) {
      write_predictions(out_dir, all);
      log::warn("predict: stopped after ", all.size(), " of ", files.size(), " image(s); their predictions are in ",
                (out_dir / "predictions.json").string());
    }
    throw;
  }
  bar.finish();
  write_predictions(out_dir, all);
  log::info("predict: ", all.size(), " image(s) -> ", (out_dir / "predictions.json").string(), done);
  if (!skipped.empty())
    throw DataError("predict: " + std::to_string(skipped.size()) + " of " + std::to_string(files.size()) +
                    " image(s) could not be read and were skipped (first: " + skipped.front() +
                    ", each named above); the other " + std::to_string(all.size()) + " are in " +
                    (out_dir / "predictions.json").string());
  return all;
}

// One labels/<stem>.txt (save_txt=true): the lines as given, created empty when there are none.
inline void write_label_lines(const std::filesystem::path& out_dir, const std::filesystem::path& image,
                              const std::vector<std::string>& lines) {
  std::filesystem::create_directories(out_dir / "labels");
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  atomic_file::write_or_throw<SetupError>(out_dir / "labels" / (image.stem().string() + ".txt"), "label file", text);
}

// Static facts of a task (one struct per task: DetectInfo, ClassifyInfo, ...).
template <class I>
concept TaskInfo = requires {
  { I::task } -> std::convertible_to<Task>;
  { I::name } -> std::convertible_to<std::string_view>;           // "detect"
  { I::model_suffix } -> std::convertible_to<std::string_view>;   // "-cls": a family's non-primary task
  { I::data_help } -> std::convertible_to<std::string_view>;      // the data= format, for --help
};

// The dataset plumbing every task shares; each task derives from it (DetectTask<F> : TaskBase<F, DetectInfo,
// data::DetectDataset, data::DetectBatch>) and writes only its own setup(), augmentation, validation and
// predict. It holds the size and the class names (what a checkpoint keeps: describe() / restore()) and the
// two splits, and gives setup() its shared steps: the data= check, adopting the data set's class names
// (a restored checkpoint's must match), and opening both splits, the validation one unaugmented.
template <class Derived, class Info, class DatasetT, class BatchT>
class TaskBase {
 public:
  using task_info = Info;
  static constexpr Task task = Info::task;
  using Dataset = DatasetT;
  using Batch = BatchT;

  explicit TaskBase(std::string size) : size_(std::move(size)) {}

  std::shared_ptr<const Dataset> train_set() const { return train_; }
  std::shared_ptr<const Dataset> val_set() const { return val_; }
  static Batch to_device(const Batch& b, torch::Device d) { return b.to(d, /*non_blocking=*/true); }

  nlohmann::json describe() const { return {{"names", names_}, {"nc", names_.size()}, {"size", size_}}; }
  // From a checkpoint: the class names the network was built for.
  void restore(const nlohmann::json& j) { names_ = j.at("names").get<std::vector<std::string>>(); }
  const std::vector<std::string>& names() const { return names_; }
  int64_t num_classes() const { return static_cast<int64_t>(names_.size()); }
  const std::string& size() const { return size_; }

 protected:
  const Derived& derived() const { return static_cast<const Derived&>(*this); }

  // setup()'s first check: data= names the data set; `what` is the task's "a ... is required (...)".
  static void require_data(const TrainConfig& cfg, const std::string& what) {
    if (cfg.data.empty()) throw ConfigError("data=: " + what);
  }
  // The data set's class names become the task's; after restore() they must be the checkpoint's.
  // `source` names them in the error ("the classes of data.yaml").
  void adopt_names(const std::vector<std::string>& names, const std::string& source) {
    if (!names_.empty() && names_ != names) throw CheckpointError("the checkpoint's classes differ from " + source);
    names_ = names;
  }
  // Opens the training split with `aug` and the validation split with aug.train = false (and, where the
  // augmentation has it, multi_scale = false), each through `open(split, aug)`.
  template <class Augment, class Open>
  void open_splits(Augment aug, Open&& open) {
    train_ = open("train", aug);
    aug.train = false;
    if constexpr (requires { aug.multi_scale; }) aug.multi_scale = false;
    val_ = open("val", aug);
  }

  std::string size_;
  std::vector<std::string> names_;
  std::shared_ptr<Dataset> train_, val_;
};

// A trainer policy built on a task base: the family contract (train/family.hpp) plus the task's own.
template <class F>
concept TaskPolicy = train::FamilyPolicy<F> && TaskInfo<typename F::task_info> &&
    requires(const F cf) {
      { cf.names() } -> std::convertible_to<std::vector<std::string>>;
    };

}  // namespace libreyolo::tasks
