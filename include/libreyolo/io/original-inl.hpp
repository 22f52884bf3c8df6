#pragma once
// Definitions of original.hpp (core/api.hpp): included by original.hpp when header-only, compiled once otherwise.
#include <libreyolo/io/original.hpp>

namespace libreyolo::io {

LIBREYOLO_INLINE bool is_original_checkpoint_path(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".pt" || ext == ".pth";
}

namespace detail {

LIBREYOLO_INLINE std::string text_field(const PyValue& root, const char* key, const std::string& where) {
  const PyValue* v = root.find(key);
  if (!v) throw CheckpointError(where + ": the original's checkpoint lacks its '" + std::string(key) + "' entry");
  if (!v->is_string()) throw CheckpointError(where + ": '" + std::string(key) + "' is a " + v->kind_name() + ", not a string");
  return v->as_string();
}

LIBREYOLO_INLINE std::vector<std::string> names_field(const PyValue& root, const std::string& where) {
  const PyValue* v = root.find("names");
  if (!v) throw CheckpointError(where + ": the original's checkpoint lacks its 'names' entry");
  std::vector<std::string> out;
  if (v->is_sequence()) {
    for (const auto& n : v->items()) out.push_back(n.as_string());
    return out;
  }
  if (!v->is_dict()) throw CheckpointError(where + ": 'names' is a " + std::string(v->kind_name()) + ", not a dict or list");
  std::map<int64_t, std::string> by_id;
  for (const auto& [k, n] : v->dict_items()) {
    if (!k.is_int()) throw CheckpointError(where + ": 'names' has the non-integer key " + k.repr(40));
    by_id[k.as_int()] = n.as_string();
  }
  int64_t expect = 0;
  for (const auto& [id, n] : by_id) {
    if (id != expect)
      throw CheckpointError(where + ": 'names' skips class " + std::to_string(expect) + " (ids must be 0..nc-1)");
    out.push_back(n);
    ++expect;
  }
  return out;
}

LIBREYOLO_INLINE nlohmann::json number_or_null(const PyValue* v) {
  if (!v) return nullptr;
  if (v->is_int()) return v->as_int();
  if (v->is_number()) return v->as_float();
  return nullptr;
}

LIBREYOLO_INLINE bool torchscript_layout(const std::filesystem::path& path) {
  try {
    FileReadAdapter in(path.string());
    const ZipDirectory dir = read_zip_directory(in, path.string());
    if (dir.find(dir.prefix + "constants.pkl")) return true;
    for (const auto& en : dir.entries)
      if (en.name.rfind(dir.prefix + "code/", 0) == 0) return true;
  } catch (const CheckpointError&) {
    // not a zip, or a damaged one: read_pt says what is wrong with it
  }
  return false;
}

LIBREYOLO_INLINE void check_config_ints(const train::Checkpoint& ck, const std::string& where) {
  if (!ck.meta.is_object() || !ck.meta.contains("config") || !ck.meta.at("config").is_object()) return;
  const auto& cfg = ck.meta.at("config");
  // The metadata the commands read back as `int` (a wider value would wrap silently); the ranges are
  // the ones config.hpp allows for the same keys.
  struct Key {
    const char* name;
    int64_t lo, hi;
  };
  for (const Key& k : {Key{"imgsz", 32, 8192}}) {
    if (!cfg.contains(k.name)) continue;
    const auto& v = cfg.at(k.name);
    const bool integer = v.is_number_integer();
    const int64_t x = !integer ? 0 : v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                          ? std::numeric_limits<int64_t>::max()
                          : v.get<int64_t>();
    if (!integer || x < k.lo || x > k.hi)
      throw CheckpointError(where + ": its metadata config." + k.name + " = " + v.dump() + " is not " +
                            (integer ? "within [" + std::to_string(k.lo) + ", " + std::to_string(k.hi) + "]" : std::string("an integer")) +
                            " (a damaged or edited file); give " + k.name + "= explicitly or use another checkpoint");
  }
}

// The original's model_family and ours differ only where our family name ends in a dash (a size that
// begins with a letter follows it: rtdetr-r18, rtdetrv2-r18, ec-s, rfdetr-n); the original writes "rtdetr",
// "rtdetrv2", "ec", "rfdetr".
LIBREYOLO_INLINE std::string family_from_original(const std::string& f) {
  return f == "rtdetr" || f == "rtdetrv2" || f == "ec" || f == "rfdetr" ? f + "-" : f;
}
// Our families whose original validates by a stretch to imgsz x imgsz rather than a letterbox.
LIBREYOLO_INLINE bool validates_stretched(const std::string& family) {
  for (const char* f : {"rtdetr-", "rtdetrv2-", "rtdetrv4", "dfine", "deim", "deimv2", "ec-", "rfdetr-"})
    if (family == f) return true;
  return false;
}
LIBREYOLO_INLINE std::string family_to_original(std::string f) {
  if (!f.empty() && f.back() == '-') f.pop_back();
  return f;
}

}  // namespace detail

LIBREYOLO_INLINE train::Checkpoint checkpoint_from_original(const std::filesystem::path& path) {
  const std::string where = "checkpoint " + path.string();
  if (!std::filesystem::is_regular_file(path)) throw CheckpointError(where + ": no such file");
  if (detail::torchscript_layout(path)) {
    // A LibTorch archive (torch::save / torch.jit.save) is not a torch.save checkpoint; one of our
    // own .ckpt files given a .pt name is the likely case: say so rather than what its pickle names.
    bool ours = false;
    try {
      (void)train::load_checkpoint(path);
      ours = true;
    } catch (const Error&) {
    }
    if (ours)
      throw CheckpointError(where + ": this is a libreyolo checkpoint (the .ckpt format `libreyolo train` writes) with a " +
                            path.extension().string() + " name, not the original's torch.save .pt; give it a .ckpt name "
                            "(mv " + path.string() + " " + std::filesystem::path(path).replace_extension(".ckpt").string() + ")");
    throw CheckpointError(where + ": this is a TorchScript/LibTorch archive (torch.jit.save or torch::save), not the "
                                  "original's torch.save checkpoint");
  }
  std::vector<std::string> warnings;
  PtReadOptions opt;
  opt.warnings = &warnings;
  const PyValue root = read_pt(path.string(), opt);
  for (const auto& w : warnings) log::warn(where, ": ", w);
  if (!root.is_dict())
    throw CheckpointError(where + ": the file holds a " + std::string(root.kind_name()) +
                          ", not the original's checkpoint dict (model, model_family, size, names, ...)");
  if (const PyValue* sv = root.find("schema_version")) {
    if (!sv->is_string())
      throw CheckpointError(where + ": 'schema_version' is a " + std::string(sv->kind_name()) + ", not a version string like '" +
                            kOriginalSchemaVersion + "'");
    const std::string v = sv->as_string();
    if (v != kOriginalSchemaVersion) {
      // 1.x: the same layout with additions (the original's loader reads it); anything else is not.
      if (v.rfind("1.", 0) != 0)
        throw CheckpointError(where + ": schema_version '" + v + "' is not supported: this build reads the original's schema " +
                              kOriginalSchemaVersion + " (re-save it with an original that writes schema 1.x)");
      log::warn(where, ": schema_version '", v, "' differs from the ", kOriginalSchemaVersion,
                " this build knows; reading it as ", kOriginalSchemaVersion, " (entries it does not know are ignored)");
    }
  }
  const std::string family = detail::family_from_original(detail::text_field(root, "model_family", where));
  const std::string size = detail::text_field(root, "size", where);
  const std::string task = root.find("task") ? detail::text_field(root, "task", where) : "detect";
  const auto names = detail::names_field(root, where);
  if (const PyValue* nc = root.find("nc"); nc && nc->is_int() && nc->as_int() != static_cast<int64_t>(names.size()))
    throw CheckpointError(where + ": nc = " + std::to_string(nc->as_int()) + " but 'names' lists " +
                          std::to_string(names.size()) + " classes");
  const StateDict sd = state_dict(root, "model", where);
  if (sd.empty()) throw CheckpointError(where + ": its 'model' state dict is empty");

  train::Checkpoint ck;
  ck.source = path;
  for (const auto& [name, t0] : sd) {
    torch::Tensor t = t0;
    // The DETR decoders' query anchors (a `decoder.anchors` buffer of the fixed eval size: D-FINE, DEIM,
    // DEIMv2, EC, RT-DETRv2/v4) hold +inf at the invalid cells in the original; ours hold a large finite
    // value there (nn/detr/decoder_core.hpp register_eval_anchors, kInvalidAnchor 1e4: sigmoid gives 1
    // either way; a checkpoint may not hold non-finite values), so +inf there is read as that value.
    static constexpr double kInvalidAnchor = 1e4;
    const std::string_view tail = "anchors";
    if (t.is_floating_point() && name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      t = torch::where(torch::isposinf(t), torch::full_like(t, kInvalidAnchor), t);
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>())
      throw CheckpointError(where + ": tensor 'model." + name + "' holds NaN or infinite values");
    ck.tensors["model." + name] = t.is_floating_point() ? t.to(torch::kFloat32).contiguous() : t.contiguous();
  }
  nlohmann::json cfg = nlohmann::json::object();
  if (const PyValue* v = root.find("imgsz"); v && v->is_int()) cfg["imgsz"] = v->as_int();
  cfg["task"] = task;
  // The original validates and predicts with the DETR line by stretching the image to a square
  // (validation/preprocessors.py: RTDETR-, RTDETRv2-, DFINE-, DEIM-, DEIMv2-, EC-, RFDETRValPreprocessor); `val` and
  // `predict` of its checkpoint read it in that geometry unless val_resize= is given (model.hpp).
  if (detail::validates_stretched(family)) cfg["val_resize"] = "stretch";
  nlohmann::json source = {{"format", "original .pt"}, {"path", path.string()}, {"task", task}};
  for (const char* k : {"epoch", "best_mAP50_95", "best_mAP50", "ema_updates"})
    if (auto j = detail::number_or_null(root.find(k)); !j.is_null()) source[k] = j;
  if (const PyValue* v = root.find("libreyolo_version"); v && v->is_string()) source["libreyolo_version"] = v->as_string();
  ck.meta = {{"format", kTrainerCheckpointFormat},
             {"family_name", family},
             {"model", family + size},
             {"family", {{"names", names}, {"nc", names.size()}, {"size", size}}},
             {"config", cfg},
             {"path", path.string()},
             {"original", source}};
  log::info(where, ": the original's ", family + size, " checkpoint (", task, ", ", names.size(), " classes, ",
            sd.size(), " tensors", root.find("is_ema_weights") && root.find("is_ema_weights")->is_bool() &&
                                           root.find("is_ema_weights")->as_bool() ? ", EMA weights" : "", ")");
  return ck;
}

LIBREYOLO_INLINE train::Checkpoint load_any_checkpoint(const std::filesystem::path& path) {
  train::Checkpoint ck = is_original_checkpoint_path(path) ? checkpoint_from_original(path) : train::load_checkpoint(path);
  detail::check_config_ints(ck, "checkpoint " + path.string());
  return ck;
}

LIBREYOLO_INLINE void write_original_checkpoint(const std::filesystem::path& out, const train::Checkpoint& ck,
                                                const torch::nn::Module& net, const std::string& task,
                                                const std::string& version) {
  const auto& fam = ck.meta.at("family");
  const auto names = fam.at("names").get<std::vector<std::string>>();
  PyValue names_dict = PyValue::dict();
  for (size_t i = 0; i < names.size(); ++i) names_dict.set(PyValue::integer(static_cast<int64_t>(i)), PyValue::string(names[i]));
  const PyValue sd = PyValue::state_dict(module_state_dict(net));
  const bool ema = ck.tensors.count("ema.__present__") > 0;
  PyValue root = PyValue::dict();
  root.set("model", sd);
  root.set("schema_version", PyValue::string(kOriginalSchemaVersion));
  root.set("libreyolo_version", PyValue::string(version));
  root.set("model_family", PyValue::string(detail::family_to_original(ck.meta.at("family_name").get<std::string>())));
  root.set("size", PyValue::string(fam.at("size").get<std::string>()));
  root.set("task", PyValue::string(task));
  root.set("nc", PyValue::integer(static_cast<int64_t>(names.size())));
  root.set("names", names_dict);
  const auto& cfg = ck.meta.contains("config") ? ck.meta.at("config") : nlohmann::json::object();
  root.set("imgsz", PyValue::integer(cfg.value("imgsz", 640)));
  if (ck.meta.contains("state")) {
    const auto& st = ck.meta.at("state");
    root.set("epoch", PyValue::integer(st.value("epoch", 0)));
    if (st.contains("best_fitness")) root.set("best_metric", PyValue::real(st.at("best_fitness").get<double>()));
  }
  root.set("is_ema_weights", PyValue::boolean(ema));
  if (ema) {
    root.set("ema", sd);
    const std::string key = "ema";
    if (ck.meta.contains(key) && ck.meta.at(key).contains("updates"))
      root.set("ema_updates", PyValue::integer(ck.meta.at(key).at("updates").get<int64_t>()));
  }
  write_pt(out.string(), root);
}

}  // namespace libreyolo::io
