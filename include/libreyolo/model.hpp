#pragma once
// libreyolo::Model — the run-time facade used by the command line and by users who choose the model
// at run time: `Model m("<family><size>"); m.train(cfg);`. It dispatches once, through the family list
// (families/list.hpp), to the matching Trainer<Family, Precision, Capture, Profiler> instantiations. The
// per-family entry points train_with / validate_with / predict_with are explicitly instantiated in one
// translation unit per family (families/instantiate.hpp); the command line sees only their declarations.
// Not part of the umbrella <libreyolo/libreyolo.hpp>: including this header includes every family.
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/facade.hpp>
#include <libreyolo/families/registry.hpp>
#include <libreyolo/io/original.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace libreyolo {

class Model {
 public:
  // A model name (family + size, see families/list.hpp; "" = the first listed) or a checkpoint path (its
  // family, task and weights are used).
  // The original's PyTorch checkpoints (.pt) are read by io/original.hpp into one of ours (the
  // original's state-dict names equal ours).
  explicit Model(std::string name_or_checkpoint) {
    namespace fs = std::filesystem;
    if (fs::is_regular_file(name_or_checkpoint)) {
      auto ck = io::load_any_checkpoint(name_or_checkpoint);
      check_model_meta(ck, name_or_checkpoint);
      model_ = ck.meta.at("model").get<std::string>();
      task_ = ck.meta.at("config").value("task", std::string{});
      weights_ = name_or_checkpoint;
    } else {
      model_ = name_or_checkpoint.empty() ? families::default_model() : std::move(name_or_checkpoint);
    }
    with_family(model_, task_, [](auto&&) { return 0; });  // validates the name now
  }
  const std::string& name() const { return model_; }

  // What a checkpoint must say for a model to be built from it: the model's name and the family's state
  // (its class names). `libreyolo train` and the .pt reader always write both; a file saved otherwise
  // (train::save_checkpoint by hand) is named here with the key it lacks, not with a JSON exception later.
  static void check_model_meta(const train::Checkpoint& ck, const std::string& path) {
    auto refuse = [&](const std::string& what) {
      throw CheckpointError("checkpoint " + path + ": " + what +
                            "; it was not written by `libreyolo train` (give a run's weights/last.ckpt or "
                            "best.ckpt, or the original's .pt)");
    };
    const auto& m = ck.meta;
    if (!m.contains("model") || !m.at("model").is_string() || m.at("model").get<std::string>().empty())
      refuse("its metadata has no 'model' name (a model such as \"yolov9t\")");
    if (!m.contains("family") || !m.at("family").is_object())
      refuse("its metadata has no 'family' object (the class names the model was trained on)");
    const auto& names = m.at("family").contains("names") ? m.at("family").at("names") : nlohmann::json();
    bool ok = names.is_array();
    for (const auto& n : names) ok = ok && n.is_string();
    if (!ok) refuse("its metadata's 'family.names' is not a list of class names");
    if (!m.contains("config") || !m.at("config").is_object())
      refuse("its metadata has no 'config' object (the settings the model was trained with)");
  }

  // `libreyolo val`: needs a checkpoint (Model constructed from a .ckpt path).
  train::ValResult val(TrainConfig cfg) const {
    if (weights_.empty()) throw ConfigError("val: model= must be a checkpoint file (weights/best.ckpt), not a bare name");
    auto ck = io::load_any_checkpoint(weights_);
    if (cfg.data.empty()) cfg.data = ck.meta.at("config").value("data", std::string{});
    if (!cfg.is_explicit("imgsz")) cfg.imgsz = ck.meta.at("config").value("imgsz", cfg.imgsz);
    inherit_resize(cfg, ck);
    return with_family(model_, task_, [&](auto fam) { return validate_with(std::move(fam), cfg, ck); });
  }

  // `libreyolo predict`: the task's outputs (detection: boxes + annotated images; classification: top-k
  // classes) under out_dir, as JSON. Detection keeps boxes scoring above `conf`, NMS at `iou`, at most
  // `max_det` per image (the original's predict defaults: 0.25, 0.45, 300).
  nlohmann::json predict(const std::filesystem::path& source, TrainConfig cfg, const std::filesystem::path& out_dir,
                         double conf = 0.25, double iou = 0.45, int64_t max_det = 300) const {
    if (weights_.empty()) throw ConfigError("predict: model= must be a checkpoint file (weights/best.ckpt)");
    // The thresholds first: a bad value is refused before the checkpoint is read.
    if (!(conf >= 0 && conf <= 1)) throw ConfigError("conf=" + std::to_string(conf) + ": invalid value; allowed: 0 .. 1");
    if (!(iou > 0 && iou <= 1)) throw ConfigError("iou=" + std::to_string(iou) + ": invalid value; allowed: 0 < iou <= 1");
    if (max_det < 1) throw ConfigError("max_det=" + std::to_string(max_det) + ": invalid value; allowed: an integer >= 1");
    check_predict_source(source);
    auto ck = io::load_any_checkpoint(weights_);
    inherit_resize(cfg, ck);
    tasks::PredictOptions po;
    po.conf = conf, po.iou = iou, po.max_det = max_det;
    return with_family(model_, task_, [&](auto fam) { return predict_with(std::move(fam), ck, source, cfg, out_dir, po); });
  }

  // `libreyolo profile infer`: stage latencies (eval/infer_profile.hpp) of the checkpoint's network, or of
  // a freshly initialised one for a bare model name.
  nlohmann::json profile_infer(const eval::InferOptions& o) const {
    std::optional<train::Checkpoint> ck;
    if (!weights_.empty()) ck = io::load_any_checkpoint(weights_);
    return with_family(model_, task_, [&](auto fam) { return infer_with(std::move(fam), ck ? &*ck : nullptr, model_, o); });
  }

  // `libreyolo export format=libreyolo`: the checkpoint as the original's .pt (its schema 1.0; the EMA
  // weights when present, as the original saves them), which the original's loader accepts. `out` ""
  // = the checkpoint's path with the extension .pt. Returns the path written.
  std::filesystem::path export_original(std::filesystem::path out = {}) const {
    namespace fs = std::filesystem;
    if (weights_.empty()) throw ConfigError("export: model= must be a checkpoint file (weights/best.ckpt), not a bare name");
    auto ck = io::load_any_checkpoint(weights_);
    if (out.empty()) out = fs::path(weights_).replace_extension(".pt");
    atomic_file::check_target(out, "export", atomic_file::out_remedy);  // before anything is loaded
    if (fs::exists(out) && fs::equivalent(out, weights_))
      throw ConfigError("export: out=" + out.string() + " is the checkpoint being exported; give another out=");
    with_family(model_, task_, [&](auto fam) {
      export_with(std::move(fam), ck, out);
      return 0;
    });
    return out;
  }

  TrainResult train(TrainConfig cfg) const {
    cfg.model = model_;
    if (!weights_.empty() && cfg.weights.empty()) cfg.weights = weights_;
    const std::string task = cfg.task.empty() ? task_ : cfg.task;
    return with_family(model_, task, [&](auto fam) { return train_with(std::move(fam), cfg); });
  }

 private:
  // val and predict resize their inputs as the checkpoint's run did (its train_resize and val_resize, so a
  // train_resize=stretch run validates stretched) unless the command line sets them; a bad saved value is
  // refused as a command-line one would be, naming the checkpoint.
  void inherit_resize(TrainConfig& cfg, const train::Checkpoint& ck) const {
    const auto& saved = ck.meta.at("config");
    for (const char* key : {"train_resize", "val_resize"})
      if (!cfg.is_explicit(key) && saved.contains(key) && saved.at(key).is_string())
        set_key(cfg, key, saved.at(key).get<std::string>(), weights_ + ": its saved config: ", /*mark_explicit=*/false);
  }

  // A source that exists but is neither a file nor a folder (a FIFO would block the read, a device
  // stream forever) is refused up front with what it is.
  static void check_predict_source(const std::filesystem::path& source) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto st = fs::status(source, ec);
    if (ec || !fs::exists(st) || fs::is_regular_file(st) || fs::is_directory(st)) return;
    const char* kind = fs::is_fifo(st)              ? "a FIFO (named pipe)"
                       : fs::is_character_file(st) ? "a character device"
                       : fs::is_block_file(st)     ? "a block device"
                       : fs::is_socket(st)         ? "a socket"
                                                   : "not a regular file";
    throw DataError("predict: source=" + source.string() + " is " + kind +
                    ", not an image file or a folder of images; give an image, a folder or a glob (e.g. 'imgs/*.jpg')");
  }

  std::string model_;
  std::string task_;
  std::string weights_;
};

}  // namespace libreyolo

// Linked with the compiled families (the in-tree libreyolo_families, or an installed libreyolo::families:
// their target defines LIBREYOLO_COMPILED_FAMILIES), every family's entry points are declared extern, so a
// program using Model compiles none of their trainers.
#if defined(LIBREYOLO_COMPILED_FAMILIES)
#include <libreyolo/families/extern.hpp>
#endif
