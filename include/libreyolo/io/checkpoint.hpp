#pragma once
// Checkpoints: a JSON meta block plus named tensors, stored in a LibTorch OutputArchive and written
// atomically (temp file in the same directory, fsync, rename) so an interrupted run keeps its last file.
//
// Integrity (format 2): LibTorch's zip reader does not check the zip CRCs, so the archive carries a
// CRC-32 of its own over the meta text and every tensor (name, dtype, shape, bytes), verified on load;
// a flipped byte anywhere in the data is a CheckpointError naming the file. Loading also refuses
// floating-point tensors holding NaN or Inf (a diverged run's weights would train on as loss nan).
// Format 1 files (no checksum) still load.
//
// The container is I/O that io/ (original.hpp), precision/ and train/ all use, so it lives here; its names
// stay in namespace libreyolo::train (train::Checkpoint, train::load_checkpoint, ...), as the API has them.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/utf8.hpp>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <zlib.h>
#include <unistd.h>

namespace libreyolo::train {

// What a checkpoint holds: free-form metadata and tensors by name ("model.conv.weight", ...).
struct Checkpoint {
  nlohmann::json meta = nlohmann::json::object();
  std::map<std::string, torch::Tensor> tensors;
  std::filesystem::path source;  // the file it was loaded from (empty when built in memory), for messages
};

// Bumped when the on-disk layout changes; files with a newer version are refused.
// 2: the "checksum" entry (CRC-32 of meta and tensors).
inline constexpr int kCheckpointFormatVersion = 2;
// Reserved meta key that marks a file as a libreyolo checkpoint and carries the format version.
inline constexpr const char* kCheckpointFormatKey = "libreyolo_checkpoint_format";

namespace detail {

LIBREYOLO_INLINE std::string shape_str(const torch::Tensor& t);

// "model" and "model." both give "model.<name>": callers may write the prefix either way.
LIBREYOLO_INLINE std::string join_key(const std::string& prefix, const std::string& name);
// The meta key for a prefix: the prefix without a trailing dot ("optim." -> "optim").
LIBREYOLO_INLINE std::string meta_key(const std::string& prefix);
// The checkpoint's meta["family"] object (an empty object when it has none).
LIBREYOLO_INLINE nlohmann::json family_meta(const Checkpoint& ck);
// The class count the checkpoint's metadata records (meta["family"]["nc"]), when it does.
LIBREYOLO_INLINE std::optional<int64_t> family_classes(const Checkpoint& ck);

inline std::string errno_text(int e) { return std::strerror(e); }

// CRC-32 (zlib) over the meta text and, in key order, each tensor's name, dtype, shape and bytes.
LIBREYOLO_INLINE uint32_t content_crc(const std::string& meta, const std::map<std::string, torch::Tensor>& tensors);
LIBREYOLO_INLINE std::string hex32(uint32_t v);

// Writes `target` atomically (core/atomic_file.hpp): `produce` pushes the bytes through the sink it is
// given into `<target>.tmp.<pid>`, which is fsync'ed and renamed over `target`. On any failure (a write
// error, or an exception from `produce`) the temp file is removed and the old `target` is left
// untouched; a target that is not a regular file is refused (OutputPathError).
using ByteSink = atomic_file::ByteSink;
LIBREYOLO_INLINE void write_file_atomically(const std::filesystem::path& target,
                                            const std::function<void(const ByteSink&)>& produce);

}  // namespace detail

// Removes the temp files ("<name>.tmp.<pid>") that killed writers left in `dir`: those whose process
// no longer exists. Returns how many were removed. A live writer's file is left alone.
LIBREYOLO_INLINE int remove_stale_temp_files(const std::filesystem::path& dir);

// Saves atomically: the previous file at `path` survives any failure.
LIBREYOLO_INLINE void save_checkpoint(const Checkpoint& ck, const std::filesystem::path& path);

// Loads a checkpoint onto the CPU; tensors keep the names they were saved with.
LIBREYOLO_INLINE Checkpoint load_checkpoint(const std::filesystem::path& path);

// Stores CPU copies of every parameter and buffer of `m` under "<prefix>.<name>".
LIBREYOLO_INLINE void put_module_state(Checkpoint& ck, const std::string& prefix, const torch::nn::Module& m);

// Copies "<prefix>.<name>" entries into the module's existing tensors (device and dtype kept).
LIBREYOLO_INLINE void get_module_state(const Checkpoint& ck, const std::string& prefix, torch::nn::Module& m);

// As get_module_state, for a training run that starts from other weights (`weights=`): where the only
// difference is the class count (the stem equal, every other-shaped tensor differing in one dimension), the
// tensors of equal shape are copied and the class-dependent ones keep the module's own initialisation, as the
// original's _rebuild_for_new_classes (models/base/model.py: rebuild at the new count, copy what matches).
// Returns the names left at their initialisation (empty when every tensor matched); any other difference
// throws as get_module_state does, and a failed load leaves the module unchanged.
LIBREYOLO_INLINE std::vector<std::string> get_module_state_new_classes(const Checkpoint& ck, const std::string& prefix,
                                                                       torch::nn::Module& m);

}  // namespace libreyolo::train

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/io/checkpoint-inl.hpp>
#endif
