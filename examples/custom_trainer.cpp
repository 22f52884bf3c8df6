// Composing a trainer from policies at compile time, with a callback.
//   custom_trainer DATA_DIR   (a classification folder, e.g. from `libreyolo data synth`)
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/families/resnet/family.hpp>

#include <iostream>

namespace ly = libreyolo;

// Hooks are keyed by event tags (train/events.hpp); an unknown event or a wrong signature does not compile.
struct PrintBestTop1 {
  double best = 0;
  void operator()(ly::event::epoch_end, const ly::EpochInfo& e) {
    if (e.row.contains("val/top1")) best = std::max(best, e.row["val/top1"].get<double>());
    std::cout << "epoch " << e.epoch + 1 << "/" << e.epochs << " best top1 so far " << best << "\n";
  }
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: custom_trainer DATA_DIR [key=value ...]\n";
    return 2;
  }
  std::vector<std::string> args{"data=" + std::string(argv[1]), "epochs=2", "imgsz=64", "batch=32",
                                "device=cpu", "project=runs/example", "warmup_epochs=0"};
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);

  // Family x Precision x Capture x Profiler. Asking for graphs on a family without a capture region
  // would resolve to Eager at compile time (capture::resolve_t) with a single notice.
  using MyTrainer = ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::Eager, ly::profile::Off>;
  static_assert(ly::profile::ProfilerPolicy<ly::profile::Off>);

  MyTrainer trainer(ly::parse_args(args), ly::ResNetFamily("18"));
  PrintBestTop1 cb;
  auto result = trainer.fit(cb);
  std::cout << "best top1 " << cb.best << " in " << result.run_dir << "\n";
  return 0;
}
