// The `libreyolo` command-line program: a thin layer over the headers.
//   libreyolo train model=<family><size> data=DIR epochs=10 imgsz=64 batch=32 device=cpu
//   libreyolo data synth --task classify --out DIR --images 600 --imgsz 64 --seed 0
// The models, their tasks and data formats come from the family list (families/list.hpp); the families'
// trainers are compiled in their own translation units (tools/CMakeLists.txt), declared here by extern.hpp.
//   libreyolo profile run|infer|summary|phases|kernels|ops|convs|what-if|get|compare ... [--json]
//   libreyolo checks [--json]     versions and capabilities for a bug report
// Exit codes: see exit_codes.hpp (printed by --help, documented in README.md).
#include "checks.hpp"
#include "cli_args.hpp"
#include "exit_codes.hpp"
#include "profile_commands.hpp"
#include <libreyolo/data/scenes_synth.hpp>
#include <libreyolo/data/synth.hpp>
#include <libreyolo/model.hpp>
#include <libreyolo/families/extern.hpp>
#include <libreyolo/distributed/launch.hpp>
#include <libreyolo/distributed/process_group.hpp>
#include <libreyolo/train/interrupt.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <thread>

namespace {

namespace cli = libreyolo::cli;

// model= that names a file (a path, or a checkpoint extension) must exist: otherwise the error would
// be "unknown model" (the string is not a model name either).
void check_model_argument(const std::string& model) {
  namespace fs = std::filesystem;
  const fs::path p(model);
  const auto ext = p.extension().string();
  const bool looks_like_file = model.find('/') != std::string::npos || ext == ".ckpt" || ext == ".pt" || ext == ".pth";
  std::error_code ec;
  if (fs::is_directory(p, ec))
    throw libreyolo::CheckpointError("model=" + model + ": is a directory; give a checkpoint file (e.g. " +
                                     (p / "weights" / "best.ckpt").string() + ") or a model name");
  if (looks_like_file && !fs::exists(p, ec))
    throw libreyolo::CheckpointError("model=" + model + ": no such checkpoint file");
}

// resume=true project=... name=... without model=: the run's own model (its last.ckpt says which),
// not the default one.
void take_model_from_resumed_run(libreyolo::TrainConfig& cfg) {
  if (!cfg.resume || cfg.is_explicit("model")) return;
  const auto last = cfg.run_dir() / "weights" / "last.ckpt";
  if (!std::filesystem::exists(last)) return;  // the trainer names the missing checkpoint
  const auto ck = libreyolo::train::load_checkpoint(last);
  if (!ck.meta.contains("model") || !ck.meta.at("model").is_string() || ck.meta.at("model").get<std::string>().empty())
    throw libreyolo::CheckpointError("checkpoint " + last.string() + ": its metadata does not name the model; give model=");
  cfg.model = ck.meta.at("model").get<std::string>();
}

int run_train(const std::vector<std::string>& given, const char* argv0) {
  const auto args = cli::refuse_repeated_keys(given, "train");
  auto cfg = libreyolo::parse_args(args);
  if (cfg.nproc == 1) throw libreyolo::ConfigError("nproc=1: a data-parallel launch needs >= 2 processes (0 = single process)");
  // device=0,1,2,3 is the self-launching form for GPUs: one process per listed device.
  if (const int listed = libreyolo::dist::device_list_size(cfg.device); listed > 1) {
    if (cfg.nproc != 0 && cfg.nproc != listed)
      throw libreyolo::ConfigError("nproc=" + std::to_string(cfg.nproc) + " but device=" + cfg.device + " lists " +
                                   std::to_string(listed) + " devices; give one of them (one process per device)");
    cfg.nproc = listed;
  }
  libreyolo::train::require_batch_for_world(cfg.batch, cfg.nproc);
  check_model_argument(cfg.model);
  take_model_from_resumed_run(cfg);
  if (cfg.nproc >= 2 && !libreyolo::dist::launched_distributed()) {
    // The self-launching form: this process only starts and watches the ranks.
    std::vector<std::string> argv{argv0, "train"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = libreyolo::dist::launch_local(argv, cfg.nproc);
    return r.failed_rank >= 0 ? cli::exit_code::failure : r.exit_code;  // 0, or 130 when stopped by Ctrl-C / SIGTERM
  }
  libreyolo::train::install_interrupt_handlers();
  // Debian's LibTorch starts with one intra-op thread; a CPU run should use the machine. The ranks of
  // a distributed run share it (each takes its part, as torchrun's OMP_NUM_THREADS does), unless the
  // user set OMP_NUM_THREADS.
  // A single process reads as rank 0 of a world of one.
  const auto env = libreyolo::dist::launched_distributed() ? libreyolo::dist::env_from_environment() : libreyolo::dist::Env{};
  if (unsigned hw = std::thread::hardware_concurrency(); hw > 1 && !std::getenv("OMP_NUM_THREADS")) {
    const int share = std::max(1, static_cast<int>(hw) / std::max(1, env.world_size));
    if (env.world_size > 1 || at::get_num_threads() < share) at::set_num_threads(share);
  }
  libreyolo::Model m(cfg.model);
  auto r = m.train(cfg);
  const int code = r.interrupted ? libreyolo::dist::interrupted_exit_code : 0;
  if (env.rank != 0) return code;
  std::cout << "run: " << r.run_dir.string() << "\nbest_fitness: " << r.best_fitness << "\nmetrics: "
            << r.last_metrics.dump() << std::endl;
  return code;
}

// Splits key=value arguments, taking out the ones a command handles itself (e.g. source=, conf=).
std::string take(std::vector<std::string>& args, const std::string& key, std::string def = "") {
  for (auto it = args.begin(); it != args.end(); ++it)
    if (it->rfind(key + "=", 0) == 0) {
      def = it->substr(key.size() + 1);
      args.erase(it);
      break;
    }
  return def;
}

int run_val(std::vector<std::string> args) {
  args = cli::refuse_repeated_keys(args, "val");
  auto cfg = libreyolo::parse_args(args);
  check_model_argument(cfg.model);
  auto r = libreyolo::Model(cfg.model).val(cfg);
  std::cout << r.summary << "\n" << r.metrics.dump() << std::endl;
  return 0;
}

int run_export(std::vector<std::string> args) {
  args = cli::refuse_repeated_keys(args, "export");
  const auto format = take(args, "format", "libreyolo");
  if (format != "libreyolo")
    throw libreyolo::ConfigError("export: format=" + format + " is not supported; allowed: libreyolo (the original's .pt)");
  const auto out = take(args, "out");
  auto cfg = libreyolo::parse_args(args);
  check_model_argument(cfg.model);
  const auto written = libreyolo::Model(cfg.model).export_original(out);
  std::cout << "exported " << cfg.model << " -> " << written.string() << " (the original's .pt, schema 1.0)" << std::endl;
  return 0;
}

int run_predict(std::vector<std::string> args) {
  args = cli::refuse_repeated_keys(args, "predict");
  auto source = take(args, "source");
  if (source.empty()) throw libreyolo::ConfigError("predict: source= is required (an image or a folder of images)");
  // The thresholds predict takes besides the config keys (the original's predict defaults); a value that is not
  // a number in range (max_det: an integer) is refused naming the key, the value and what is allowed.
  auto number = [&](const char* key, const char* fallback, auto ok, const char* allowed, bool integer) {
    const auto text = take(args, key, fallback);
    double v = std::nan("");
    try {
      size_t used = 0;
      v = std::stod(text, &used);
      if (used != text.size() || (integer && v != std::floor(v))) v = std::nan("");
    } catch (const std::exception&) {
    }
    if (!(v == v) || !ok(v)) throw libreyolo::ConfigError(std::string(key) + "=" + text + ": invalid value; allowed: " + allowed);
    return v;
  };
  const double conf = number("conf", "0.25", [](double v) { return v >= 0 && v <= 1; }, "0 .. 1", false);
  const double iou = number("iou", "0.45", [](double v) { return v > 0 && v <= 1; }, "0 < iou <= 1", false);
  const auto max_det = static_cast<int64_t>(number("max_det", "300", [](double v) { return v >= 1 && v <= 1e9; },
                                                   "an integer >= 1", true));
  auto cfg = libreyolo::parse_args(args);
  check_model_argument(cfg.model);
  if (!cfg.is_explicit("project")) cfg.project = "runs/predict";
  auto out = libreyolo::train::prepare_run_dir(cfg);
  auto j = libreyolo::Model(cfg.model).predict(source, cfg, out, conf, iou, max_det);
  size_t boxes = 0;
  bool detections = false;
  for (auto& f : j)
    if (f.contains("boxes")) detections = true, boxes += f["boxes"].size();
  std::cout << j.size() << " image(s)" << (detections ? ", " + std::to_string(boxes) + " box(es)" : std::string())
            << " -> " << (out / "predictions.json").string() << std::endl;
  if (!j.empty())  // the first annotated image, to open
    std::cout << "annotated: " << (out / (std::filesystem::path(j[0]["file"].get<std::string>()).stem().string() + ".jpg")).string()
              << std::endl;
  if (cfg.save_txt) std::cout << "labels: " << (out / "labels").string() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"libreyolo: train YOLO-family detectors and classifiers on LibTorch"};
  app.require_subcommand(1);
  app.footer(cli::exit_code_help());

  auto* train = app.add_subcommand("train", "train a model: libreyolo train model=" + libreyolo::families::default_model() +
                                                " data=DIR key=value ...");
  train->allow_extras();
  train->footer("Models (data= format):\n" + libreyolo::families::model_list(libreyolo::registered_families, true) +
                "\n\nKeys (key=value; cfg=FILE.yaml loads keys from YAML first):\n" + libreyolo::config_help());

  auto* val = app.add_subcommand("val", "validate a checkpoint: libreyolo val model=weights/best.ckpt [data=...]");
  val->allow_extras();
  auto* predict = app.add_subcommand("predict", "predict with a checkpoint (boxes, classes: its task's outputs): "
                                                "libreyolo predict model=best.ckpt source=IMG_OR_DIR [conf=0.25 iou=0.45 max_det=300]");
  predict->allow_extras();

  auto* exp = app.add_subcommand("export", "write a checkpoint as the original's .pt: libreyolo export model=best.ckpt "
                                          "format=libreyolo [out=FILE.pt]");
  exp->allow_extras();

  auto* data = app.add_subcommand("data", "dataset tools");
  data->require_subcommand(1);
  auto* synth = data->add_subcommand("synth", "write a synthetic dataset of real JPEGs with learnable objects");
  libreyolo::data::SynthOptions so;
  std::string out;
  std::string task_choices;
  for (auto& t : libreyolo::tasks::synth_tasks()) task_choices += (task_choices.empty() ? "" : " | ") + t;
  synth->add_option("--task", so.task, task_choices)->check(CLI::IsMember(libreyolo::tasks::synth_tasks()));
  synth->add_option("--out", out, "output folder")->required();
  // A plain sentence for 0 or less (CLI::PositiveNumber printed "Value 0 not in range 0.000000 to 1.8e308").
  synth->add_option("--images", so.images, "number of images (train + val)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              size_t used = 0;
              const long long n = std::stoll(text, &used);
              if (used == text.size() && n < 1)
                return "a dataset needs at least one image (got " + text + "); give --images 1 or more";
            } catch (const std::exception&) {
              // not an integer: the conversion to int reports it
            }
            return {};
          },
          "POSITIVE"));
  synth->add_option("--imgsz", so.imgsz, "image side in pixels")->check(CLI::Range(16, 4096));
  synth->add_option("--classes", so.classes, "number of classes")->check(CLI::Range(2, 16));
  synth->add_option("--seed", so.seed, "random seed");
  std::string synth_style = "shapes";
  synth->add_option("--style", synth_style,
                    "shapes (every task) | scenes (detect: other shapes, textured backgrounds, occlusion, "
                    "distractors, sizes 5/12 imgsz..imgsz)")
      ->check(CLI::IsMember({"shapes", "scenes"}));
  synth->add_option("--progress-interval", so.progress_interval,
                    "seconds between plain progress lines when stderr is not a terminal (0 = none)")
      ->check(CLI::NonNegativeNumber);

  libreyolo::cli::ProfileCommands prof_cmds(app);

  auto* checks = app.add_subcommand("checks", "versions of libreyolo, LibTorch, CUDA, cuDNN, NCCL, the GPUs (bf16), Kineto: "
                                              "one screen for a bug report");
  bool checks_json = false;
  checks->add_flag("--json", checks_json, "print one JSON document");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? cli::exit_code::ok : cli::exit_code::usage;
  }
  try {
    if (train->parsed()) return run_train(train->remaining(), argv[0]);
    if (val->parsed()) return run_val(val->remaining());
    if (predict->parsed()) return run_predict(predict->remaining());
    if (exp->parsed()) return run_export(exp->remaining());
    if (synth->parsed()) {
      so.out = out;
      if (synth_style == "scenes") {
        if (so.task != "detect")
          throw libreyolo::ConfigError("data synth --style scenes writes detection sets; give --task detect (--task " +
                                       so.task + " has only --style shapes)");
        libreyolo::data::synth_detect_scenes(so);
      } else {
        libreyolo::tasks::synth(so.task, so);
      }
      std::cout << "wrote " << so.images << " images to " << out << "\n";
      return cli::exit_code::ok;
    }
    if (auto rc = prof_cmds.run(); rc >= 0) return rc;
    if (checks->parsed()) {
      const auto d = cli::checks_doc();
      std::cout << (checks_json ? d.dump(2) + "\n" : cli::checks_text(d)) << std::flush;
      return cli::exit_code::ok;
    }
  } catch (const libreyolo::dist::PeerLost& e) {
    std::cerr << "error: " << e.what() << "\n";
    return cli::exit_code::peer_lost;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return cli::exit_code::failure;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return cli::exit_code_for(e);
  }
  return cli::exit_code::ok;
}
