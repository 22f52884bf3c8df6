#pragma once
// `libreyolo profile run|summary|phases|kernels|compare` — CLI11 wiring over libreyolo::profile.
// Exit codes (exit_codes.hpp): 0 ok, 2 bad arguments (unknown phase, missing file, not a v1 profile), 3 no profile.
#include "exit_codes.hpp"

#include <libreyolo/model.hpp>
#include <libreyolo/profile/report.hpp>

#include <CLI/CLI.hpp>

#include <filesystem>
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
    run_->add_option("--batch", batch_, "batch size");
    run_->add_option("--imgsz", imgsz_, "image size");
    run_->add_option("--device", device_, "cpu | cuda | cuda:N");
    run_->add_option("--repeat", repeat_, "trials (prof_1 ... prof_N + profile_repeat.json)")->check(CLI::Range(1, 100));
    run_->add_option("--project", project_, "parent folder of the profile runs");
    run_->allow_extras();  // further key=value training settings (amp=, cuda_graph=, workers=, ...)
    summary_ = prof_->add_subcommand("summary", "headline numbers and the verdict");
    summary_->add_option("profile", a_, "profile.json")->required();
    phases_ = prof_->add_subcommand("phases", "per-phase GPU ms, wall ms, kernels, ops");
    phases_->add_option("profile", a_, "profile.json")->required();
    kernels_ = prof_->add_subcommand("kernels", "kernel table");
    kernels_->add_option("profile", a_, "profile.json")->required();
    kernels_->add_option("--top", q_.top, "rows (default 20)");
    kernels_->add_option("--category", q_.category, "gemm/conv | elementwise | reduction/norm | layout/copy | other");
    kernels_->add_option("--grep", q_.grep, "regular expression (RE2 syntax, case-insensitive) on the kernel name");
    kernels_->add_flag("--tensorcore", q_.tensorcore_only, "Tensor-Core kernels only");
    kernels_->add_option("--sort", q_.sort, "time | count | name")->check(CLI::IsMember({"time", "count", "name"}));
    kernels_->add_option("--phase", q_.phase, "dataload | to_device | forward | backward | optimizer");
    compare_ = prof_->add_subcommand("compare", "compare two profiles (significance needs --repeat files)");
    compare_->add_option("a", a_, "first profile.json / profile_repeat.json")->required();
    compare_->add_option("b", b_, "second profile.json / profile_repeat.json")->required();
  }

  // -1 when no profile command was given, else the exit code.
  int run() {
    if (summary_->parsed()) return profile::run_summary(a_, std::cout, std::cerr);
    if (phases_->parsed()) return profile::run_phases(a_, std::cout, std::cerr);
    if (kernels_->parsed()) return profile::run_kernels(a_, q_, std::cout, std::cerr);
    if (compare_->parsed()) return profile::run_compare(a_, b_, std::cout, std::cerr);
    if (run_->parsed()) return profile_run();
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
    for (auto& extra : run_->remaining()) args.push_back(extra);
    std::vector<std::filesystem::path> trials;
    for (int i = 1; i <= repeat_; ++i) {
      auto a = args;
      a.push_back("name=" + std::string(repeat_ > 1 ? "prof_" + std::to_string(i) : "prof"));
      auto r = Model(model).train(parse_args(a));
      auto p = r.run_dir / "profile.json";
      if (!std::filesystem::exists(p)) {
        std::cerr << "error: the run produced no profile (" << p.string() << " missing)\n";
        return exit_code::no_profile;
      }
      trials.push_back(p);
      profile::run_summary(p, std::cout, std::cerr);
    }
    if (repeat_ > 1)
      return profile::run_aggregate_repeat(trials, std::filesystem::path(project_) / "profile_repeat.json", std::cout,
                                           std::cerr);
    return 0;
  }

  CLI::App *prof_, *run_, *summary_, *phases_, *kernels_, *compare_;
  std::string dataset_, weights_, size_, device_, a_, b_, project_ = "runs/profile";
  int batch_ = 0, imgsz_ = 0, repeat_ = 1;
  profile::KernelQuery q_;
};

}  // namespace libreyolo::cli
