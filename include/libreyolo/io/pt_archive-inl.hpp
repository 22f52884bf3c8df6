#pragma once
// Definitions of pt_archive.hpp (core/api.hpp): included by pt_archive.hpp when header-only, compiled once otherwise.
#include <libreyolo/io/pt_archive.hpp>

namespace libreyolo::io {

namespace detail {

LIBREYOLO_INLINE std::string c10_message(const c10::Error& e) {
  std::string m = e.what_without_backtrace();
  const auto nl = m.find('\n');
  if (nl != std::string::npos) m.resize(nl);
  return m;
}

LIBREYOLO_INLINE PyValue read_archive(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in, const std::string& src,
                                      const PtReadOptions& opt) {
  const ZipDirectory dir = read_zip_directory(*in, src);
  const ZipEntry* pkl = dir.find(dir.prefix + "data.pkl");
  if (!pkl) {
    if (dir.find(dir.prefix + "constants.pkl") || dir.find(dir.prefix + "code/" + dir.prefix.substr(0, dir.prefix.size() - 1) + ".py"))
      throw CheckpointError(src + ": this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint");
    throw CheckpointError(src + ": missing record '" + dir.prefix + "data.pkl' (not a torch.save checkpoint)");
  }
  if (pkl->size > opt.max_pickle_bytes)
    throw CheckpointError(src + ": record '" + pkl->name + "' declares " + std::to_string(pkl->size) +
                          " bytes uncompressed, more than the limit of " + std::to_string(opt.max_pickle_bytes) +
                          " for a checkpoint's pickle; nothing was inflated");
  // Only the sizes vetted here reach miniz's allocations (PyTorchStreamReader reads `version` on
  // construction; the storages are vetted against the pickle below, before any is read).
  for (const auto& en : dir.entries) {
    if (en.name.rfind(dir.prefix, 0) != 0)
      throw CheckpointError(src + ": record '" + en.name + "' lies outside the archive folder '" + dir.prefix + "'");
    const std::string rel = en.name.substr(dir.prefix.size());
    if (&en != pkl && rel.rfind("data/", 0) != 0 && en.size > opt.max_other_record_bytes)
      throw CheckpointError(src + ": record '" + en.name + "' declares " + std::to_string(en.size) +
                            " bytes uncompressed, more than the " + std::to_string(opt.max_other_record_bytes) +
                            " a torch.save record other than data.pkl and the storages may have; nothing was inflated");
  }

  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(in);
  } catch (const c10::Error& e) {
    throw CheckpointError(src + ": unreadable torch.save archive: " + c10_message(e));
  }

  auto get = [&](const std::string& name) -> std::pair<at::DataPtr, size_t> {
    const ZipEntry* en = dir.find(dir.prefix + name);
    if (!en) throw CheckpointError(src + ": missing record '" + dir.prefix + name + "'");
    std::tuple<at::DataPtr, size_t> rec;
    try {
      rec = reader->getRecord(name);
    } catch (const c10::Error& e) {
      throw CheckpointError(src + ": cannot read record '" + en->name + "': " + c10_message(e));
    }
    auto& [ptr, n] = rec;
    if (n != en->size)
      throw CheckpointError(src + ": record '" + en->name + "' read " + std::to_string(n) + " bytes, the directory says " +
                            std::to_string(en->size));
    if (opt.verify_crc && !(en->crc == 0 && n > 0)) {
      const uint32_t c = crc32(ptr.get(), n);
      if (c != en->crc) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "stored 0x%08x, computed 0x%08x", en->crc, c);
        throw CheckpointError(src + ": CRC-32 mismatch in record '" + en->name + "' (" + buf +
                              "): the file is corrupted");
      }
    }
    return {std::move(ptr), n};
  };

  if (dir.find(dir.prefix + "byteorder")) {
    auto [bo, n] = get("byteorder");
    const std::string order(static_cast<const char*>(bo.get()), n);
    if (order != "little")
      throw CheckpointError(src + ": saved with byte order '" + order.substr(0, 16) + "'; only little-endian checkpoints are supported");
  }

  auto [pdata, pn] = get("data.pkl");
  // Pass 1: the pickle against the storage sizes the zip directory declares, nothing inflated. The
  // unpickler compares each storage id's element count x element size with the size it is given and
  // only builds views over it (no byte is read), so the loader hands it an unbacked tensor.
  {
    alignas(64) static unsigned char unread[64];
    uint64_t total = 0;
    StorageLoader declared = [&](const std::string& key) -> torch::Tensor {
      const ZipEntry* en = dir.find(dir.prefix + "data/" + key);
      if (!en) throw CheckpointError(src + ": missing record '" + dir.prefix + "data/" + key + "' (the pickle names storage '" + key + "')");
      if (en->size > opt.max_storage_bytes || total + en->size > opt.max_storage_bytes)
        throw CheckpointError(src + ": record '" + en->name + "' declares " + std::to_string(en->size) + " bytes uncompressed" +
                              (total ? " (after " + std::to_string(total) + " bytes of other storages)" : std::string()) +
                              ", more than the limit of " + std::to_string(opt.max_storage_bytes) +
                              " bytes of tensor storage per checkpoint; nothing was inflated");
      total += en->size;
      return at::from_blob(unread, {static_cast<int64_t>(en->size)}, torch::TensorOptions().dtype(torch::kUInt8));
    };
    std::vector<std::string> ignored;
    Unpickler vet(static_cast<const char*>(pdata.get()), pn, src, declared, opt.limits);
    (void)vet.load(ignored);
  }

  StorageLoader loader = [&](const std::string& key) -> torch::Tensor {
    auto [ptr, n] = get("data/" + key);
    if (n == 0) return torch::empty({0}, torch::kUInt8);
    auto holder = std::make_shared<at::DataPtr>(std::move(ptr));
    void* raw = holder->get();
    return at::from_blob(raw, {static_cast<int64_t>(n)}, [holder](void*) mutable { holder.reset(); },
                         torch::TensorOptions().dtype(torch::kUInt8));
  };
  std::vector<std::string> local;
  std::vector<std::string>& warnings = opt.warnings ? *opt.warnings : local;
  Unpickler up(static_cast<const char*>(pdata.get()), pn, src, loader, opt.limits);
  PyValue v = up.load(warnings);
  if (!opt.warnings)
    for (const auto& w : local) log::warn(w);
  return v;
}

}  // namespace detail

LIBREYOLO_INLINE PyValue read_pt(const std::string& path, const PtReadOptions& opt) {
  auto in = std::make_shared<FileReadAdapter>(path);
  return detail::read_archive(std::move(in), path, opt);
}

LIBREYOLO_INLINE PyValue read_pt(const std::string& path, std::vector<std::string>* warnings) {
  PtReadOptions o;
  o.warnings = warnings;
  return read_pt(path, o);
}

LIBREYOLO_INLINE PyValue read_pt_bytes(const void* data, size_t size, const std::string& name,
                                       const PtReadOptions& opt) {
  auto in = std::make_shared<MemoryReadAdapter>(data, size);
  return detail::read_archive(std::move(in), name, opt);
}

LIBREYOLO_INLINE PyValue read_pt_bytes(const std::string& bytes, const std::string& name, const PtReadOptions& opt) {
  return read_pt_bytes(bytes.data(), bytes.size(), name, opt);
}

LIBREYOLO_INLINE std::string write_pt_bytes(const PyValue& root, const std::string& what) {
  Pickler pk(what);
  const std::string pkl = pk.dump(root);
  std::string out;
  try {
    caffe2::serialize::PyTorchStreamWriter w([&out](const void* buf, size_t n) -> size_t {
      out.append(static_cast<const char*>(buf), n);
      return n;
    });
    w.writeRecord("data.pkl", pkl.data(), pkl.size());
    w.writeRecord("byteorder", "little", 6);
    for (const auto& s : pk.storages()) w.writeRecord("data/" + s.key, s.data, s.nbytes);
    w.writeEndOfFile();
  } catch (const c10::Error& e) {
    throw CheckpointError(what + ": cannot build the checkpoint archive: " + detail::c10_message(e));
  }
  return out;
}

LIBREYOLO_INLINE void write_pt(const std::string& path, const PyValue& root) {
  const auto remedy = atomic_file::out_remedy;
  atomic_file::check_target(path, "export", remedy);  // before the archive is built
  const std::string bytes = write_pt_bytes(root, path);
  if (auto why = atomic_file::write(path, "export", std::string_view(bytes), {.remedy = remedy}); !why.empty())
    throw CheckpointError(path + ": cannot write the checkpoint (" + why + ")");
}

LIBREYOLO_INLINE nlohmann::ordered_json to_json(const PyValue& v) {
  using K = PyValue::Kind;
  switch (v.kind()) {
    case K::None: return nullptr;
    case K::Bool: return v.as_bool();
    case K::Int: return v.as_int();
    case K::Float: {
      const double f = v.as_float();
      if (std::isnan(f)) return "nan";
      if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
      return f;
    }
    case K::String: return v.as_string();
    case K::Bytes:
    case K::Tensor:
    case K::Unsupported: return v.repr(200);
    case K::List:
    case K::Tuple: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& e : v.items()) a.push_back(to_json(e));
      return a;
    }
    case K::Dict: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, e] : v.dict_items()) o[k.is_string() ? k.as_string() : k.repr(200)] = to_json(e);
      return o;
    }
  }
  return nullptr;
}

LIBREYOLO_INLINE StateDict state_dict(const PyValue& root, std::string_view key, std::string_view what) {
  const std::string w(what);
  const PyValue* sd = &root;
  std::string label = "the top-level value";
  if (!key.empty()) {
    label = "'" + std::string(key) + "'";
    if (!root.is_dict()) throw CheckpointError(w + ": the checkpoint is of type " + root.kind_name() + ", not a dict");
    sd = root.find(key);
    if (!sd) {
      std::string have;
      for (const auto& [k, v] : root.dict_items()) have += (have.empty() ? "" : ", ") + k.repr(40);
      throw CheckpointError(w + ": no " + label + " entry (the checkpoint has: " + have + ")");
    }
  }
  if (!sd->is_dict()) throw CheckpointError(w + ": " + label + " is of type " + sd->kind_name() + ", not a state dict (a dict of tensors)");
  StateDict out;
  out.reserve(sd->size());
  for (const auto& [k, v] : sd->dict_items()) {
    if (!k.is_string()) throw CheckpointError(w + ": " + label + " has the non-string key " + k.repr(60));
    if (!v.is_tensor())
      throw CheckpointError(w + ": " + label + "['" + k.as_string() + "'] is " +
                            (v.is_unsupported() ? v.repr(120) : std::string("a ") + v.kind_name()) + ", not a tensor");
    out.emplace_back(k.as_string(), v.as_tensor());
  }
  return out;
}

LIBREYOLO_INLINE StateDict module_state_dict(const torch::nn::Module& m) {
  StateDict out;
  auto own = [&out](const torch::nn::Module& mod, const std::string& prefix) {
    for (const auto& p : mod.named_parameters(false)) out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : mod.named_buffers(false))
      if (b.value().defined()) out.emplace_back(prefix + b.key(), b.value());
  };
  own(m, "");
  for (const auto& sub : m.named_modules("", /*include_self=*/false)) own(*sub.value(), sub.key() + ".");
  return out;
}

LIBREYOLO_INLINE size_t load_state_dict_strict(torch::nn::Module& m, const StateDict& state, std::string_view what) {
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (const auto& p : m.named_parameters(true)) targets.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers(true))
    if (b.value().defined()) targets.emplace_back(b.key(), b.value());
  std::map<std::string, size_t> src;
  std::vector<std::string> duplicate, missing, unexpected, shape;
  for (size_t i = 0; i < state.size(); ++i)
    if (!src.emplace(state[i].first, i).second) duplicate.push_back(state[i].first);
  std::set<std::string> seen;
  auto dims = [](const torch::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
  };
  for (const auto& [name, t] : targets) {
    seen.insert(name);
    auto it = src.find(name);
    if (it == src.end()) {
      missing.push_back(name);
      continue;
    }
    const torch::Tensor& s = state[it->second].second;
    if (!s.defined() || s.sizes() != t.sizes())
      shape.push_back(name + " (checkpoint " + (s.defined() ? dims(s) : std::string("undefined")) + ", model " + dims(t) + ")");
  }
  for (const auto& [name, t] : state)
    if (!seen.count(name)) unexpected.push_back(name);
  if (!duplicate.empty() || !missing.empty() || !unexpected.empty() || !shape.empty()) {
    auto part = [](const std::vector<std::string>& v, const char* one, const char* many) {
      if (v.empty()) return std::string();
      std::string s = "; " + std::to_string(v.size()) + " " + (v.size() == 1 ? one : many) + ": ";
      for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : "") + v[i];
      if (v.size() > 5) s += ", ... (" + std::to_string(v.size() - 5) + " more)";
      return s;
    };
    std::string msg = std::string(what) + ": the state dict does not match the model (" + std::to_string(state.size()) +
                      " tensors in the checkpoint, " + std::to_string(targets.size()) + " in the model)";
    msg += part(missing, "missing key", "missing keys");
    msg += part(unexpected, "unexpected key", "unexpected keys");
    msg += part(shape, "shape mismatch", "shape mismatches");
    msg += part(duplicate, "duplicated key", "duplicated keys");
    throw CheckpointError(msg + "; nothing was loaded");
  }
  torch::NoGradGuard ng;
  for (auto& [name, t] : targets) t.copy_(state[src.at(name)].second);
  return targets.size();
}

}  // namespace libreyolo::io
