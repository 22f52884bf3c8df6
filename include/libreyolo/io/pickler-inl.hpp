#pragma once
// Definitions of pickle.hpp's writing half, the Pickler (core/api.hpp): included by pickle.hpp when
// header-only, compiled once otherwise. The reading half, the Unpickler, is in unpickler-inl.hpp.
#include <libreyolo/io/pickle.hpp>

namespace libreyolo::io {

LIBREYOLO_INLINE std::optional<std::string> storage_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "FloatStorage";
    case at::kDouble: return "DoubleStorage";
    case at::kHalf: return "HalfStorage";
    case at::kBFloat16: return "BFloat16Storage";
    case at::kLong: return "LongStorage";
    case at::kInt: return "IntStorage";
    case at::kShort: return "ShortStorage";
    case at::kChar: return "CharStorage";
    case at::kByte: return "ByteStorage";
    case at::kBool: return "BoolStorage";
    case at::kComplexFloat: return "ComplexFloatStorage";
    case at::kComplexDouble: return "ComplexDoubleStorage";
    default: return std::nullopt;
  }
}

LIBREYOLO_INLINE std::string Pickler::dump(const PyValue& v) {
  out_.clear();
  out_ += "\x80\x02";
  std::string path;
  emit(v, path, 0);
  out_ += '.';
  return out_;
}

LIBREYOLO_INLINE CheckpointError Pickler::err(const std::string& path, const std::string& what) const {
  return CheckpointError(what_ + ": cannot write " + (path.empty() ? std::string("the top-level value") : "'" + path + "'") +
                         ": " + what);
}

LIBREYOLO_INLINE void Pickler::u32(uint32_t x) {
  for (int j = 0; j < 4; ++j) out_ += static_cast<char>((x >> (8 * j)) & 0xFF);
}

LIBREYOLO_INLINE void Pickler::str(const std::string& s) {
  if (s.size() > 0xFFFFFFFFu) throw CheckpointError(what_ + ": cannot write a string of 4 GiB or more");
  out_ += 'X';
  u32(static_cast<uint32_t>(s.size()));
  out_ += s;
}

LIBREYOLO_INLINE void Pickler::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    out_ += 'K';
    out_ += static_cast<char>(v);
  } else if (v >= 0 && v < 65536) {
    out_ += 'M';
    out_ += static_cast<char>(v & 0xFF);
    out_ += static_cast<char>((v >> 8) & 0xFF);
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    out_ += 'J';
    u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {  // LONG1, minimal two's complement
    unsigned char b[8];
    const auto x = static_cast<uint64_t>(v);
    for (int j = 0; j < 8; ++j) b[j] = static_cast<unsigned char>((x >> (8 * j)) & 0xFF);
    int n = 8;
    while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xFF && (b[n - 2] & 0x80)))) --n;
    out_ += '\x8a';
    out_ += static_cast<char>(n);
    out_.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
  }
}

LIBREYOLO_INLINE void Pickler::global(const std::string& module, const std::string& name) {
  const std::string key = module + "\n" + name + "\n";
  auto it = memo_.find(key);
  if (it != memo_.end()) {
    if (it->second < 256) {
      out_ += 'h';
      out_ += static_cast<char>(it->second);
    } else {
      out_ += 'j';
      u32(it->second);
    }
    return;
  }
  out_ += 'c';
  out_ += key;
  const auto idx = static_cast<uint32_t>(memo_.size());
  memo_.emplace(key, idx);
  if (idx < 256) {
    out_ += 'q';
    out_ += static_cast<char>(idx);
  } else {
    out_ += 'r';
    u32(idx);
  }
}

LIBREYOLO_INLINE void Pickler::int_tuple(at::IntArrayRef xs) {
  out_ += '(';
  for (int64_t x : xs) integer(x);
  out_ += 't';
}

LIBREYOLO_INLINE void Pickler::tensor(const torch::Tensor& t0, const std::string& path) {
  if (!t0.defined()) throw err(path, "an undefined tensor");
  if (t0.layout() != c10::kStrided) throw err(path, "only dense (strided) tensors can be written");
  if (t0.is_quantized()) throw err(path, "quantized tensors are not supported");
  const auto sname = storage_name(t0.scalar_type());
  if (!sname) throw err(path, "tensors of dtype " + dtype_name(t0.scalar_type()) + " are not supported");
  torch::Tensor t = t0.detach();
  if (!t.device().is_cpu()) t = t.cpu();
  const size_t es = t.element_size();
  auto it = by_impl_.find(t.storage().unsafeGetStorageImpl());
  size_t idx;
  if (it != by_impl_.end() && storages_[it->second].keep.scalar_type() == t.scalar_type()) {
    idx = it->second;  // shares a storage already written
  } else {
    // A storage seen with another dtype, or one whose size is not whole elements, gets a copy.
    if (it != by_impl_.end() || t.storage().nbytes() % es != 0) t = t.contiguous().clone();
    static const char empty = 0;
    Storage s;
    s.key = std::to_string(storages_.size());
    s.nbytes = t.storage().nbytes();
    s.data = s.nbytes == 0 ? static_cast<const void*>(&empty)
                           : static_cast<const char*>(t.data_ptr()) - t.storage_offset() * static_cast<int64_t>(es);
    s.keep = t;
    idx = storages_.size();
    storages_.push_back(std::move(s));
    by_impl_.emplace(t.storage().unsafeGetStorageImpl(), idx);
  }
  const Storage& s = storages_[idx];
  global("torch._utils", "_rebuild_tensor_v2");
  out_ += '(';
  out_ += '(';
  str("storage");
  global("torch", *sname);
  str(s.key);
  str("cpu");
  integer(static_cast<int64_t>(s.nbytes / es));
  out_ += 't';
  out_ += 'Q';
  integer(t.storage_offset());
  int_tuple(t.sizes());
  int_tuple(t.strides());
  out_ += '\x89';
  global("collections", "OrderedDict");
  out_ += ")R";
  out_ += 't';
  out_ += 'R';
}

LIBREYOLO_INLINE void Pickler::emit(const PyValue& v, std::string& path, int depth) {
  if (depth > 256) throw err(path, "values nested deeper than 256 levels");
  using K = PyValue::Kind;
  switch (v.kind()) {
    case K::None: out_ += 'N'; return;
    case K::Bool: out_ += v.as_bool() ? '\x88' : '\x89'; return;
    case K::Int: integer(v.as_int()); return;
    case K::Float: {
      const double f = v.as_float();
      uint64_t x;
      std::memcpy(&x, &f, 8);
      out_ += 'G';
      for (int j = 7; j >= 0; --j) out_ += static_cast<char>((x >> (8 * j)) & 0xFF);
      return;
    }
    case K::String: str(v.as_string()); return;
    case K::Bytes: {
      const auto& b = v.as_bytes();
      if (b.size() < 256) {
        out_ += 'C';
        out_ += static_cast<char>(b.size());
      } else {
        if (b.size() > 0xFFFFFFFFu) throw err(path, "bytes of 4 GiB or more");
        out_ += 'B';
        u32(static_cast<uint32_t>(b.size()));
      }
      out_ += b;
      return;
    }
    case K::Tensor: tensor(v.as_tensor(), path); return;
    case K::Unsupported: throw err(path, "an unsupported placeholder (" + v.unsupported_what() + ") cannot be written back");
    case K::List:
    case K::Tuple: {
      const auto& items = v.items();
      const size_t base = path.size();
      auto item = [&](size_t j) {
        path += "[" + std::to_string(j) + "]";
        emit(items[j], path, depth + 1);
        path.resize(base);
      };
      if (v.is_tuple()) {
        if (items.empty()) {
          out_ += ')';
        } else if (items.size() <= 3) {
          for (size_t j = 0; j < items.size(); ++j) item(j);
          out_ += static_cast<char>(0x84 + items.size());
        } else {
          out_ += '(';
          for (size_t j = 0; j < items.size(); ++j) item(j);
          out_ += 't';
        }
        return;
      }
      out_ += ']';
      for (size_t j = 0; j < items.size(); j += 1000) {
        out_ += '(';
        for (size_t q = j; q < std::min(items.size(), j + 1000); ++q) item(q);
        out_ += 'e';
      }
      return;
    }
    case K::Dict: {
      const auto& items = v.dict_items();
      if (v.ordered()) {
        global("collections", "OrderedDict");
        out_ += ")R";
      } else {
        out_ += '}';
      }
      const size_t base = path.size();
      for (size_t j = 0; j < items.size(); j += 1000) {
        out_ += '(';
        for (size_t q = j; q < std::min(items.size(), j + 1000); ++q) {
          const auto& [k, val] = items[q];
          if (!(k.is_none() || k.is_number() || k.is_string() || k.is_bytes() || k.is_tuple()))
            throw err(path, std::string("a dict key of type ") + k.kind_name() + " cannot be written");
          emit(k, path, depth + 1);
          path += k.is_string() ? (path.empty() ? "" : ".") + k.as_string() : "[" + k.repr(40) + "]";
          emit(val, path, depth + 1);
          path.resize(base);
        }
        out_ += 'u';
      }
      return;
    }
  }
}

}  // namespace libreyolo::io
