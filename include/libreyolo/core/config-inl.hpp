#pragma once
// Definitions of config.hpp (core/api.hpp): included by config.hpp when header-only, compiled once otherwise.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/yaml_keys.hpp>

#include <map>

namespace libreyolo {

LIBREYOLO_INLINE bool cudnn_autotune(const TrainConfig& c, std::string* why) {
  if (c.deterministic) return false;
  if (c.multi_scale && c.cudnn_benchmark && !c.is_explicit("cudnn_benchmark")) {
    if (why)
      *why = "multi_scale=true: cuDNN autotuning is off (it would re-tune every layer for each new input size); "
             "give cudnn_benchmark=true to keep it";
    return false;
  }
  return c.cudnn_benchmark;
}

}  // namespace libreyolo

namespace libreyolo::config_detail {

LIBREYOLO_INLINE std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

LIBREYOLO_INLINE std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

[[noreturn]] LIBREYOLO_INLINE void fail(const std::string& where, const std::string& key, const std::string& value,
                                        const std::string& allowed) {
  throw ConfigError(where + key + "=" + value + ": invalid value; allowed: " + allowed);
}

LIBREYOLO_INLINE bool parse_bool(const std::string& where, const std::string& key, const std::string& v) {
  auto s = lower(v);
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  fail(where, key, v, "true or false");
}

LIBREYOLO_INLINE long long parse_int(const std::string& where, const std::string& key, const std::string& v,
                                     const std::string& allowed) {
  try {
    size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  fail(where, key, v, "an integer (" + allowed + ")");
}

LIBREYOLO_INLINE double parse_double(const std::string& where, const std::string& key, const std::string& v,
                                     const std::string& allowed) {
  try {
    size_t pos = 0;
    double x = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  fail(where, key, v, "a number (" + allowed + ")");
}

LIBREYOLO_INLINE Field flag(std::string name, bool TrainConfig::*m, std::string help) {
  return Field{name, std::move(help), "true or false",
               [=](TrainConfig& c, const std::string& w, const std::string& v) { c.*m = parse_bool(w, name, v); },
               [=](const TrainConfig& c) { return nlohmann::json(c.*m); }};
}

LIBREYOLO_INLINE Field text(std::string name, std::string TrainConfig::*m, std::string help,
                            std::vector<std::string> choices,
                            std::function<std::string(const std::string&)> canon) {
  std::string allowed = "any text";
  if (!choices.empty()) {
    allowed.clear();
    for (auto& c : choices) allowed += (allowed.empty() ? "" : " | ") + c;
  }
  return Field{name, std::move(help), allowed,
               [=](TrainConfig& c, const std::string& w, const std::string& v) {
                 std::string s = canon ? canon(v) : v;
                 if (!choices.empty()) {
                   bool ok = false;
                   for (auto& ch : choices) ok = ok || lower(s) == ch;
                   if (!ok) fail(w, name, v, allowed);
                 }
                 c.*m = s;
               },
               [=](const TrainConfig& c) { return nlohmann::json(c.*m); }};
}

LIBREYOLO_INLINE std::string canon_amp_dtype(const std::string& v) {
  auto s = lower(trim(v));
  if (s == "fp16" || s == "half" || s == "float16") return "float16";
  if (s == "bf16" || s == "bfloat16") return "bfloat16";
  return v;
}

LIBREYOLO_INLINE std::string canon_optimizer(const std::string& v) {
  auto s = lower(v);
  if (s == "sgd") return "SGD";
  if (s == "adamw") return "AdamW";
  return v;
}

LIBREYOLO_INLINE std::string canon_cache(const std::string& v) {
  auto s = lower(v);
  if (s == "false" || s == "none" || s == "" || s == "off") return "off";
  if (s == "true") return "ram";
  return s;
}

}  // namespace libreyolo::config_detail

namespace libreyolo {

LIBREYOLO_INLINE std::vector<std::string> device_list(const std::string& spec) {
  std::vector<std::string> items;
  size_t from = 0;
  for (size_t at; (at = spec.find(',', from)) != std::string::npos; from = at + 1) items.push_back(spec.substr(from, at - from));
  items.push_back(spec.substr(from));
  return items;
}

}  // namespace libreyolo

namespace libreyolo::config_detail {

LIBREYOLO_INLINE void check_device(const std::string& w, const std::string& v) {
  auto s = lower(v);
  if (s.empty() || s == "cpu" || s == "cuda") return;
  auto digits = [](const std::string& t) {
    return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (s.rfind("cuda:", 0) == 0 && digits(s.substr(5))) return;
  for (const auto& item : device_list(s))
    if (!digits(item)) fail(w, "device", v, "cpu | cuda | cuda:N | N | N,M,... (GPU indices)");
}

LIBREYOLO_INLINE const std::vector<Field>& fields() {
  static const std::vector<Field> f = [] {
    constexpr double inf = std::numeric_limits<double>::infinity();
    std::vector<Field> v;
    v.push_back(text("model", &TrainConfig::model, "family and size (see the model list below)"));
    v.push_back(text("task", &TrainConfig::task, "detect | classify | semantic | point: a task of a family that trains several (empty = the model name's)",
                     {}, [](const std::string& s) { return lower(trim(s)); }));
    v.push_back(text("data", &TrainConfig::data, "dataset folder (classify) or dataset YAML (detect)"));
    v.push_back(text("weights", &TrainConfig::weights, "initial weights from a checkpoint of the same family"));
    v.push_back(num("epochs", &TrainConfig::epochs, 1, 1e6, "number of epochs"));
    v.push_back(Field{"batch", "global batch size; -1 = auto (largest power of two in ~60% of VRAM)",
                      "-1 or an integer >= 1",
                      [](TrainConfig& c, const std::string& w, const std::string& val) {
                        auto x = parse_int(w, "batch", val, "-1 or >= 1");
                        if (x != -1 && (x < 1 || x > std::numeric_limits<int>::max()))
                          fail(w, "batch", val, "-1 or an integer >= 1 (at most " + std::to_string(std::numeric_limits<int>::max()) + ")");
                        c.batch = static_cast<int>(x);
                      },
                      [](const TrainConfig& c) { return nlohmann::json(c.batch); }});
    v.push_back(num("imgsz", &TrainConfig::imgsz, 32, 8192, "training image size (pixels)"));
    v.push_back(text("optimizer", &TrainConfig::optimizer, "optimizer", {"sgd", "adamw"}, canon_optimizer));
    v.push_back(num("lr0", &TrainConfig::lr0, 0, 10, "initial learning rate"));
    v.push_back(num("momentum", &TrainConfig::momentum, 0, 1, "SGD momentum / AdamW beta1"));
    v.push_back(flag("nesterov", &TrainConfig::nesterov, "Nesterov momentum (SGD)"));
    v.push_back(num("weight_decay", &TrainConfig::weight_decay, 0, 1, "weight decay (not on norm weights, biases)"));
    v.push_back(text("scheduler", &TrainConfig::scheduler, "LR schedule",
                     {"linear", "cos", "warmcos", "yoloxwarmcos", "flat_cosine", "deimv2_flat_cosine", "step", "constant"},
                     [](const std::string& s) { return lower(s); }));
    v.push_back(num("warmup_epochs", &TrainConfig::warmup_epochs, 0, inf, "warm-up epochs"));
    v.push_back(num("warmup_lr_start", &TrainConfig::warmup_lr_start, 0, 10, "LR at the start of warm-up (capped at lr0)"));
    v.push_back(num("min_lr_ratio", &TrainConfig::min_lr_ratio, 0, 1, "final LR as a fraction of lr0"));
    v.push_back(num("no_aug_epochs", &TrainConfig::no_aug_epochs, 0, 1e6, "last epochs without mosaic"));
    v.push_back(num("flat_epochs", &TrainConfig::flat_epochs, -1, 1e6,
                    "scheduler=deimv2_flat_cosine: epochs at lr0 after warm-up (-1: up to the no-aug epochs)"));
    v.push_back(num("lr_drop", &TrainConfig::lr_drop, 0, 1e6,
                    "scheduler=step: the epoch from which the LR is lr0 x 0.1 (RF-DETR's lr_drop)"));
    v.push_back(flag("ema", &TrainConfig::ema, "keep an exponential moving average of the weights"));
    v.push_back(num("ema_decay", &TrainConfig::ema_decay, 0, 1, "EMA decay"));
    v.push_back(num("ema_tau", &TrainConfig::ema_tau, 1, inf, "EMA ramp: decay * (1 - exp(-updates / tau))"));
    v.push_back(num("ema_restart_decay", &TrainConfig::ema_restart_decay, 0, 1,
                    "constant EMA decay (no ramp) from the first of the last no_aug_epochs epochs on (0 = off)"));
    v.push_back(num("workers", &TrainConfig::workers, 0, 256, "data loader threads (0 = load on the training thread)"));
    v.push_back(num("nproc", &TrainConfig::nproc, 0, 1024, "data-parallel processes to launch on this host (>= 2; batch is global)"));
    v.push_back(flag("sync_bn", &TrainConfig::sync_bn, "data-parallel: BatchNorm statistics over the global batch of all ranks"));
    v.push_back(text("cache", &TrainConfig::cache, "cache decoded images", {"off", "ram", "disk"}, canon_cache));
    v.push_back(num("nbs", &TrainConfig::nbs, 0, 1e6, "nominal batch size: accumulate round(nbs / batch) batches (0 = off)"));
    v.push_back(num("clip_grad_norm", &TrainConfig::clip_grad_norm, 0, inf, "max gradient norm (0 = off)"));
    v.push_back(num("eval_interval", &TrainConfig::eval_interval, 1, 1e6, "validate every N epochs"));
    v.push_back(flag("val", &TrainConfig::val, "validate during training"));
    v.push_back(flag("multi_scale", &TrainConfig::multi_scale, "random image size per batch"));
    v.push_back(text("train_resize", &TrainConfig::train_resize,
                     "the last resize of the D-FINE line's training pipeline (dfine, deim, deimv2, rtdetrv4, ec): letterbox "
                     "(as validation) or stretch to a square (the originals'); the other pipelines letterbox only",
                     {"letterbox", "stretch"}, [](const std::string& s) { return lower(s); }));
    v.push_back(text("val_resize", &TrainConfig::val_resize,
                     "the resize of validation and predict inputs: letterbox, stretch to a square (the originals' DETR "
                     "validation: rtdetr, rtdetrv2, dfine, deim, deimv2, rtdetrv4, ec), or auto (train_resize's)",
                     {"auto", "letterbox", "stretch"}, [](const std::string& s) { return lower(s); }));
    v.push_back(text("hsv_mode", &TrainConfig::hsv_mode, "HSV jitter: multiply (gains 0..1) or add (offsets in OpenCV units)",
                     {"multiply", "add"}, [](const std::string& s) { return lower(s); }));
    v.push_back(num("hsv_h", &TrainConfig::hsv_h, 0, 180, "hue jitter (multiply: 0..1; add: hue units, 0..180)"));
    v.push_back(num("hsv_s", &TrainConfig::hsv_s, 0, 255, "saturation jitter (multiply: 0..1; add: 0..255)"));
    v.push_back(num("hsv_v", &TrainConfig::hsv_v, 0, 255, "value jitter (multiply: 0..1; add: 0..255)"));
    v.push_back(num("hsv_prob", &TrainConfig::hsv_prob, 0, 1, "probability of the HSV jitter"));
    v.push_back(flag("affine", &TrainConfig::affine, "random affine (degrees/translate/scale/shear); false: mosaic resized to imgsz"));
    v.push_back(num("degrees", &TrainConfig::degrees, 0, 180, "rotation (degrees)"));
    v.push_back(num("translate", &TrainConfig::translate, 0, 1, "translation fraction"));
    v.push_back(num("scale", &TrainConfig::scale, 0, 1, "scale gain"));
    v.push_back(num("shear", &TrainConfig::shear, 0, 90, "shear (degrees)"));
    v.push_back(num("perspective", &TrainConfig::perspective, 0, 0.001, "perspective"));
    v.push_back(num("flipud", &TrainConfig::flipud, 0, 1, "vertical flip probability"));
    v.push_back(num("fliplr", &TrainConfig::fliplr, 0, 1, "horizontal flip probability"));
    v.push_back(num("mosaic", &TrainConfig::mosaic, 0, 1, "mosaic probability"));
    v.push_back(num("mixup", &TrainConfig::mixup, 0, 1, "mixup probability"));
    v.push_back(Field{"amp", "mixed precision (default: the family's)", "true | false | auto",
                      [](TrainConfig& c, const std::string& w, const std::string& val) {
                        auto s = lower(trim(val));
                        if (s == "auto" || s == "null" || s == "~" || s.empty()) c.amp.reset();
                        else c.amp = parse_bool(w, "amp", val);
                      },
                      [](const TrainConfig& c) { return c.amp ? nlohmann::json(*c.amp) : nlohmann::json(); }});
    v.push_back(text("amp_dtype", &TrainConfig::amp_dtype, "autocast dtype",
                     {"float16", "bfloat16", "fp16", "bf16"}, canon_amp_dtype));
    // cuda_graph: false | true (the network's forward/backward) | step (the whole training step).
    v.push_back(Field{"cuda_graph", "capture in CUDA graphs: true = the network's forward/backward, step = the whole "
                      "training step (forward, loss, backward, clip, optimizer, scaler, EMA)", "true | false | step",
                      [](TrainConfig& c, const std::string& w, const std::string& v) {
                        const auto s = lower(trim(v));
                        if (s == "step") {
                          c.cuda_graph = GraphMode::step;
                          return;
                        }
                        if (s != "true" && s != "1" && s != "yes" && s != "on" && s != "false" && s != "0" &&
                            s != "no" && s != "off")
                          fail(w, "cuda_graph", v, "true | false | step");
                        c.cuda_graph = parse_bool(w, "cuda_graph", v) ? GraphMode::network : GraphMode::off;
                      },
                      [](const TrainConfig& c) {
                        return c.cuda_graph == GraphMode::step ? nlohmann::json("step")
                                                               : nlohmann::json(c.cuda_graph == GraphMode::network);
                      }});
    v.push_back(num("cuda_graph_max_graphs", &TrainConfig::cuda_graph_max_graphs, 1, 64,
                    "cuda_graph=step: step graphs kept at once, one per shape key (multi_scale, last batch)"));
    v.push_back(num("cuda_graph_warmup", &TrainConfig::cuda_graph_warmup, 1, 1e6, "times a shape is seen before capture"));
    v.push_back(flag("channels_last", &TrainConfig::channels_last, "NHWC weights and images on CUDA"));
    v.push_back(flag("cudnn_benchmark", &TrainConfig::cudnn_benchmark, "cuDNN autotuning (default off, as in the original; never with deterministic=true, nor with multi_scale=true unless given)"));
    v.push_back(text("cudnn_heuristic", &TrainConfig::cudnn_heuristic,
                     "cuDNN's engine ranking without autotuning: instant (PyTorch's default) or b (heuristic mode B: "
                     "faster kernels, same choice every run, but lower mAP in our runs; docs/performance.md)",
                     {"instant", "b"}, [](const std::string& v) { return lower(trim(v)); }));
    v.push_back(flag("profile", &TrainConfig::profile, "profile a window of training steps"));
    v.push_back(num("profile_warmup", &TrainConfig::profile_warmup, 0, 1e6, "profiler warm-up steps (discarded)"));
    v.push_back(num("profile_steps", &TrainConfig::profile_steps, 2, 1e6, "profiler measured steps"));
    v.push_back(num("profile_trace_steps", &TrainConfig::profile_trace_steps, 0, 1e6,
                    "synchronised steps traced for kernels (the last ones; 0 = all)"));
    v.push_back(flag("profile_stop", &TrainConfig::profile_stop, "stop training once the profile window is written"));
    v.push_back(Field{"device", "cpu | cuda | cuda:N | N | N,M,... (empty = cuda when available)",
                      "cpu | cuda | cuda:N | N | N,M,...",
                      [](TrainConfig& c, const std::string& w, const std::string& val) {
                        check_device(w, val);
                        c.device = lower(trim(val));
                      },
                      [](const TrainConfig& c) { return nlohmann::json(c.device); }});
    v.push_back(num("seed", &TrainConfig::seed, 0, 9.2e18, "random seed"));
    v.push_back(flag("deterministic", &TrainConfig::deterministic, "deterministic cuDNN algorithms"));
    v.push_back(text("project", &TrainConfig::project, "parent folder of the run directory"));
    v.push_back(text("name", &TrainConfig::name, "run name (run directory = project/name)"));
    v.push_back(flag("exist_ok", &TrainConfig::exist_ok, "allow reusing an existing run directory"));
    v.push_back(flag("resume", &TrainConfig::resume, "resume from project/name/weights/last.ckpt"));
    v.push_back(num("max_steps", &TrainConfig::max_steps, 0, 9.2e18, "stop after N optimizer steps (0 = off)"));
    v.push_back(num("progress_interval", &TrainConfig::progress_interval, 0, 1e6,
                    "seconds between plain progress lines when stderr is not a terminal (0 = none; a terminal "
                    "gets one line updated in place)"));
    v.push_back(flag("plots", &TrainConfig::plots, "write results.png, labels.png, val_batch0_*.jpg, confusion_matrix.png, "
                     "PR_curve.png (needs cairo at build time)"));
    v.push_back(flag("save_txt", &TrainConfig::save_txt, "predict: write labels/<image>.txt (class cx cy w h conf, normalised)"));
    return v;
  }();
  return f;
}

LIBREYOLO_INLINE const Field* find_field(std::string_view key) {
  for (auto& f : fields())
    if (f.name == key) return &f;
  return nullptr;
}


LIBREYOLO_INLINE std::string known_keys() {
  std::string s;
  for (auto& f : fields()) s += (s.empty() ? "" : ", ") + f.name;
  return s + ", cfg";
}

}  // namespace libreyolo::config_detail

namespace libreyolo {

LIBREYOLO_INLINE void set_key(TrainConfig& c, const std::string& key, const std::string& value,
                              const std::string& where, bool mark_explicit) {
  auto* f = config_detail::find_field(key);
  if (!f) throw ConfigError(where + "unknown key '" + utf8::escaped(key) + "'; known keys: " + config_detail::known_keys());
  if (auto why = utf8::problem(value); !why.empty())  // the config is saved as JSON (args.json, checkpoints)
    throw ConfigError(where + key + ": the value " + why + "; allowed: UTF-8 text");
  // An empty model= or name= from the user is a slip (a shell variable that was not set), not a request
  // for the default model or an unnamed run.
  if (mark_explicit && (key == "model" || key == "name") && config_detail::trim(value).empty())
    throw ConfigError(where + key + "=: empty value; allowed: " +
                      (key == "model" ? std::string("a model name (see `libreyolo train --help`) or a checkpoint file")
                                      : std::string("a run name (the run directory is project/name)")) +
                      "; leave the key out for the default");
  f->set(c, where, config_detail::trim(value));
  if (mark_explicit) c.explicit_keys.insert(key);
}

LIBREYOLO_INLINE void apply_yaml(TrainConfig& c, const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) throw ConfigError("cfg=" + file.string() + ": file not found");
  if (std::filesystem::is_directory(file)) throw ConfigError("cfg=" + file.string() + ": is a directory; give a YAML file");
  YAML::Node root;
  try {
    root = YAML::LoadFile(file.string());
  } catch (const YAML::Exception& e) {
    throw ConfigError(file.string() + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) throw ConfigError(file.string() + ": expected a mapping of key: value");
  config_detail::refuse_repeated_yaml_keys<ConfigError>(root, file.string());
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string where = file.string() + ":" + std::to_string(it->first.Mark().line + 1) + ": ";
    if (!it->first.IsScalar()) throw ConfigError(where + "a key must be a plain name, got a list or mapping");
    auto key = it->first.Scalar();
    if (key == "cfg") throw ConfigError(where + "'cfg' cannot be nested inside a config file");
    if (!it->second.IsScalar() && !it->second.IsNull())
      throw ConfigError(where + key + ": expected a single value, got a list or mapping");
    set_key(c, key, it->second.IsNull() ? "" : it->second.Scalar(), where);
  }
}

LIBREYOLO_INLINE TrainConfig parse_args(const std::vector<std::string>& args, TrainConfig base) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (auto& a : args) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("argument '" + a + "': expected key=value (known keys: " + config_detail::known_keys() + ")");
    kv.emplace_back(config_detail::trim(a.substr(0, eq)), a.substr(eq + 1));
  }
  for (auto& [k, v] : kv)
    if (k == "cfg") apply_yaml(base, v);
  for (auto& [k, v] : kv)
    if (k != "cfg") set_key(base, k, v);
  return base;
}

LIBREYOLO_INLINE nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (auto& f : config_detail::fields()) j[f.name] = f.get(c);
  return j;
}

LIBREYOLO_INLINE TrainConfig from_json(const nlohmann::json& j) {
  TrainConfig c;
  for (auto& [k, v] : j.items()) {
    std::string s = v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump();
    set_key(c, k, s, "checkpoint config: ", false);
  }
  return c;
}

LIBREYOLO_INLINE std::string config_help() {
  TrainConfig d;
  std::string s;
  for (auto& f : config_detail::fields()) {
    auto def = f.get(d).dump();
    s += "  " + f.name + std::string(f.name.size() < 18 ? 18 - f.name.size() : 1, ' ') + f.help +
         " [default " + (def == "null" ? "family" : def) + "; " + f.allowed + "]\n";
  }
  return s;
}

}  // namespace libreyolo
