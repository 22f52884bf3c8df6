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

}  // namespace detail

LIBREYOLO_INLINE train::Checkpoint checkpoint_from_original(const std::filesystem::path& path) {
  const std::string where = "checkpoint " + path.string();
  if (!std::filesystem::is_regular_file(path)) throw CheckpointError(where + ": no such file");
  std::vector<std::string> warnings;
  PtReadOptions opt;
  opt.warnings = &warnings;
  const PyValue root = read_pt(path.string(), opt);
  for (const auto& w : warnings) log::warn(where, ": ", w);
  if (!root.is_dict())
    throw CheckpointError(where + ": the file holds a " + std::string(root.kind_name()) +
                          ", not the original's checkpoint dict (model, model_family, size, names, ...)");
  const std::string family = detail::text_field(root, "model_family", where);
  const std::string size = detail::text_field(root, "size", where);
  const std::string task = root.find("task") ? detail::text_field(root, "task", where) : "detect";
  const auto names = detail::names_field(root, where);
  if (const PyValue* nc = root.find("nc"); nc && nc->is_int() && nc->as_int() != static_cast<int64_t>(names.size()))
    throw CheckpointError(where + ": nc = " + std::to_string(nc->as_int()) + " but 'names' lists " +
                          std::to_string(names.size()) + " classes");
  const StateDict sd = state_dict(root, "model", where);
  if (sd.empty()) throw CheckpointError(where + ": its 'model' state dict is empty");

  train::Checkpoint ck;
  for (const auto& [name, t] : sd) {
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>())
      throw CheckpointError(where + ": tensor 'model." + name + "' holds NaN or infinite values");
    ck.tensors["model." + name] = t.is_floating_point() ? t.to(torch::kFloat32).contiguous() : t.contiguous();
  }
  nlohmann::json cfg = nlohmann::json::object();
  if (const PyValue* v = root.find("imgsz"); v && v->is_int()) cfg["imgsz"] = v->as_int();
  cfg["task"] = task;
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
  log::info(where, ": the original's ", family, "-", size, " checkpoint (", task, ", ", names.size(), " classes, ",
            sd.size(), " tensors", root.find("is_ema_weights") && root.find("is_ema_weights")->is_bool() &&
                                           root.find("is_ema_weights")->as_bool() ? ", EMA weights" : "", ")");
  return ck;
}

LIBREYOLO_INLINE train::Checkpoint load_any_checkpoint(const std::filesystem::path& path) {
  if (is_original_checkpoint_path(path)) return checkpoint_from_original(path);
  return train::load_checkpoint(path);
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
  root.set("model_family", PyValue::string(ck.meta.at("family_name").get<std::string>()));
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
