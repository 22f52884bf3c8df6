#pragma once
// `libreyolo profile run|infer|summary|phases|kernels|ops|convs|what-if|get|compare` — CLI11 wiring over libreyolo::profile.
// Every subcommand takes --json (one JSON document on stdout instead of the text).
// Exit codes (exit_codes.hpp): 0 ok, 2 bad arguments (unknown phase, missing file, not a v1 profile), 3 no profile.
#include "cli_args.hpp"
#include "exit_codes.hpp"

#include <libreyolo/model.hpp>
#include <libreyolo/profile/lenses.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <iostream>
#include <string>
#include <vector>

namespace libreyolo::cli {

class ProfileCommands {
 public:
  explicit ProfileCommands(CLI::App& app) {
    prof_ = app.add_subcommand("profile", "measure what bounds training, and read the reports");
    prof_->require_subcommand(1);
    run_ = prof_->add_subcommand("run", "train just long enough to fill one profiler window (no_aug_epochs=0)");
    run_->add_option("dataset", dataset_, "dataset (folder or YAML)")->required();
    run_->add_option("--weights", weights_, "model name (see `libreyolo train --help`) or checkpoint")->required();
    run_->add_option("--size", size_, "model size appended to a bare family name (--weights FAMILY --size SIZE)");
    // 0 is the "not given" default of both: given explicitly, it is refused rather than silently ignored.
    run_->add_option("--batch", batch_, "batch size (-1 = auto)")
        ->check(CLI::Validator([](std::string& v) {
          return v == "-1" || CLI::PositiveNumber(v).empty() ? std::string()
                                                             : "--batch " + v + ": allowed -1 (auto) or an integer >= 1";
        }, "-1 | >= 1"));
    run_->add_option("--imgsz", imgsz_, "image size")->check(CLI::Validator([](std::string& v) {
      return CLI::PositiveNumber(v).empty() ? std::string() : "--imgsz " + v + ": allowed an integer >= 1 (pixels)";
    }, ">= 1"));
    run_->add_option("--device", device_, "cpu | cuda | cuda:N");
    run_->add_option("--repeat", repeat_, "trials (prof_1 ... prof_N + profile_repeat.json)")->check(CLI::Range(1, 100));
    run_->add_option("--project", project_, "parent folder of the profile runs");
    run_->allow_extras();  // further key=value training settings (amp=, cuda_graph=, workers=, ...)
    infer_cmd_ = prof_->add_subcommand("infer", "inference latency p50/p90/p99 per stage (preprocess, forward, postprocess) "
                                            "and throughput, eager and with --cuda-graph graphed (host timings)");
    infer_cmd_->add_option("model", infer_model_, "checkpoint (.ckpt / the original's .pt) or a model name (random weights)")
        ->required();
    infer_cmd_->add_option("--batch", infer_opts_.batch, "images per forward (default 1)")->check(CLI::PositiveNumber);
    infer_cmd_->add_option("--imgsz", infer_opts_.imgsz, "image size (default: the checkpoint's, 640 for a model name)")
        ->check(CLI::Range(32, 8192));
    infer_cmd_->add_option("--device", infer_opts_.device, "cpu | cuda | cuda:N");
    infer_cmd_->add_flag("--cuda-graph", infer_opts_.cuda_graph, "also measure the forward replayed from CUDA graphs (CUDA only)");
    infer_cmd_->add_flag("--half", infer_opts_.half, "fp16 weights and inputs, as the original's predict(half=True) (CUDA only)");
    infer_cmd_->add_flag("--channels-last", infer_opts_.channels_last, "channels-last (NHWC) weights and inputs");
    infer_cmd_->add_flag("--cudnn-benchmark", infer_opts_.cudnn_benchmark, "cuDNN autotuning, as training's cudnn_benchmark=true (CUDA only)");
    infer_cmd_->add_option("--trace", infer_opts_.trace,
                           "after the timed passes, N more forwards per mode under the kernel tracer: kernels per forward and "
                           "their busy time (CUDA builds; default 0, none)")
        ->check(CLI::Range(0, 100000));
    infer_cmd_->add_option("--repeat", infer_opts_.repeat, "measured iterations per mode (default 50)")->check(CLI::Range(1, 100000));
    infer_cmd_->add_option("--warmup", infer_opts_.warmup, "unmeasured iterations first (default 5)")->check(CLI::Range(0, 100000));
    summary_ = prof_->add_subcommand("summary", "headline numbers and the verdict");
    summary_->add_option("profile", a_, "profile.json")->required();
    phases_ = prof_->add_subcommand("phases", "per-phase GPU ms, wall ms, kernels, ops");
    phases_->add_option("profile", a_, "profile.json")->required();
    ops_ = prof_->add_subcommand("ops", "top host (CPU) operators: the ops table of profile.json");
    ops_->add_option("profile", a_, "profile.json")->required();
    ops_->add_option("--top", q_.top, "rows (default 20)");
    ops_->add_option("--phase", q_.phase, "dataload | to_device | forward | backward | optimizer | outside");
    convs_ = prof_->add_subcommand("convs", "the convolutions by cuDNN algorithm (pass, family, arithmetic, split-K) and "
                                            "the NCHW <-> NHWC conversions around them");
    convs_->add_option("profile", a_, "profile.json")->required();
    what_if_ = prof_->add_subcommand("what-if", "ESTIMATE from the measured window what each lever would give "
                                                "(cuda_graph, amp, workers, channels_last, cudnn)");
    what_if_->add_option("profile", a_, "profile.json")->required();
    what_if_->add_option("--remove-category", removal_.category,
                         "ESTIMATE the step without this kernel category: gemm/conv | elementwise | reduction/norm | "
                         "layout/copy | other");
    what_if_->add_flag("--remove-launches", removal_.launches, "ESTIMATE the step with every launch gap closed");
    kernels_ = prof_->add_subcommand("kernels", "kernel table");
    kernels_->add_option("profile", a_, "profile.json")->required();
    kernels_->add_option("--top", q_.top, "rows (default 20)");
    kernels_->add_option("--category", q_.category, "gemm/conv | elementwise | reduction/norm | layout/copy | other");
    kernels_->add_option("--grep", q_.grep, "regular expression (RE2 syntax, case-insensitive) on the kernel name");
    kernels_->add_flag("--tensorcore", q_.tensorcore_only, "Tensor-Core kernels only");
    kernels_->add_option("--sort", q_.sort, "time | count | name")->check(CLI::IsMember({"time", "count", "name"}));
    kernels_->add_option("--phase", q_.phase, "dataload | to_device | forward | backward | optimizer");
    get_ = prof_->add_subcommand("get", "print one metric of a profile.json (for scripts; a bad name lists the allowed ones)");
    get_->add_option("profile", a_, "profile.json")->required();
    get_->add_option("metric", metric_, "step_ms | util | busy_ms | dataload_pct | peak_vram_mb | verdict | ...")->required();
    compare_ = prof_->add_subcommand("compare", "compare two profiles (significance needs --repeat files)");
    compare_->add_option("a", a_, "first profile.json / profile_repeat.json")->required();
    compare_->add_option("b", b_, "second profile.json / profile_repeat.json")->required();
    for (auto* c : {run_, infer_cmd_, summary_, phases_, kernels_, ops_, convs_, what_if_, get_, compare_})
      c->add_flag("--json", json_, "print one JSON document on stdout instead of the text");
  }

  // -1 when no profile command was given, else the exit code.
  int run() {
    if (summary_->parsed()) return profile::run_summary(a_, json_, std::cout, std::cerr);
    if (phases_->parsed()) return profile::run_phases(a_, json_, std::cout, std::cerr);
    if (kernels_->parsed()) return profile::run_kernels(a_, q_, json_, std::cout, std::cerr);
    if (ops_->parsed()) return profile::run_ops(a_, q_.top, q_.phase, json_, std::cout, std::cerr);
    if (convs_->parsed()) return profile::run_convs(a_, json_, std::cout, std::cerr);
    if (what_if_->parsed())
      return what_if_->count("--remove-category") == 0 && !removal_.launches ? profile::run_what_if(a_, json_, std::cout, std::cerr)
                                                              : profile::run_what_if(a_, removal_, json_, std::cout, std::cerr);
    if (get_->parsed()) return profile::run_get(a_, metric_, json_, std::cout, std::cerr);
    if (compare_->parsed()) return profile::run_compare(a_, b_, json_, std::cout, std::cerr);
    if (run_->parsed()) return profile_run();
    if (infer_cmd_->parsed()) {
      const auto doc = Model(infer_model_).profile_infer(infer_opts_);
      std::cout << (json_ ? doc.dump(2) + "\n" : eval::infer_text(doc));
      return 0;
    }
    return -1;
  }

 private:
  int profile_run() {
    std::string model = weights_;
    std::vector<std::string> args;
    if (std::filesystem::is_regular_file(weights_)) {
      args.push_back("weights=" + weights_);
      model = Model(weights_).name();
    } else if (!size_.empty()) {
      model += size_;
    }
    args.insert(args.end(), {"model=" + model, "data=" + dataset_, "profile=true", "profile_stop=true",
                             "no_aug_epochs=0", "epochs=1000", "val=false", "exist_ok=true", "project=" + project_});
    if (batch_) args.push_back("batch=" + std::to_string(batch_));
    if (imgsz_) args.push_back("imgsz=" + std::to_string(imgsz_));
    if (!device_.empty()) args.push_back("device=" + device_);
    // Further key=value settings replace the defaults above; name= is profile run's own (prof, prof_1, ...).
    for (auto& extra : refuse_repeated_keys(run_->remaining(), "profile run")) {
      const std::string key = extra.substr(0, extra.find('='));
      if (key == "name")
        throw ConfigError("profile run: " + extra + ": the run names are chosen by profile run (prof, or prof_1 ... prof_N "
                          "with --repeat); allowed: --project DIR to choose their folder");
      std::erase_if(args, [&](const std::string& a) { return a.rfind(key + "=", 0) == 0; });
      args.push_back(extra);
    }
    namespace fs = std::filesystem;
    std::vector<fs::path> trials;
    nlohmann::json docs = nlohmann::json::array();
    std::ostringstream quiet;  // --json: the text summaries are not printed
    std::ostream& text = json_ ? static_cast<std::ostream&>(quiet) : std::cout;
    for (int i = 1; i <= repeat_; ++i) {
      auto a = args;
      const std::string name = repeat_ > 1 ? "prof_" + std::to_string(i) : "prof";
      a.push_back("name=" + name);
      // The run directory is reused (exist_ok=true): a profile.json left there by an earlier run must not
      // count as this one's. It is removed first, and the one found afterwards must be newer than the start.
      const auto p = fs::path(project_) / name / "profile.json";
      std::error_code ec;
      if (fs::exists(p, ec)) {
        fs::remove(p, ec);
        if (ec) {
          std::cerr << "error: cannot remove the stale " << p.string() << " of an earlier run (" << ec.message() << ")\n";
          return exit_code::no_profile;
        }
        log::info("profile run: removed the stale ", p.string(), " of an earlier run");
      }
      const auto started = fs::file_time_type::clock::now();
      auto r = Model(model).train(parse_args(a));
      const auto produced = r.run_dir / "profile.json";
      if (!fs::exists(produced, ec) || fs::last_write_time(produced, ec) < started - std::chrono::seconds(2)) {
        std::cerr << "error: the run produced no profile (" << produced.string()
                  << " missing: the training ended before the profiler's window filled; give more data or epochs, or a "
                     "smaller profile_warmup / profile_steps)\n";
        return exit_code::no_profile;
      }
      trials.push_back(produced);
      if (profile::run_summary(produced, text, std::cerr) != 0) return exit_code::no_profile;
      if (json_) docs.push_back(profile::summary_doc(profile::load_profile_file(produced)));
    }
    int rc = 0;
    const auto repeat_file = fs::path(project_) / "profile_repeat.json";
    if (repeat_ > 1) rc = profile::run_aggregate_repeat(trials, repeat_file, text, std::cerr);
    if (json_) {
      nlohmann::json files = nlohmann::json::array();
      for (const auto& t : trials) files.push_back(t.string());
      nlohmann::json out = {{"profiles", files}, {"summaries", docs}};
      if (repeat_ > 1) out["repeat"] = repeat_file.string();
      std::cout << out.dump(2) << "\n";
    }
    return rc;
  }

  CLI::App *prof_, *run_, *summary_, *phases_, *kernels_, *ops_, *convs_, *what_if_, *get_, *compare_, *infer_cmd_;
  bool json_ = false;
  std::string dataset_, weights_, size_, device_, a_, b_, metric_, project_ = "runs/profile";
  int batch_ = 0, imgsz_ = 0, repeat_ = 1;
  profile::KernelQuery q_;
  profile::Removal removal_;
  eval::InferOptions infer_opts_;
  std::string infer_model_;
};

}  // namespace libreyolo::cli
