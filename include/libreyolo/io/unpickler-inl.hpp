#pragma once
// Definitions of pickle.hpp's reading half, the Unpickler (core/api.hpp): included by pickle.hpp when
// header-only, compiled once otherwise. The writing half, the Pickler, is in pickler-inl.hpp.
#include <libreyolo/io/pickle.hpp>

namespace libreyolo::io {

LIBREYOLO_INLINE std::optional<at::ScalarType> storage_dtype(std::string_view name) {
  static const std::map<std::string, at::ScalarType, std::less<>> m = {
      {"FloatStorage", at::kFloat},        {"DoubleStorage", at::kDouble},   {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16},  {"LongStorage", at::kLong},       {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},        {"CharStorage", at::kChar},       {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool},          {"ComplexFloatStorage", at::kComplexFloat},
      {"ComplexDoubleStorage", at::kComplexDouble}, {"UntypedStorage", at::kByte}};
  auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

namespace detail {

LIBREYOLO_INLINE std::string sanitize_utf8(const char* p, size_t n) {
  std::string out;
  out.reserve(n);
  size_t i = 0;
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  while (i < n) {
    const unsigned c = u[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    uint32_t cp = 0;
    if (ok) {
      cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t k = 1; k < len && ok; ++k) {
        if ((u[i + k] >> 6) != 2) ok = false;
        cp = (cp << 6) | (u[i + k] & 0x3F);
      }
      if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                 (cp >= 0xD800 && cp <= 0xDFFF)))
        ok = false;
    }
    if (ok) {
      out.append(p + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

LIBREYOLO_INLINE bool utf8_to_latin1(const std::string& s, std::string& out) {
  out.clear();
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    if (u[i] < 0x80) {
      out += static_cast<char>(u[i++]);
    } else if ((u[i] >> 5) == 6 && i + 1 < s.size()) {
      const unsigned cp = ((u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
      if (cp > 0xFF) return false;
      out += static_cast<char>(cp);
      i += 2;
    } else {
      return false;
    }
  }
  return true;
}

LIBREYOLO_INLINE std::string latin1_to_utf8(const char* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

LIBREYOLO_INLINE bool denied_global(const std::string& module, const std::string& name) {
  const std::string top = module.substr(0, module.find('.'));
  static const std::set<std::string> mods = {
      "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "sys", "shutil", "socket", "importlib", "pickle",
      "_pickle", "cPickle", "pickletools", "marshal", "runpy", "code", "codeop", "pty", "ctypes", "_ctypes", "types",
      "functools", "operator", "_operator", "webbrowser", "commands", "platform", "multiprocessing", "threading",
      "_thread", "signal", "io", "_io", "tempfile", "glob", "inspect", "pdb", "bdb", "timeit", "asyncio", "ssl", "http",
      "urllib", "urllib2", "requests", "pydoc", "trace", "profile", "cProfile", "dill", "cloudpickle", "joblib",
      "shelve", "dbm", "sqlite3", "zipimport", "pkgutil", "site", "sysconfig", "distutils", "setuptools", "pip",
      "ensurepip", "venv", "gc", "weakref", "atexit", "copy", "fcntl", "resource", "mmap", "select", "selectors",
      "smtplib", "ftplib", "telnetlib", "xmlrpc", "socketserver", "imp", "zipfile", "tarfile", "compileall",
      "py_compile", "ast", "dis", "linecache", "tokenize", "readline", "rlcompleter", "sched", "concurrent",
      "contextlib", "string", "logging"};
  if (mods.count(top)) return true;
  if (top == "builtins" || top == "__builtin__") {
    static const std::set<std::string> ok = {"set",   "frozenset", "bytearray", "bytes", "slice", "complex", "range",
                                             "int",   "float",     "str",       "bool",  "list",  "dict",    "tuple",
                                             "object"};
    return module.find('.') != std::string::npos || !ok.count(name);
  }
  if (top == "torch") {
    static const std::vector<std::string> bad = {"torch.hub",     "torch.jit",    "torch._C",          "torch.ops",
                                                 "torch.package", "torch.classes", "torch.utils.cpp_extension",
                                                 "torch._dynamo", "torch.multiprocessing", "torch.distributed",
                                                 "torch.cuda",    "torch.backends", "torch.serialization"};
    for (const auto& b : bad)
      if (module == b || module.rfind(b + ".", 0) == 0) return true;
    if (module == "torch" && (name == "load" || name == "save" || name == "compile" || name == "eval" ||
                              name.rfind("_C", 0) == 0 || name.find("library") != std::string::npos))
      return true;
  }
  if (top == "numpy") {
    if (module.find("testing") != std::string::npos || module.find("f2py") != std::string::npos ||
        module.find("distutils") != std::string::npos || module.find("ctypeslib") != std::string::npos)
      return true;
    if (name == "load" || name == "loadtxt" || name == "genfromtxt" || name == "fromfile" || name == "memmap" ||
        name.rfind("save", 0) == 0)
      return true;
  }
  return false;
}

}  // namespace detail

LIBREYOLO_INLINE Unpickler::Unpickler(const char* data, size_t size, std::string src, StorageLoader loader, PickleLimits lim)
    : p_(reinterpret_cast<const unsigned char*>(data)), n_(size), src_(std::move(src)), loader_(std::move(loader)),
      lim_(lim) {}

LIBREYOLO_INLINE PyValue Unpickler::load(std::vector<std::string>& warnings) {
  Obj* top = run();
  warnings_ = &warnings;
  budget_ = 8 * arena_.size() + (size_t(1) << 20);
  std::string path;
  PyValue v = convert(top, path, 0);
  if (n_warn_ > lim_.max_warnings)
    warnings.push_back(src_ + ": ... and " + std::to_string(n_warn_ - lim_.max_warnings) + " more unsupported values");
  return v;
}

LIBREYOLO_INLINE CheckpointError Unpickler::err(const std::string& what) const {
  return CheckpointError(src_ + ": data.pkl byte " + std::to_string(op_pos_) + ": " + what);
}

LIBREYOLO_INLINE const char* Unpickler::tname(T t) {
  switch (t) {
    case T::None: return "None";
    case T::Bool: return "bool";
    case T::Int: return "int";
    case T::Float: return "float";
    case T::Str: return "str";
    case T::Bytes: return "bytes";
    case T::List: return "list";
    case T::Tuple: return "tuple";
    case T::Dict: return "dict";
    case T::Tensor: return "tensor";
    case T::Unsupported: return "unsupported object";
    case T::Global: return "global";
    case T::Storage: return "storage";
    case T::NpDtype: return "numpy dtype";
  }
  return "?";
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::make(T t) {
  if (arena_.size() >= lim_.max_objects)
    throw err("the pickle builds more than " + std::to_string(lim_.max_objects) + " objects (limit)");
  arena_.emplace_back();
  arena_.back().t = t;
  return &arena_.back();
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::make_int(int64_t x) {
  Obj* o = make(T::Int);
  o->i = x;
  return o;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::make_str(std::string s, T t) {
  Obj* o = make(t);
  o->s = std::move(s);
  return o;
}

LIBREYOLO_INLINE std::string Unpickler::canon(const Obj* k, int depth) const {
  if (depth > 16) throw err("dict key nested too deeply");
  switch (k->t) {
    case T::None: return "N";
    case T::Bool:
    case T::Int: return "i" + std::to_string(k->i);
    case T::Float: {
      if (std::isfinite(k->f) && std::floor(k->f) == k->f && std::fabs(k->f) < 9.2e18)
        return "i" + std::to_string(static_cast<int64_t>(k->f));
      uint64_t bits;
      std::memcpy(&bits, &k->f, 8);
      return "f" + std::to_string(bits);
    }
    case T::Str: return "s" + std::to_string(k->s.size()) + ":" + k->s;
    case T::Bytes: return "b" + std::to_string(k->s.size()) + ":" + k->s;
    case T::Tuple: {
      std::string r = "t" + std::to_string(k->v.size()) + "(";
      for (const Obj* e : k->v) r += canon(e, depth + 1) + ",";
      return r + ")";
    }
    case T::List:
    case T::Dict: throw err(std::string("unhashable dict key of type ") + tname(k->t));
    default: return "p" + std::to_string(reinterpret_cast<uintptr_t>(k));  // identity, as Python hashes objects
  }
}

LIBREYOLO_INLINE void Unpickler::dict_set(Obj* d, Obj* k, Obj* v) {
  auto& idx = dict_index_[d];
  auto [it, fresh] = idx.emplace(canon(k), d->v.size() + 1);
  if (fresh) {
    d->v.push_back(k);
    d->v.push_back(v);
  } else {
    d->v[it->second] = v;
  }
}

LIBREYOLO_INLINE void Unpickler::push(Obj* o) {
  if (stack_.size() >= lim_.max_stack) throw err("pickle stack exceeds " + std::to_string(lim_.max_stack) + " entries");
  stack_.push_back(o);
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::pop() {
  if (stack_.size() <= floor_()) throw err("pickle stack underflow");
  Obj* o = stack_.back();
  stack_.pop_back();
  return o;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::top() {
  if (stack_.size() <= floor_()) throw err("pickle stack underflow");
  return stack_.back();
}

LIBREYOLO_INLINE std::vector<Unpickler::Obj*> Unpickler::pop_mark() {
  if (marks_.empty()) throw err("opcode needs a MARK, and there is none");
  const size_t m = marks_.back();
  marks_.pop_back();
  std::vector<Obj*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

LIBREYOLO_INLINE const unsigned char* Unpickler::take(size_t k, const char* what) {
  if (n_ - pos_ < k)
    throw err(std::string("truncated pickle: ") + what + " needs " + std::to_string(k) + " bytes, " +
              std::to_string(n_ - pos_) + " remain");
  const unsigned char* r = p_ + pos_;
  pos_ += k;
  return r;
}

LIBREYOLO_INLINE uint64_t Unpickler::le(size_t k, const char* what) {
  const unsigned char* b = take(k, what);
  uint64_t x = 0;
  for (size_t j = 0; j < k; ++j) x |= static_cast<uint64_t>(b[j]) << (8 * j);
  return x;
}

LIBREYOLO_INLINE std::string Unpickler::line(const char* what, size_t max_len) {
  const size_t start = pos_;
  while (pos_ < n_ && p_[pos_] != '\n') {
    if (pos_ - start >= max_len) throw err(std::string(what) + " line is longer than " + std::to_string(max_len) + " bytes");
    ++pos_;
  }
  if (pos_ >= n_) throw err(std::string("truncated pickle: unterminated ") + what + " line");
  std::string s(reinterpret_cast<const char*>(p_ + start), pos_ - start);
  ++pos_;
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

LIBREYOLO_INLINE bool Unpickler::parse_i64(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  out = v;
  return true;
}

LIBREYOLO_INLINE void Unpickler::memo_put(uint64_t idx) {
  Obj* o = top();
  if (memo_.size() >= lim_.max_memo && !memo_.count(idx))
    throw err("pickle memo exceeds " + std::to_string(lim_.max_memo) + " entries");
  memo_[idx] = o;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::memo_get(uint64_t idx) {
  auto it = memo_.find(idx);
  if (it == memo_.end()) throw err("memo key " + std::to_string(idx) + " was never stored (corrupted pickle)");
  return it->second;
}

LIBREYOLO_INLINE bool Unpickler::valid_name(const std::string& s) {
  if (s.empty() || s.size() > 256) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::global(std::string module, std::string name) {
  if (!valid_name(module) || !valid_name(name))
    throw err("malformed global name '" + detail::sanitize_utf8(module.data(), std::min<size_t>(module.size(), 80)) +
              " " + detail::sanitize_utf8(name.data(), std::min<size_t>(name.size(), 80)) + "'");
  if (module == "__builtin__") module = "builtins";
  if (module == "copy_reg") module = "copyreg";
  const std::string full = module + "." + name;
  if (detail::denied_global(module, name))
    throw err("the pickle names the global '" + full +
              "', which gives code execution or system access; a checkpoint has no use for it, so the file is "
              "refused (libreyolo never runs pickle code)");
  Obj* o = make_str(full, T::Global);
  G g = G::Unknown;
  if (full == "collections.OrderedDict") g = G::OrderedDict;
  else if (full == "builtins.dict") g = G::Dict;
  else if (full == "torch._utils._rebuild_tensor_v2") g = G::RebuildTensorV2;
  else if (full == "torch._utils._rebuild_tensor") g = G::RebuildTensor;
  else if (full == "torch._utils._rebuild_parameter") g = G::RebuildParameter;
  else if (full == "torch._utils._rebuild_parameter_with_state") g = G::RebuildParameterWithState;
  else if (full == "torch._tensor._rebuild_from_type_v2") g = G::RebuildFromTypeV2;
  else if ((module == "torch" || module == "torch.storage") && storage_dtype(name)) g = G::StorageType;
  else if (full == "numpy.core.multiarray.scalar" || full == "numpy._core.multiarray.scalar") g = G::NpScalar;
  else if (full == "numpy.dtype") g = G::NpDtype;
  else if (full == "builtins.set" || full == "builtins.frozenset") g = G::Set;
  else if (full == "builtins.bytearray" || full == "builtins.bytes") g = G::Bytearray;
  else if (full == "_codecs.encode") g = G::CodecsEncode;
  else if (full == "copyreg._reconstructor") g = G::Reconstructor;
  else if (full == "torch.Size") g = G::TorchSize;
  else if (full == "torch.Tensor" || full == "torch.nn.parameter.Parameter" || full == "torch.nn.Parameter")
    g = G::TorchTensorType;
  o->g = g;
  return o;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::persistent_load(Obj* pid) {
  if (pid->t != T::Tuple || pid->v.size() != 5 || pid->v[0]->t != T::Str || pid->v[0]->s != "storage")
    throw err("persistent id is not a ('storage', type, key, location, numel) tuple");
  Obj* type = pid->v[1];
  Obj* key = pid->v[2];
  Obj* numel = pid->v[4];
  if (type->t != T::Global || type->g != G::StorageType)
    throw err("persistent id names the storage type " + (type->t == T::Global ? "'" + type->s + "'" : std::string(tname(type->t))) +
              ", not a torch.*Storage");
  if (key->t != T::Str || key->s.empty() || key->s.size() > 64)
    throw err("persistent id has a bad storage key");
  for (char c : key->s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) throw err("persistent id has a bad storage key '" + key->s + "'");
  if (pid->v[3]->t != T::Str) throw err("persistent id's location is not a string");
  if (numel->t != T::Int || numel->i < 0) throw err("persistent id's element count is not a non-negative int");
  const at::ScalarType dt = *storage_dtype(type->s.substr(type->s.rfind('.') + 1));
  const int64_t es = static_cast<int64_t>(c10::elementSize(dt));
  auto it = storages_.find(key->s);
  if (it == storages_.end()) it = storages_.emplace(key->s, loader_(key->s)).first;
  const torch::Tensor& bytes = it->second;
  if (numel->i > std::numeric_limits<int64_t>::max() / es || numel->i * es != bytes.numel())
    throw err("storage record 'data/" + key->s + "' is " + std::to_string(bytes.numel()) +
              " bytes (as the zip directory declares it), but the pickle says " +
              std::to_string(numel->i) + " elements of " + dtype_name(dt) + " (" +
              (numel->i > std::numeric_limits<int64_t>::max() / es ? std::string("too many") : std::to_string(numel->i * es)) +
              " bytes)");
  Obj* o = make(T::Storage);
  o->s = key->s;
  o->tensor = bytes;
  o->dtype = dt;
  return o;
}

LIBREYOLO_INLINE std::vector<int64_t> Unpickler::int_tuple(Obj* o, const char* what) {
  if (o->t != T::Tuple && o->t != T::List) throw err(std::string("tensor ") + what + " is a " + tname(o->t) + ", not a tuple");
  if (o->v.size() > 64) throw err(std::string("tensor ") + what + " has more than 64 dimensions");
  std::vector<int64_t> r;
  for (Obj* e : o->v) {
    if (e->t != T::Int || e->i < 0) throw err(std::string("tensor ") + what + " holds a value that is not a non-negative int");
    r.push_back(e->i);
  }
  return r;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::rebuild_tensor(const std::vector<Obj*>& a) {
  if (a.size() < 4) throw err("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...), got " + std::to_string(a.size()) + " arguments");
  Obj* st = a[0];
  if (st->t != T::Storage) throw err(std::string("a tensor's storage is a ") + tname(st->t) + ", not a storage record");
  if (a[1]->t != T::Int || a[1]->i < 0) throw err("a tensor's storage offset is not a non-negative int");
  const int64_t offset = a[1]->i;
  const auto size = int_tuple(a[2], "size");
  const auto stride = int_tuple(a[3], "stride");
  if (size.size() != stride.size())
    throw err("a tensor has " + std::to_string(size.size()) + " sizes but " + std::to_string(stride.size()) + " strides");
  const int64_t es = static_cast<int64_t>(c10::elementSize(st->dtype));
  const int64_t elems = st->tensor.numel() / es;
  bool empty = false;
  unsigned __int128 last = static_cast<unsigned __int128>(offset);
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] == 0) empty = true;
    if (size[d] > (int64_t(1) << 48) || stride[d] > (int64_t(1) << 48)) throw err("a tensor's size or stride is implausibly large");
    if (size[d] > 0) last += static_cast<unsigned __int128>(size[d] - 1) * static_cast<unsigned __int128>(stride[d]);
  }
  auto shape_str = [&] {
    std::string s = "[";
    for (size_t d = 0; d < size.size(); ++d) s += (d ? ", " : "") + std::to_string(size[d]);
    return s + "]";
  };
  if (empty ? offset > elems : last >= static_cast<unsigned __int128>(elems))
    throw err("storage too small: a tensor of size " + shape_str() + " at offset " + std::to_string(offset) +
              " needs " + (empty ? std::to_string(offset) : std::to_string(static_cast<uint64_t>(last + 1))) +
              " elements, but storage record 'data/" + st->s + "' holds " + std::to_string(elems) + " " +
              dtype_name(st->dtype) + " elements");
  Obj* o = make(T::Tensor);
  o->tensor = st->tensor.view(st->dtype).as_strided(size, stride, offset);
  return o;
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::numpy_scalar(Obj* dtype, Obj* data) {
  if (dtype->t != T::NpDtype || data->t != T::Bytes) return unsupported("numpy scalar");
  std::string code = dtype->s;
  char order = static_cast<char>(dtype->i);
  if (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=')) {
    order = code[0];
    code = code.substr(1);
  }
  if (code.size() < 2) return unsupported("numpy scalar of dtype '" + dtype->s + "'");
  const char kind = code[0];
  int64_t width = 0;
  if (!parse_i64(code.substr(1), width) || static_cast<int64_t>(data->s.size()) != width)
    return unsupported("numpy scalar of dtype '" + dtype->s + "'");
  std::string b = data->s;
  if (order == '>') std::reverse(b.begin(), b.end());
  auto u = [&] {
    uint64_t x = 0;
    for (size_t j = 0; j < b.size(); ++j) x |= static_cast<uint64_t>(static_cast<unsigned char>(b[j])) << (8 * j);
    return x;
  };
  if (kind == 'f' && (width == 2 || width == 4 || width == 8)) {
    Obj* o = make(T::Float);
    const uint64_t x = u();
    if (width == 8) std::memcpy(&o->f, &x, 8);
    if (width == 4) {
      const auto x4 = static_cast<uint32_t>(x);
      float f;
      std::memcpy(&f, &x4, 4);
      o->f = f;
    }
    if (width == 2) o->f = static_cast<float>(c10::Half(static_cast<uint16_t>(x), c10::Half::from_bits()));
    return o;
  }
  if ((kind == 'i' || kind == 'u') && (width == 1 || width == 2 || width == 4 || width == 8)) {
    uint64_t x = u();
    if (kind == 'u' && width == 8 && x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return unsupported("numpy uint64 scalar above 2**63");
    if (kind == 'i' && width < 8 && (x >> (8 * width - 1)) & 1u) x |= ~uint64_t(0) << (8 * width);  // sign-extend
    return make_int(static_cast<int64_t>(x));
  }
  if (kind == 'b' && width == 1) {
    Obj* o = make(T::Bool);
    o->i = b[0] != 0;
    return o;
  }
  return unsupported("numpy scalar of dtype '" + dtype->s + "'");
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::call(Obj* fn, Obj* args, int depth) {
  if (fn->t != T::Global) throw err(std::string("REDUCE calls a ") + tname(fn->t) + ", not a global");
  if (args->t != T::Tuple) throw err(std::string("REDUCE arguments are a ") + tname(args->t) + ", not a tuple");
  const auto& a = args->v;
  switch (fn->g) {
    case G::OrderedDict:
    case G::Dict: {
      Obj* d = make(T::Dict);
      d->ordered = fn->g == G::OrderedDict;
      if (!a.empty()) {
        Obj* src = a[0];
        if (src->t == T::Dict) {
          for (size_t j = 0; j + 1 < src->v.size(); j += 2) dict_set(d, src->v[j], src->v[j + 1]);
        } else if (src->t == T::List || src->t == T::Tuple) {
          for (Obj* pr : src->v) {
            if ((pr->t != T::Tuple && pr->t != T::List) || pr->v.size() != 2) throw err("OrderedDict() item is not a pair");
            dict_set(d, pr->v[0], pr->v[1]);
          }
        } else {
          throw err(std::string("OrderedDict() of a ") + tname(src->t));
        }
      }
      return d;
    }
    case G::RebuildTensorV2:
    case G::RebuildTensor: return rebuild_tensor(a);
    case G::RebuildParameter:
    case G::RebuildParameterWithState:
      if (a.empty() || a[0]->t != T::Tensor) throw err("_rebuild_parameter's data is not a tensor");
      return a[0];
    case G::RebuildFromTypeV2: {
      if (a.size() < 3 || a[0]->t != T::Global || a[2]->t != T::Tuple || depth > 0)
        throw err("malformed _rebuild_from_type_v2 call");
      if (a[1]->t != T::Global || a[1]->g != G::TorchTensorType)
        return unsupported("tensor subclass " + (a[1]->t == T::Global ? a[1]->s : std::string("?")));
      return call(a[0], a[2], depth + 1);
    }
    case G::NpDtype: {
      if (a.empty() || a[0]->t != T::Str) return unsupported("numpy.dtype(...)");
      Obj* o = make_str(a[0]->s, T::NpDtype);
      o->i = '=';
      return o;
    }
    case G::NpScalar:
      if (a.size() != 2) return unsupported("numpy scalar");
      return numpy_scalar(a[0], a[1]);
    case G::Set: {
      Obj* l = make(T::List);
      if (!a.empty()) {
        if (a[0]->t != T::List && a[0]->t != T::Tuple) return unsupported(fn->s + "(...)");
        l->v = a[0]->v;
      }
      return l;
    }
    case G::Bytearray: {
      if (a.empty()) return make_str("", T::Bytes);
      if (a[0]->t == T::Bytes) return make_str(a[0]->s, T::Bytes);
      return unsupported(fn->s + "(...)");
    }
    case G::CodecsEncode: {
      std::string out;
      if (a.size() == 2 && a[0]->t == T::Str && a[1]->t == T::Str &&
          (a[1]->s == "latin1" || a[1]->s == "latin-1" || a[1]->s == "iso-8859-1") && detail::utf8_to_latin1(a[0]->s, out))
        return make_str(std::move(out), T::Bytes);
      return unsupported("_codecs.encode(...)");
    }
    case G::TorchSize: {
      Obj* t = make(T::Tuple);
      if (!a.empty() && (a[0]->t == T::Tuple || a[0]->t == T::List)) t->v = a[0]->v;
      return t;
    }
    case G::Reconstructor:
      if (!a.empty() && a[0]->t == T::Global) return unsupported(a[0]->s + " object");
      return unsupported("copyreg._reconstructor(...)");
    case G::StorageType:
    case G::TorchTensorType:
    case G::Unknown: break;
  }
  return unsupported(fn->s + "(...)");
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::instantiate(Obj* cls, Obj* args) {
  if (cls->t != T::Global) throw err(std::string("NEWOBJ instantiates a ") + tname(cls->t) + ", not a class");
  if (args->t != T::Tuple) throw err("NEWOBJ arguments are not a tuple");
  if (cls->g == G::OrderedDict || cls->g == G::Dict || cls->g == G::Set || cls->g == G::TorchSize) return call(cls, args);
  return unsupported(cls->s + " object");
}

LIBREYOLO_INLINE Unpickler::Obj* Unpickler::run() {
  auto none = [&] { return make(T::None); };
  while (true) {
    op_pos_ = pos_;
    const unsigned char op = *take(1, "opcode");
    switch (op) {
      case 0x80: {  // PROTO
        const unsigned v = *take(1, "PROTO");
        if (v > 5) throw err("unsupported pickle protocol " + std::to_string(v));
        break;
      }
      case 0x95: take(8, "FRAME"); break;  // FRAME: the length is advisory
      case '.': {  // STOP
        Obj* r = pop();
        return r;
      }
      case '(':
        if (marks_.size() >= lim_.max_marks) throw err("more than " + std::to_string(lim_.max_marks) + " open MARKs");
        marks_.push_back(stack_.size());
        break;
      case '0': pop(); break;            // POP
      case '1': pop_mark(); break;       // POP_MARK
      case '2': push(top()); break;      // DUP
      case 'N': push(none()); break;
      case 0x88:
      case 0x89: {
        Obj* o = make(T::Bool);
        o->i = op == 0x88;
        push(o);
        break;
      }
      case 'K': push(make_int(static_cast<int64_t>(le(1, "BININT1")))); break;
      case 'M': push(make_int(static_cast<int64_t>(le(2, "BININT2")))); break;
      case 'J': push(make_int(static_cast<int32_t>(static_cast<uint32_t>(le(4, "BININT"))))); break;
      case 0x8a:
      case 0x8b: {  // LONG1 / LONG4: little-endian two's complement
        const uint64_t len = op == 0x8a ? le(1, "LONG1") : le(4, "LONG4");
        const unsigned char* b = take(static_cast<size_t>(std::min<uint64_t>(len, n_)), "LONG");
        if (len > 8) {
          // Fits in int64 only if the extra bytes are pure sign extension.
          const unsigned char ext = (b[len - 1] & 0x80) ? 0xFF : 0x00;
          bool fits = (b[7] & 0x80) == (ext & 0x80);
          for (uint64_t j = 8; j < len && fits; ++j) fits = b[j] == ext;
          if (!fits) {
            push(unsupported("int wider than 64 bits"));
            break;
          }
        }
        uint64_t x = 0;
        const size_t m = static_cast<size_t>(std::min<uint64_t>(len, 8));
        for (size_t j = 0; j < m; ++j) x |= static_cast<uint64_t>(b[j]) << (8 * j);
        if (m > 0 && m < 8 && (b[m - 1] & 0x80)) x |= ~uint64_t(0) << (8 * m);
        push(make_int(static_cast<int64_t>(x)));
        break;
      }
      case 'I': {  // INT (text); "00"/"01" are False/True
        const std::string s = line("INT", 64);
        if (s == "00" || s == "01") {
          Obj* o = make(T::Bool);
          o->i = s == "01";
          push(o);
          break;
        }
        int64_t v;
        if (!parse_i64(s, v)) throw err("bad INT value '" + detail::sanitize_utf8(s.data(), s.size()) + "'");
        push(make_int(v));
        break;
      }
      case 'L': {  // LONG (text)
        std::string s = line("LONG", 64);
        if (!s.empty() && s.back() == 'L') s.pop_back();
        int64_t v;
        if (!parse_i64(s, v)) {
          push(unsupported("int wider than 64 bits"));
          break;
        }
        push(make_int(v));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const unsigned char* b = take(8, "BINFLOAT");
        uint64_t x = 0;
        for (int j = 0; j < 8; ++j) x = (x << 8) | b[j];
        Obj* o = make(T::Float);
        std::memcpy(&o->f, &x, 8);
        push(o);
        break;
      }
      case 'F': {  // FLOAT (text)
        const std::string s = line("FLOAT", 64);
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) throw err("bad FLOAT value");
        Obj* o = make(T::Float);
        o->f = v;
        push(o);
        break;
      }
      case 'X':
      case 0x8c:
      case 0x8d: {  // BINUNICODE / SHORT_BINUNICODE / BINUNICODE8
        const uint64_t len = op == 0x8c ? le(1, "SHORT_BINUNICODE") : op == 'X' ? le(4, "BINUNICODE") : le(8, "BINUNICODE8");
        if (len > n_ - pos_) throw err("truncated pickle: a string of " + std::to_string(len) + " bytes runs past the end");
        const unsigned char* b = take(static_cast<size_t>(len), "string");
        push(make_str(detail::sanitize_utf8(reinterpret_cast<const char*>(b), static_cast<size_t>(len))));
        break;
      }
      case 'T':
      case 'U': {  // BINSTRING / SHORT_BINSTRING (Python 2 str): read as latin-1 text
        const uint64_t len = op == 'U' ? le(1, "SHORT_BINSTRING") : le(4, "BINSTRING");
        if (len > n_ - pos_) throw err("truncated pickle: a string of " + std::to_string(len) + " bytes runs past the end");
        const unsigned char* b = take(static_cast<size_t>(len), "string");
        push(make_str(detail::latin1_to_utf8(reinterpret_cast<const char*>(b), static_cast<size_t>(len))));
        break;
      }
      case 'B':
      case 'C':
      case 0x8e:
      case 0x96: {  // BINBYTES / SHORT_BINBYTES / BINBYTES8 / BYTEARRAY8
        const uint64_t len = op == 'C' ? le(1, "SHORT_BINBYTES") : op == 'B' ? le(4, "BINBYTES") : le(8, "BINBYTES8");
        if (len > n_ - pos_) throw err("truncated pickle: bytes of " + std::to_string(len) + " run past the end");
        const unsigned char* b = take(static_cast<size_t>(len), "bytes");
        push(make_str(std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(len)), T::Bytes));
        break;
      }
      case ')': push(make(T::Tuple)); break;
      case ']': push(make(T::List)); break;
      case '}': push(make(T::Dict)); break;
      case 0x8f: push(make(T::List)); break;  // EMPTY_SET (a set becomes a list)
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const size_t k = op - 0x84u;
        Obj* t = make(T::Tuple);
        t->v.resize(k);
        for (size_t j = k; j-- > 0;) t->v[j] = pop();
        push(t);
        break;
      }
      case 't': {
        Obj* t = make(T::Tuple);
        t->v = pop_mark();
        push(t);
        break;
      }
      case 'l': {
        Obj* l = make(T::List);
        l->v = pop_mark();
        push(l);
        break;
      }
      case 0x91: {  // FROZENSET
        Obj* l = make(T::List);
        l->v = pop_mark();
        push(l);
        break;
      }
      case 'd': {
        auto items = pop_mark();
        if (items.size() % 2) throw err("DICT has an odd number of items");
        Obj* d = make(T::Dict);
        for (size_t j = 0; j < items.size(); j += 2) dict_set(d, items[j], items[j + 1]);
        push(d);
        break;
      }
      case 'a': {  // APPEND
        Obj* v = pop();
        append_to(top(), {v});
        break;
      }
      case 'e':
      case 0x90: {  // APPENDS / ADDITEMS
        auto items = pop_mark();
        append_to(top(), items);
        break;
      }
      case 's': {  // SETITEM
        Obj* v = pop();
        Obj* k = pop();
        set_items(top(), {k, v});
        break;
      }
      case 'u': {  // SETITEMS
        auto items = pop_mark();
        if (items.size() % 2) throw err("SETITEMS has an odd number of items");
        set_items(top(), items);
        break;
      }
      case 'q': memo_put(le(1, "BINPUT")); break;
      case 'r': memo_put(le(4, "LONG_BINPUT")); break;
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'p': {
        int64_t k;
        if (!parse_i64(line("PUT", 32), k) || k < 0) throw err("bad PUT index");
        memo_put(static_cast<uint64_t>(k));
        break;
      }
      case 'h': push(memo_get(le(1, "BINGET"))); break;
      case 'j': push(memo_get(le(4, "LONG_BINGET"))); break;
      case 'g': {
        int64_t k;
        if (!parse_i64(line("GET", 32), k) || k < 0) throw err("bad GET index");
        push(memo_get(static_cast<uint64_t>(k)));
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = line("GLOBAL module", 256);
        std::string name = line("GLOBAL name", 256);
        push(global(std::move(module), std::move(name)));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Obj* name = pop();
        Obj* module = pop();
        if (module->t != T::Str || name->t != T::Str) throw err("STACK_GLOBAL needs two strings");
        push(global(module->s, name->s));
        break;
      }
      case 'R': {  // REDUCE
        Obj* args = pop();
        Obj* fn = pop();
        push(call(fn, args));
        break;
      }
      case 0x81: {  // NEWOBJ
        Obj* args = pop();
        Obj* cls = pop();
        push(instantiate(cls, args));
        break;
      }
      case 0x92: {  // NEWOBJ_EX
        pop();  // kwargs
        Obj* args = pop();
        Obj* cls = pop();
        push(instantiate(cls, args));
        break;
      }
      case 'b': {  // BUILD: only a numpy dtype's byte order is used; other state is ignored
        Obj* state = pop();
        Obj* obj = top();
        if (obj->t == T::NpDtype && state->t == T::Tuple && state->v.size() > 1 && state->v[1]->t == T::Str &&
            state->v[1]->s.size() == 1)
          obj->i = state->v[1]->s[0];
        break;
      }
      case 'Q': {  // BINPERSID
        Obj* pid = pop();
        push(persistent_load(pid));
        break;
      }
      case 'P': throw err("text persistent ids (PERSID) are not used by torch.save and are not supported");
      case 'S':
      case 'V': throw err(std::string("the protocol-0 text opcode '") + static_cast<char>(op) + "' is not supported (torch.save writes protocol 2)");
      case 'i':
      case 'o': throw err(std::string("the opcode '") + static_cast<char>(op) + "' (INST/OBJ) is not supported");
      case 0x82:
      case 0x83:
      case 0x84: throw err("extension-registry opcodes (EXT1/2/4) are not supported");
      case 0x97:
      case 0x98: throw err("out-of-band buffers (protocol 5) are not supported");
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        throw err(std::string("bad pickle opcode ") + hex + " (not a pickle, or a corrupted one)");
      }
    }
  }
}

LIBREYOLO_INLINE void Unpickler::append_to(Obj* target, const std::vector<Obj*>& items) {
  if (target->t == T::List) {
    target->v.insert(target->v.end(), items.begin(), items.end());
  } else if (target->t != T::Unsupported) {
    throw err(std::string("APPEND to a ") + tname(target->t));
  }
}

LIBREYOLO_INLINE void Unpickler::set_items(Obj* target, const std::vector<Obj*>& items) {
  if (target->t == T::Dict) {
    for (size_t j = 0; j + 1 < items.size(); j += 2) dict_set(target, items[j], items[j + 1]);
  } else if (target->t != T::Unsupported) {
    throw err(std::string("SETITEM on a ") + tname(target->t));
  }
}

LIBREYOLO_INLINE bool Unpickler::identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

LIBREYOLO_INLINE std::string Unpickler::child_path(const std::string& path, const Obj* key) {
  if (key->t == T::Str) {
    if (identifier(key->s)) return path.empty() ? key->s : path + "." + key->s;
    return path + "['" + key->s + "']";
  }
  if (key->t == T::Int) return path + "[" + std::to_string(key->i) + "]";
  return path + "[<" + std::string(tname(key->t)) + " key>]";
}

LIBREYOLO_INLINE void Unpickler::warn_unsupported(const std::string& path, const std::string& what) {
  if (n_warn_++ < lim_.max_warnings)
    warnings_->push_back(src_ + ": " + (path.empty() ? std::string("the top-level value") : "'" + path + "'") + " is " +
                         what + ", which the restricted checkpoint reader does not build; it is kept as an "
                         "unsupported placeholder");
}

LIBREYOLO_INLINE PyValue Unpickler::convert(Obj* o, std::string& path, int depth) {
  if (depth > lim_.max_depth)
    throw CheckpointError(src_ + ": '" + path + "': values nested deeper than " + std::to_string(lim_.max_depth) + " levels");
  if (budget_-- == 0)
    throw CheckpointError(src_ + ": the pickle's shared references expand to too many values (a decompression bomb?)");
  switch (o->t) {
    case T::None: return PyValue::none();
    case T::Bool: return PyValue::boolean(o->i != 0);
    case T::Int: return PyValue::integer(o->i);
    case T::Float: return PyValue::real(o->f);
    case T::Str: return PyValue::string(o->s);
    case T::Bytes: return PyValue::bytes(o->s);
    case T::Tensor: return PyValue::tensor(o->tensor);
    case T::Unsupported: warn_unsupported(path, o->s); return PyValue::unsupported(o->s);
    case T::Global: warn_unsupported(path, "the global " + o->s); return PyValue::unsupported(o->s);
    case T::Storage: warn_unsupported(path, "a bare storage"); return PyValue::unsupported("storage data/" + o->s);
    case T::NpDtype:
      warn_unsupported(path, "numpy.dtype('" + o->s + "')");
      return PyValue::unsupported("numpy.dtype('" + o->s + "')");
    case T::List:
    case T::Tuple:
    case T::Dict: break;
  }
  if (o->busy) throw CheckpointError(src_ + ": '" + path + "': a container that contains itself (recursive structure)");
  o->busy = true;
  PyValue r;
  const size_t base = path.size();
  if (o->t == T::Dict) {
    r = PyValue::dict(o->ordered);
    for (size_t j = 0; j + 1 < o->v.size(); j += 2) {
      std::string kp = path + "[key]";
      PyValue k = convert(o->v[j], kp, depth + 1);
      std::string vp = child_path(path, o->v[j]);
      r.append_item_unchecked(std::move(k), convert(o->v[j + 1], vp, depth + 1));
    }
  } else {
    std::vector<PyValue> items;
    items.reserve(o->v.size());
    for (size_t j = 0; j < o->v.size(); ++j) {
      path += "[" + std::to_string(j) + "]";
      items.push_back(convert(o->v[j], path, depth + 1));
      path.resize(base);
    }
    r = o->t == T::List ? PyValue::list(std::move(items)) : PyValue::tuple(std::move(items));
  }
  o->busy = false;
  return r;
}

}  // namespace libreyolo::io
