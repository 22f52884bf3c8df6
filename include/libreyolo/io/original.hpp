#pragma once
// The original's (Python LibreYOLO's) checkpoints, both ways:
//  - checkpoint_from_original(path): a torch.save file of the original (a dict with `model` = the state
//    dict, the EMA weights when it trained with EMA, and its metadata `model_family`, `size`, `task`, `nc`,
//    `names`, `imgsz`, ...) as our in-memory train::Checkpoint, so `model=`/`weights=` of train, val and
//    predict take it like one of ours. Our modules are named as the original's, so the state dict's names
//    are ours: no table. Read with the restricted reader (io/pt_archive.hpp): nothing in the file runs.
//  - write_original_checkpoint(path, ck, net): our checkpoint as a .pt the original's loader accepts
//    (its schema 1.0 metadata: model, schema_version, libreyolo_version, model_family, size, task, nc,
//    names, imgsz; plus ema, epoch, best metric), the state dict in PyTorch's order.
// load_any_checkpoint(path) picks by the file: a .pt/.pth is the original's, anything else ours (our own
// .ckpt given a .pt name is refused saying so); metadata read back as int (config.imgsz) is range-checked.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/io/pt_archive.hpp>
#include <libreyolo/io/checkpoint.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace libreyolo::io {

// The format tag of our trainer's checkpoints (train/trainer_impl.hpp writes the same string).
inline constexpr const char* kTrainerCheckpointFormat = "libreyolo.checkpoint/v1";
// What the original's loader checks (libreyolo/utils/serialization.py, schema 1.0).
inline constexpr const char* kOriginalSchemaVersion = "1.0";

LIBREYOLO_INLINE bool is_original_checkpoint_path(const std::filesystem::path& p);

namespace detail {
LIBREYOLO_INLINE std::string text_field(const PyValue& root, const char* key, const std::string& where);
// `names` as the original saves it: {0: 'circle', 1: 'square', ...} (or a list). Returns them by index.
LIBREYOLO_INLINE std::vector<std::string> names_field(const PyValue& root, const std::string& where);
LIBREYOLO_INLINE nlohmann::json number_or_null(const PyValue* v);
// Whether `path` is a zip laid out as a TorchScript/LibTorch archive (constants.pkl, code/): what
// torch::save writes, so also our own .ckpt. False for anything else, a damaged file included.
LIBREYOLO_INLINE bool torchscript_layout(const std::filesystem::path& path);
// Refuses metadata the commands read back as int that is out of range (config.imgsz = 10^12 would wrap).
LIBREYOLO_INLINE void check_config_ints(const train::Checkpoint& ck, const std::string& where);
}  // namespace detail

// The original's checkpoint at `path` as one of ours (model weights only: its optimizer state is not
// carried over, so `resume=` needs one of our runs). Errors name the file and what is wrong.
LIBREYOLO_INLINE train::Checkpoint checkpoint_from_original(const std::filesystem::path& path);

// Ours or the original's, by the file's extension.
LIBREYOLO_INLINE train::Checkpoint load_any_checkpoint(const std::filesystem::path& path);

// Writes `ck` (one of our checkpoints) as the original's .pt. `net` is the checkpoint's network, built
// by its family, into which the weights to export were loaded: it gives PyTorch's state-dict order.
// `task` and `version` go into the metadata.
LIBREYOLO_INLINE void write_original_checkpoint(const std::filesystem::path& out, const train::Checkpoint& ck,
                                                const torch::nn::Module& net, const std::string& task,
                                                const std::string& version = "libreyolo-cpp");

}  // namespace libreyolo::io

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/io/original-inl.hpp>
#endif
