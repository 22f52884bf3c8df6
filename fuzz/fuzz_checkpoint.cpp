// Fuzz target: our checkpoint reader (io/checkpoint.hpp, load_checkpoint): a damaged file must be a
// CheckpointError naming it; an accepted one has passed the checksum and holds only finite tensors.
#include "fuzz_common.hpp"

#include <libreyolo/io/checkpoint.hpp>

// LRY_FUZZ_WRITE_SEED=FILE: write a small seed checkpoint shaped like a trainer's (meta with config
// and state, model / EMA / optimizer tensors of several dtypes) and exit (scripts/fuzz.sh uses it when
// fuzz/corpus/checkpoint/ is empty).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* seed = std::getenv("LRY_FUZZ_WRITE_SEED");
  if (!seed) return 0;
  libreyolo::train::Checkpoint ck;
  ck.meta = {{"format", "libreyolo.checkpoint/v1"},
             {"family_name", "resnet"},
             {"model", "resnet18"},
             {"family", {{"names", {"cat", "dog", "bird"}}}},
             {"config", {{"model", "resnet18"}, {"epochs", 3}, {"batch", 8}, {"imgsz", 32}, {"lr0", 0.01}}},
             {"explicit_keys", {"model", "epochs"}},
             {"results", nlohmann::json::array({{{"epoch", 1}, {"train/loss", 1.5}, {"val/top1", 0.5}}})},
             {"state", {{"epoch", 1}, {"batch_in_epoch", 0}, {"iteration", 5}, {"last_opt_iteration", 4},
                        {"optimizer_steps", 5}, {"best_fitness", 0.5}, {"saved_as_best", true}}},
             {"optim", {{"optimizer", "sgd"}, {"momentum", 0.9}, {"groups", {{{"name", "weights"}, {"lr", 0.01}}}}}}};
  torch::manual_seed(0);
  ck.tensors["model.conv1.weight"] = torch::randn({4, 3, 3, 3});
  ck.tensors["model.bn1.running_mean"] = torch::zeros({4});
  ck.tensors["model.bn1.num_batches_tracked"] = torch::full({}, 5, torch::kLong);
  ck.tensors["ema.conv1.weight"] = torch::randn({4, 3, 3, 3}).to(torch::kHalf);
  ck.tensors["ema.__present__"] = torch::ones({1});
  ck.tensors["optim.0.0.momentum_buffer"] = torch::randn({4, 3, 3, 3});
  ck.tensors["precision.grad_scaler.growth_tracker"] = torch::full({}, 0, torch::kInt);
  libreyolo::train::save_checkpoint(ck, seed);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    torch::set_num_threads(1);
    return true;
  }();
  (void)quiet;
  const auto file = lry_fuzz::write_input("x.ckpt", data, size);
  try {
    const auto ck = libreyolo::train::load_checkpoint(file);
    for (const auto& [k, t] : ck.tensors)
      if (t.is_floating_point() && t.numel() > 0 && !torch::isfinite(t).all().item<bool>())
        lry_fuzz::broken("a checkpoint with non-finite values was accepted");
  } catch (const libreyolo::CheckpointError& e) {
    if (std::string(e.what()).find(file.string()) == std::string::npos) lry_fuzz::broken("an error that does not name the file");
  } catch (const std::exception& e) {
    lry_fuzz::unnamed(e.what());
  }
  return 0;
}
