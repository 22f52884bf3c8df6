#pragma once
// Checkpoints: a JSON meta block plus named tensors, stored in a LibTorch OutputArchive and written
// atomically (temp file in the same directory, fsync, rename) so an interrupted run keeps its last file.
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace libreyolo::train {

// What a checkpoint holds: free-form metadata and tensors by name ("model.conv.weight", ...).
struct Checkpoint {
  nlohmann::json meta = nlohmann::json::object();
  std::map<std::string, torch::Tensor> tensors;
};

// Bumped when the on-disk layout changes; files with a newer version are refused.
inline constexpr int kCheckpointFormatVersion = 1;
// Reserved meta key that marks a file as a libreyolo checkpoint and carries the format version.
inline constexpr const char* kCheckpointFormatKey = "libreyolo_checkpoint_format";

namespace detail {

inline std::string shape_str(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

// "model" and "model." both give "model.<name>": callers may write the prefix either way.
inline std::string join_key(const std::string& prefix, const std::string& name) {
  if (prefix.empty() || prefix.back() == '.') return prefix + name;
  return prefix + "." + name;
}
// The meta key for a prefix: the prefix without a trailing dot ("optim." -> "optim").
inline std::string meta_key(const std::string& prefix) {
  return !prefix.empty() && prefix.back() == '.' ? prefix.substr(0, prefix.size() - 1) : prefix;
}

inline std::string errno_text(int e) { return std::strerror(e); }

// Writes `target` atomically: `produce` pushes the bytes through the sink it is given into
// `<target>.tmp.<pid>`, which is fsync'ed and renamed over `target`. On any failure (a write error,
// or an exception from `produce`) the temp file is removed and the old `target` is left untouched.
using ByteSink = std::function<void(const void*, size_t)>;
inline void write_file_atomically(const std::filesystem::path& target,
                                  const std::function<void(const ByteSink&)>& produce) {
  namespace fs = std::filesystem;
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw CheckpointError("cannot write checkpoint " + target.string() + ": creating temp file " +
                          tmp.string() + " failed: " + errno_text(errno));
  auto fail = [&](const std::string& why) {
    ::close(fd);
    std::error_code ec;
    fs::remove(tmp, ec);
    throw CheckpointError("cannot write checkpoint " + target.string() + ": " + why);
  };
  // The sink never throws: it is called from inside LibTorch's zip writer (whose destructor also
  // writes), so the first write error is remembered and reported once `produce` returns.
  int write_errno = 0;
  const ByteSink sink = [&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0 && write_errno == 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        write_errno = w < 0 ? errno : EIO;
        return;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  try {
    produce(sink);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (write_errno != 0) fail("write to " + tmp.string() + " failed: " + errno_text(write_errno));
  if (::fsync(fd) != 0) fail("fsync of " + tmp.string() + " failed: " + errno_text(errno));
  if (::close(fd) != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw CheckpointError("cannot write checkpoint " + target.string() + ": close failed: " +
                          errno_text(errno));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    throw CheckpointError("cannot write checkpoint " + target.string() + ": rename from " +
                          tmp.string() + " failed: " + errno_text(e));
  }
  // Persist the rename itself; best effort, the data is already safe in the file.
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace detail

// Saves atomically: the previous file at `path` survives any failure.
inline void save_checkpoint(const Checkpoint& ck, const std::filesystem::path& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, t] : ck.tensors) {
    if (!t.defined())
      throw CheckpointError("cannot write checkpoint " + path.string() + ": tensor '" + key +
                            "' is undefined");
    dict.insert(key, t.device().is_cpu() ? t.detach() : t.detach().cpu());
  }
  nlohmann::json meta = ck.meta;
  if (!meta.is_object())
    throw CheckpointError("cannot write checkpoint " + path.string() + ": meta must be a JSON object");
  meta[kCheckpointFormatKey] = kCheckpointFormatVersion;

  torch::serialize::OutputArchive archive;
  archive.write("meta", c10::IValue(meta.dump()));
  archive.write("tensors", c10::IValue(dict));
  detail::write_file_atomically(path, [&](const detail::ByteSink& sink) {
    archive.save_to([&](const void* data, size_t n) -> size_t {
      sink(data, n);
      return n;
    });
  });
}

// Loads a checkpoint onto the CPU; tensors keep the names they were saved with.
inline Checkpoint load_checkpoint(const std::filesystem::path& path) {
  const std::string where = "checkpoint " + path.string();
  if (!std::filesystem::is_regular_file(path))
    throw CheckpointError(where + ": no such file");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path.string(), torch::Device(torch::kCPU));
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw CheckpointError(where + ": not a libreyolo checkpoint (not a LibTorch archive: " + why + ")");
  }
  c10::IValue meta_iv, tensors_iv;
  if (!archive.try_read("meta", meta_iv) || !meta_iv.isString() ||
      !archive.try_read("tensors", tensors_iv) || !tensors_iv.isGenericDict())
    throw CheckpointError(where + ": not a libreyolo checkpoint (a LibTorch archive without the "
                                  "'meta' string and 'tensors' dict entries)");
  Checkpoint ck;
  try {
    ck.meta = nlohmann::json::parse(meta_iv.toStringRef());
  } catch (const std::exception& e) {
    throw CheckpointError(where + ": meta is not valid JSON: " + e.what());
  }
  if (!ck.meta.is_object() || !ck.meta.contains(kCheckpointFormatKey) ||
      !ck.meta[kCheckpointFormatKey].is_number_integer())
    throw CheckpointError(where + ": not a libreyolo checkpoint (meta lacks '" +
                          std::string(kCheckpointFormatKey) + "')");
  const int version = ck.meta[kCheckpointFormatKey].get<int>();
  if (version < 1 || version > kCheckpointFormatVersion)
    throw CheckpointError(where + ": format version " + std::to_string(version) +
                          " is not supported (this build reads 1.." +
                          std::to_string(kCheckpointFormatVersion) + ")");
  ck.meta.erase(kCheckpointFormatKey);
  for (const auto& entry : tensors_iv.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor())
      throw CheckpointError(where + ": 'tensors' holds an entry that is not string -> tensor");
    ck.tensors[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return ck;
}

// Stores CPU copies of every parameter and buffer of `m` under "<prefix>.<name>".
inline void put_module_state(Checkpoint& ck, const std::string& prefix, const torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  auto put = [&](const std::string& name, const torch::Tensor& t) {
    if (!t.defined()) return;
    ck.tensors[detail::join_key(prefix, name)] =
        t.detach().to(t.options().device(torch::kCPU), /*non_blocking=*/false, /*copy=*/true);
  };
  for (const auto& item : m.named_parameters(/*recurse=*/true)) put(item.key(), item.value());
  for (const auto& item : m.named_buffers(/*recurse=*/true)) put(item.key(), item.value());
}

// Copies "<prefix>.<name>" entries into the module's existing tensors (device and dtype kept).
inline void get_module_state(const Checkpoint& ck, const std::string& prefix, torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  auto get = [&](const std::string& name, torch::Tensor& dst) {
    if (!dst.defined()) return;
    const std::string key = detail::join_key(prefix, name);
    auto it = ck.tensors.find(key);
    if (it == ck.tensors.end())
      throw CheckpointError("checkpoint lacks module tensor '" + key + "' (shape " +
                            detail::shape_str(dst) + ")");
    if (it->second.sizes() != dst.sizes())
      throw CheckpointError("checkpoint tensor '" + key + "' has shape " +
                            detail::shape_str(it->second) + " but the module expects " +
                            detail::shape_str(dst));
  };
  // Check everything before copying anything, so a failed load leaves the module unchanged.
  auto params = m.named_parameters(true);
  auto buffers = m.named_buffers(true);
  for (auto& item : params) get(item.key(), item.value());
  for (auto& item : buffers) get(item.key(), item.value());
  auto copy = [&](const std::string& name, torch::Tensor& dst) {
    if (dst.defined()) dst.copy_(ck.tensors.at(detail::join_key(prefix, name)));
  };
  for (auto& item : params) copy(item.key(), item.value());
  for (auto& item : buffers) copy(item.key(), item.value());
}

}  // namespace libreyolo::train
