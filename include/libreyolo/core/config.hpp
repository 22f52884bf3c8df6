#pragma once
// TrainConfig: every hyperparameter of the training loop (SPEC §3) with its default, plus the run
// settings (device, seed, run directory) and the three levers (amp, cuda_graph, profile).
//
// Values come from `key=value` arguments (Ultralytics style) and from a YAML file (`cfg=FILE`); later
// sources override earlier ones. Which keys the user set explicitly is remembered, so a family's
// overrides (family_traits<F>::overrides) apply only to keys the user left alone.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/utf8.hpp>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

// What a CUDA graph captures in training (the key cuda_graph, SPEC §2.3): nothing; the network's forward
// and backward (the family's capture region); or the whole training step (forward, loss, backward, clip,
// optimizer, scaler, EMA). The trainer's capture policy type follows it (capture::CudaGraph<Scope>).
enum class GraphMode { off, network, step };
// As the key writes it: "false", "true", "step".
constexpr std::string_view to_string(GraphMode m) {
  return m == GraphMode::step ? "step" : m == GraphMode::network ? "true" : "false";
}

struct TrainConfig {
  // what is trained, on what
  std::string model;                // family + size (families/list.hpp); "" = the first listed family's first size
  std::string task;                 // "" = the model name's task; else detect | classify | semantic | point
  std::string data;                 // dataset: folder (classify) or dataset YAML (detect)
  std::string weights;              // initial weights: a libreyolo checkpoint of the same family
  // loop (SPEC §3)
  int epochs = 300;
  int batch = 16;                   // global; -1 = largest power of two fitting ~60% of VRAM
  int imgsz = 640;
  std::string optimizer = "SGD";    // SGD | AdamW
  double lr0 = 0.01;
  double momentum = 0.937;
  bool nesterov = true;
  double weight_decay = 5e-4;
  std::string scheduler = "yoloxwarmcos";  // train/schedule.hpp's kinds
  double warmup_epochs = 5;
  double warmup_lr_start = 0.0;     // warm-up starts here (capped at lr0), as the original's schedulers do
  double min_lr_ratio = 0.05;
  int no_aug_epochs = 15;
  int flat_epochs = -1;             // scheduler=deimv2_flat_cosine only: where its flat phase ends (-1: at the no-aug epochs)
  int lr_drop = 100;                // scheduler=step only: the epoch from which the LR is lr0 x 0.1 (RF-DETR's lr_drop)
  bool ema = true;
  double ema_decay = 0.9998;
  double ema_tau = 2000;
  double ema_restart_decay = 0;     // > 0: a constant EMA decay from the first no-aug epoch on (D-FINE's "EMA restart")
  int workers = 4;
  std::string cache = "off";        // off | ram | disk
  int nbs = 0;                      // nominal batch: accumulate round(nbs / batch) micro-batches; 0 = off (the original's default)
  double clip_grad_norm = 0.0;      // 0 = off
  int eval_interval = 1;
  bool val = true;
  bool multi_scale = false;
  // augmentation (Ultralytics-style defaults; families override them with the original's recipe)
  std::string train_resize = "letterbox";  // the D-FINE line's last training resize: letterbox, or stretch to a square (the originals')
  std::string val_resize = "auto";  // validation and predict resize: letterbox, stretch to a square, or auto (= train_resize)
  std::string hsv_mode = "multiply";  // multiply: gains are fractions (Ultralytics); add: integer offsets (YOLOX)
  double hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  double hsv_prob = 1.0;              // probability that an image gets the HSV jitter at all
  bool affine = true;                 // random affine after mosaic/letterbox; false: the mosaic is resized to imgsz
  double degrees = 0.0, translate = 0.1, scale = 0.5, shear = 0.0, perspective = 0.0;
  double flipud = 0.0, fliplr = 0.5, mosaic = 1.0, mixup = 0.0;
  // the three levers
  std::optional<bool> amp;          // unset = the family's default
  std::string amp_dtype = "float16";  // float16 | bfloat16 (fp16 / bf16 accepted)
  GraphMode cuda_graph = GraphMode::off;  // cuda_graph=false | true (the network) | step (the whole training step)
  int cuda_graph_max_graphs = 4;    // cuda_graph=step: step graphs cached at once (one per shape key)
  int nproc = 0;                    // >= 2: launch that many data-parallel processes on this host
  bool sync_bn = false;             // data-parallel: BatchNorm statistics over the global batch (SyncBatchNorm)
  int cuda_graph_warmup = 3;        // times a shape is seen before it is captured
  bool channels_last = true;        // NHWC weights and images on CUDA (cuDNN's Tensor-Core layout)
  bool cudnn_benchmark = false;     // cuDNN autotuning (off, as in the original; see cudnn_autotune below)
  std::string cudnn_heuristic = "instant";  // instant | b: cuDNN's engine ranking without autotuning (core/cudnn.hpp)
  bool profile = false;
  int profile_warmup = 5;
  int profile_steps = 20;
  int profile_trace_steps = 2;     // synchronised steps run under the kernel tracer (the last ones; 0 = all)
  bool profile_stop = false;       // stop the run once the profile is written (profile run)
  // run
  std::string device;               // "" = cuda when available, else cpu; cpu | cuda | cuda:N | N
  int64_t seed = 0;
  bool deterministic = false;
  std::string project = "runs/train";
  std::string name = "exp";
  bool exist_ok = false;
  bool resume = false;
  int64_t max_steps = 0;            // stop after this many optimizer steps (0 = no limit; benchmarks)
  double progress_interval = 30;    // seconds between plain progress lines when stderr is not a terminal (0 = none)
  bool plots = true;                // results.png, labels.png, validation images, confusion matrix, PR curve
  bool save_txt = false;            // predict: YOLO-format label lines with confidences, one .txt per image

  std::set<std::string> explicit_keys;  // keys the user set (CLI or YAML)

  bool is_explicit(const std::string& key) const { return explicit_keys.count(key) > 0; }
  // Validation and predict stretch their inputs to imgsz x imgsz (val_resize=stretch, or auto after a
  // train_resize=stretch run) instead of letterboxing them.
  bool val_stretch() const { return val_resize == "stretch" || (val_resize == "auto" && train_resize == "stretch"); }
  int accumulate() const {
    return batch > 0 && nbs > 0 ? std::max(1, static_cast<int>(std::lround(double(nbs) / double(batch)))) : 1;
  }
  std::filesystem::path run_dir() const { return std::filesystem::path(project) / name; }
};

// Whether cuDNN autotunes convolutions (cudnn_benchmark) in a run. Off by default, as in the original
// (it never sets torch.backends.cudnn.benchmark): on the H200, YOLOv9-t's 10-epoch fidelity run reached
// mAP50-95 0.545 without autotuning, identical in eager and cuda_graph=true runs and in a deterministic
// one, and 0.35-0.50 with it (the chosen algorithms vary from run to run; benchmarks/RESULTS.md,
// session 11). When asked for, autotuning benchmarks every layer's algorithms once per input shape,
// which costs seconds per step while multi_scale=true keeps drawing new sizes (D-FINE-n at 0.13 steps/s
// in its first epoch on an H200): multi_scale=true turns it off unless cudnn_benchmark was given
// explicitly; `why` then says so.
LIBREYOLO_INLINE bool cudnn_autotune(const TrainConfig& c, std::string* why = nullptr);

namespace config_detail {

LIBREYOLO_INLINE std::string lower(std::string s);
LIBREYOLO_INLINE std::string trim(const std::string& s);

[[noreturn]] LIBREYOLO_INLINE void fail(const std::string& where, const std::string& key, const std::string& value,
                                        const std::string& allowed);

LIBREYOLO_INLINE bool parse_bool(const std::string& where, const std::string& key, const std::string& v);
LIBREYOLO_INLINE long long parse_int(const std::string& where, const std::string& key, const std::string& v,
                                     const std::string& allowed);
LIBREYOLO_INLINE double parse_double(const std::string& where, const std::string& key, const std::string& v,
                                     const std::string& allowed);

// One settable key: its name, help text, what values are allowed, and how to set/get it.
struct Field {
  std::string name;
  std::string help;
  std::string allowed;
  std::function<void(TrainConfig&, const std::string& where, const std::string& value)> set;
  std::function<nlohmann::json(const TrainConfig&)> get;
};

template <class T>
Field num(std::string name, T TrainConfig::*m, double lo, double hi, std::string help) {
  auto g = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", x);
    return std::string(buf);
  };
  std::string allowed = std::isinf(hi) ? ">= " + g(lo) : g(lo) + " .. " + g(hi);
  return Field{name, std::move(help), allowed,
               [=](TrainConfig& c, const std::string& w, const std::string& v) {
                 double x = std::is_integral_v<T> ? double(parse_int(w, name, v, allowed))
                                                  : parse_double(w, name, v, allowed);
                 if (x < lo || x > hi) fail(w, name, v, allowed);
                 if constexpr (std::is_integral_v<T>)  // no silent wrap-around in the cast
                   if (x > double(std::numeric_limits<T>::max()) || x < double(std::numeric_limits<T>::min()))
                     fail(w, name, v, allowed + " (at most " + std::to_string(std::numeric_limits<T>::max()) + ")");
                 c.*m = static_cast<T>(x);
               },
               [=](const TrainConfig& c) { return nlohmann::json(c.*m); }};
}
LIBREYOLO_INLINE Field flag(std::string name, bool TrainConfig::*m, std::string help);
// A string key. `choices` (lower-case) restricts the value; `canon` maps accepted spellings.
LIBREYOLO_INLINE Field text(std::string name, std::string TrainConfig::*m, std::string help,
                            std::vector<std::string> choices = {},
                            std::function<std::string(const std::string&)> canon = nullptr);

LIBREYOLO_INLINE std::string canon_amp_dtype(const std::string& v);
LIBREYOLO_INLINE std::string canon_optimizer(const std::string& v);
LIBREYOLO_INLINE std::string canon_cache(const std::string& v);

}  // namespace config_detail

// The entries of the device key split at its commas ("0,1,2" -> 0, 1, 2; "cuda:0" -> cuda:0).
LIBREYOLO_INLINE std::vector<std::string> device_list(const std::string& spec);

namespace config_detail {
// Accepts "", cpu, cuda, cuda:N, N, and comma lists of GPU indices (multi-GPU).
LIBREYOLO_INLINE void check_device(const std::string& w, const std::string& v);

LIBREYOLO_INLINE const std::vector<Field>& fields();

LIBREYOLO_INLINE const Field* find_field(std::string_view key);

LIBREYOLO_INLINE std::string known_keys();

}  // namespace config_detail

// Sets one key. `where` prefixes errors (e.g. "train.yaml:12: "). Marks the key explicit unless told not to.
LIBREYOLO_INLINE void set_key(TrainConfig& c, const std::string& key, const std::string& value,
                              const std::string& where = "", bool mark_explicit = true);

// Applies a YAML mapping of key: value. Errors name the file and line.
LIBREYOLO_INLINE void apply_yaml(TrainConfig& c, const std::filesystem::path& file);

// Parses `key=value` arguments; a `cfg=FILE` argument is applied first, wherever it stands, so the
// other arguments override the file.
LIBREYOLO_INLINE TrainConfig parse_args(const std::vector<std::string>& args, TrainConfig base = {});

// Applies family overrides ("key=value" strings) to keys the user did not set.
template <class Range>
void apply_overrides(TrainConfig& c, const Range& overrides) {
  for (std::string_view o : overrides) {
    auto s = std::string(o);
    auto eq = s.find('=');
    auto key = s.substr(0, eq);
    if (!c.is_explicit(key)) set_key(c, key, s.substr(eq + 1), "family override: ", false);
  }
}

LIBREYOLO_INLINE nlohmann::json to_json(const TrainConfig& c);
// Restores a config saved with to_json (checkpoints). Unknown keys are an error naming them.
LIBREYOLO_INLINE TrainConfig from_json(const nlohmann::json& j);

// `libreyolo train --help` text: every key, its default and what is allowed.
LIBREYOLO_INLINE std::string config_help();

}  // namespace libreyolo

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/core/config-inl.hpp>
#endif
