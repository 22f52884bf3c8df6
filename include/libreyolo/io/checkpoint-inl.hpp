#pragma once
// Definitions of checkpoint.hpp (core/api.hpp): included by checkpoint.hpp when header-only, compiled once otherwise.
#include <libreyolo/io/checkpoint.hpp>

namespace libreyolo::train {

namespace detail {

LIBREYOLO_INLINE std::string shape_str(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

LIBREYOLO_INLINE std::string join_key(const std::string& prefix, const std::string& name) {
  if (prefix.empty() || prefix.back() == '.') return prefix + name;
  return prefix + "." + name;
}

LIBREYOLO_INLINE std::string meta_key(const std::string& prefix) {
  return !prefix.empty() && prefix.back() == '.' ? prefix.substr(0, prefix.size() - 1) : prefix;
}

LIBREYOLO_INLINE uint32_t content_crc(const std::string& meta, const std::map<std::string, torch::Tensor>& tensors) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  auto add = [&](const void* p, size_t n) { crc = crc32_z(crc, static_cast<const Bytef*>(p), n); };
  add(meta.data(), meta.size());
  for (const auto& [key, t] : tensors) {
    add(key.data(), key.size() + 1);
    const int64_t header[2] = {static_cast<int64_t>(t.scalar_type()), t.dim()};
    add(header, sizeof header);
    add(t.sizes().data(), t.sizes().size() * sizeof(int64_t));
    const torch::Tensor c = t.contiguous();
    if (c.numel() > 0) add(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  }
  return static_cast<uint32_t>(crc);
}

LIBREYOLO_INLINE std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

LIBREYOLO_INLINE void write_file_atomically(const std::filesystem::path& target,
                                            const std::function<void(const ByteSink&)>& produce) {
  if (auto why = atomic_file::write(target, "checkpoint", produce); !why.empty())
    throw CheckpointError("cannot write checkpoint " + target.string() + ": " + why);
}

}  // namespace detail

LIBREYOLO_INLINE int remove_stale_temp_files(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  if (!fs::is_directory(dir, ec)) return 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || !it->is_regular_file(ec)) continue;
    const std::string digits = name.substr(at + 5, name.find('.', at + 5) - (at + 5));  // "<pid>" or "<pid>.<tag>"
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::stol(digits);
    if (pid == ::getpid()) continue;  // ours: a save in progress on another thread
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;  // still running
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

LIBREYOLO_INLINE void save_checkpoint(const Checkpoint& ck, const std::filesystem::path& path) {
  c10::Dict<std::string, at::Tensor> dict;
  std::map<std::string, torch::Tensor> cpu;
  for (const auto& [key, t] : ck.tensors) {
    if (!t.defined())
      throw CheckpointError("cannot write checkpoint " + path.string() + ": tensor '" + key +
                            "' is undefined");
    cpu[key] = t.device().is_cpu() ? t.detach() : t.detach().cpu();
    dict.insert(key, cpu[key]);
  }
  nlohmann::json meta = ck.meta;
  if (!meta.is_object())
    throw CheckpointError("cannot write checkpoint " + path.string() + ": meta must be a JSON object");
  meta[kCheckpointFormatKey] = kCheckpointFormatVersion;

  std::string meta_text;
  try {
    meta_text = meta.dump();
  } catch (const nlohmann::json::exception& e) {  // type_error.316: a string that is not UTF-8
    throw CheckpointError("cannot write checkpoint " + path.string() +
                          ": its metadata holds text that is not valid UTF-8 (" + e.what() +
                          "); class names, paths and other settings must be UTF-8");
  }
  torch::serialize::OutputArchive archive;
  archive.write("meta", c10::IValue(meta_text));
  archive.write("tensors", c10::IValue(dict));
  archive.write("checksum", c10::IValue(detail::hex32(detail::content_crc(meta_text, cpu))));
  detail::write_file_atomically(path, [&](const detail::ByteSink& sink) {
    archive.save_to([&](const void* data, size_t n) -> size_t {
      sink(data, n);
      return n;
    });
  });
}

LIBREYOLO_INLINE Checkpoint load_checkpoint(const std::filesystem::path& path) {
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
  ck.source = path;
  constexpr int max_depth = 128;  // our meta nests a few levels; deeper would overflow the stack when printed
  try {
    ck.meta = nlohmann::json::parse(meta_iv.toStringRef(), [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > max_depth) throw CheckpointError(where + ": meta nests deeper than " + std::to_string(max_depth) + " levels");
      return true;
    });
  } catch (const CheckpointError&) {
    throw;
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
    const auto& t = entry.value().toTensor();
    if (!t.defined() || !t.device().is_cpu())
      throw CheckpointError(where + ": tensor '" + entry.key().toStringRef() + "' is undefined or not on the CPU");
    ck.tensors[entry.key().toStringRef()] = t;
  }
  if (version >= 2) {
    c10::IValue sum_iv;
    if (!archive.try_read("checksum", sum_iv) || !sum_iv.isString())
      throw CheckpointError(where + ": the 'checksum' entry of format " + std::to_string(version) +
                            " is missing (truncated or edited file)");
    const std::string want = sum_iv.toStringRef();
    const std::string got = detail::hex32(detail::content_crc(meta_iv.toStringRef(), ck.tensors));
    if (want != got)
      throw CheckpointError(where + ": checksum mismatch (stored " + want + ", computed " + got +
                            "): the file is corrupt (a flipped byte, a bad disk or copy); use another checkpoint");
  }
  for (const auto& [key, t] : ck.tensors) {
    if (!t.is_floating_point() || t.numel() == 0) continue;
    const int64_t bad = t.numel() - torch::isfinite(t).sum().item<int64_t>();
    if (bad > 0)
      throw CheckpointError(where + ": tensor '" + key + "' holds " + std::to_string(bad) + " NaN/Inf value(s) of " +
                            std::to_string(t.numel()) + " (the run that wrote it diverged); use an earlier checkpoint");
  }
  return ck;
}

LIBREYOLO_INLINE void put_module_state(Checkpoint& ck, const std::string& prefix, const torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  auto put = [&](const std::string& name, const torch::Tensor& t) {
    if (!t.defined()) return;
    ck.tensors[detail::join_key(prefix, name)] =
        t.detach().to(t.options().device(torch::kCPU), /*non_blocking=*/false, /*copy=*/true);
  };
  for (const auto& item : m.named_parameters(/*recurse=*/true)) put(item.key(), item.value());
  for (const auto& item : m.named_buffers(/*recurse=*/true)) put(item.key(), item.value());
}

namespace detail {
LIBREYOLO_INLINE nlohmann::json family_meta(const Checkpoint& ck) {
  return ck.meta.is_object() && ck.meta.contains("family") && ck.meta.at("family").is_object() ? ck.meta.at("family")
                                                                                              : nlohmann::json::object();
}

LIBREYOLO_INLINE std::optional<int64_t> family_classes(const Checkpoint& ck) {
  const auto fam = family_meta(ck);
  if (!fam.contains("nc") || !fam.at("nc").is_number_integer()) return std::nullopt;
  return fam.at("nc").get<int64_t>();
}

// get_module_state's body; new_classes: a class-count difference loads what matches (the names left out are
// returned) instead of throwing.
inline std::vector<std::string> load_module_state(const Checkpoint& ck, const std::string& prefix, torch::nn::Module& m,
                                                  bool new_classes) {
  torch::NoGradGuard no_grad;
  const std::string where = ck.source.empty() ? std::string("checkpoint") : "checkpoint " + ck.source.string();
  // Shape mismatches are collected to tell why: when the first tensor (the stem) matches and every
  // mismatch is in one dimension only, by one same amount, the head differs: another class count; otherwise
  // the widths differ: another model size.
  std::string first_mismatch;
  size_t mismatches = 0, seen = 0;
  bool stem_differs = false, one_dim = true, one_delta = true;
  int64_t class_delta = 0;
  auto get = [&](const std::string& name, torch::Tensor& dst) {
    if (!dst.defined()) return;
    const std::string key = detail::join_key(prefix, name);
    auto it = ck.tensors.find(key);
    if (it == ck.tensors.end())
      throw CheckpointError(where + " lacks module tensor '" + key + "' (shape " + detail::shape_str(dst) +
                            "): it was written for another model or size");
    const torch::Tensor& src = it->second;
    if (src.sizes() != dst.sizes()) {
      if (first_mismatch.empty())
        first_mismatch = "tensor '" + key + "' has shape " + detail::shape_str(src) + " but the module expects " + detail::shape_str(dst);
      ++mismatches;
      stem_differs = stem_differs || seen == 0;
      int differing = src.dim() == dst.dim() ? 0 : 2;
      for (int64_t d = 0; differing < 2 && d < src.dim(); ++d)
        if (src.size(d) != dst.size(d)) {
          ++differing;
          // A class count moves every class-dependent size by the same amount (nc rows, nc + 1 embeddings).
          const int64_t delta = src.size(d) - dst.size(d);
          one_delta = one_delta && (class_delta == 0 || class_delta == delta);
          class_delta = delta;
        }
      one_dim = one_dim && differing == 1;
    }
    ++seen;
  };
  // Check everything before copying anything, so a failed load leaves the module unchanged.
  auto params = m.named_parameters(true);
  auto buffers = m.named_buffers(true);
  for (auto& item : params) get(item.key(), item.value());
  for (auto& item : buffers) get(item.key(), item.value());
  const bool class_count_only = !stem_differs && one_dim && one_delta;
  if (mismatches && !(new_classes && class_count_only)) {
    const auto fam = family_meta(ck);
    std::string why;
    if (class_count_only) {
      const auto nc = family_classes(ck);
      why = "the class count differs: the checkpoint's head was built for ";
      why += nc ? std::to_string(*nc) + " classes" : std::string("another number of classes");
      why += ", the model for another (weights= of a model trained on a dataset with other classes?)";
    } else {
      why = "the model size differs: the checkpoint is of another width or depth";
      if (fam.contains("size") && fam.at("size").is_string()) why += " (its size is '" + fam.at("size").get<std::string>() + "')";
      why += "; give a model= of the checkpoint's size";
    }
    throw CheckpointError(where + ": " + first_mismatch +
                          (mismatches > 1 ? " (and " + std::to_string(mismatches - 1) + " more tensors of other shapes)" : std::string()) +
                          ": " + why);
  }
  // Every tensor of equal shape is copied; the others (only a class count's, and only when allowed) are named.
  std::vector<std::string> fresh;
  auto copy = [&](const std::string& name, torch::Tensor& dst) {
    if (!dst.defined()) return;
    const torch::Tensor& src = ck.tensors.at(detail::join_key(prefix, name));
    if (src.sizes() == dst.sizes()) dst.copy_(src);
    else fresh.push_back(name);
  };
  for (auto& item : params) copy(item.key(), item.value());
  for (auto& item : buffers) copy(item.key(), item.value());
  return fresh;
}
}  // namespace detail

LIBREYOLO_INLINE void get_module_state(const Checkpoint& ck, const std::string& prefix, torch::nn::Module& m) {
  detail::load_module_state(ck, prefix, m, /*new_classes=*/false);
}

LIBREYOLO_INLINE std::vector<std::string> get_module_state_new_classes(const Checkpoint& ck, const std::string& prefix,
                                                                       torch::nn::Module& m) {
  return detail::load_module_state(ck, prefix, m, /*new_classes=*/true);
}

}  // namespace libreyolo::train
