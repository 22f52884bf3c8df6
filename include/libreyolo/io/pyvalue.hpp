#pragma once
// io::PyValue: the Python values a torch.save checkpoint holds, as a C++ value tree.
//
// Kinds: None, bool, int (int64), float (double), str (UTF-8), bytes, list, tuple, dict (keys of any
// scalar kind, in insertion order; `ordered()` says it was a collections.OrderedDict), tensor (a
// torch::Tensor; several values may share one storage, as in the file), and "unsupported": a
// placeholder for an object the restricted reader does not build (a custom class, a numpy array,
// a torch.device, ...), carrying a description such as "numpy.core.multiarray._reconstruct(...)".
//
// Values have value semantics (copying copies the tree; tensors are shared like any torch::Tensor).
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libreyolo/core/error.hpp"

namespace libreyolo::io {

// Python's name of a dtype: float32, float16, bfloat16, int64, uint8, bool, ...
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(t);
  }
}

class PyValue {
 public:
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Tensor, Unsupported };
  using Item = std::pair<PyValue, PyValue>;

  PyValue() = default;  // None

  // ---- construction --------------------------------------------------------------------------
  static PyValue none() { return {}; }
  static PyValue boolean(bool b) {
    PyValue v(Kind::Bool);
    v.i_ = b ? 1 : 0;
    return v;
  }
  static PyValue integer(int64_t i) {
    PyValue v(Kind::Int);
    v.i_ = i;
    return v;
  }
  static PyValue real(double f) {
    PyValue v(Kind::Float);
    v.f_ = f;
    return v;
  }
  static PyValue string(std::string s) {
    PyValue v(Kind::String);
    v.s_ = std::move(s);
    return v;
  }
  static PyValue bytes(std::string b) {
    PyValue v(Kind::Bytes);
    v.s_ = std::move(b);
    return v;
  }
  static PyValue list(std::vector<PyValue> items = {}) {
    PyValue v(Kind::List);
    v.items_ = std::move(items);
    return v;
  }
  static PyValue tuple(std::vector<PyValue> items = {}) {
    PyValue v(Kind::Tuple);
    v.items_ = std::move(items);
    return v;
  }
  // An empty dict; `ordered` makes it a collections.OrderedDict (what state dicts are).
  static PyValue dict(bool ordered = false) {
    PyValue v(Kind::Dict);
    v.ordered_ = ordered;
    return v;
  }
  static PyValue tensor(torch::Tensor t) {
    PyValue v(Kind::Tensor);
    v.t_ = std::move(t);
    return v;
  }
  static PyValue unsupported(std::string what) {
    PyValue v(Kind::Unsupported);
    v.s_ = std::move(what);
    return v;
  }
  // A state dict (OrderedDict of name -> tensor) from ordered pairs.
  static PyValue state_dict(const std::vector<std::pair<std::string, torch::Tensor>>& sd) {
    PyValue v = dict(true);
    v.items_.reserve(sd.size() * 2);
    for (const auto& [k, t] : sd) v.set(string(k), tensor(t));
    return v;
  }

  // ---- inspection ----------------------------------------------------------------------------
  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_bytes() const { return kind_ == Kind::Bytes; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_unsupported() const { return kind_ == Kind::Unsupported; }
  // Whether a dict was a collections.OrderedDict.
  bool ordered() const { return ordered_; }

  static const char* kind_name(Kind k) {
    switch (k) {
      case Kind::None: return "None";
      case Kind::Bool: return "bool";
      case Kind::Int: return "int";
      case Kind::Float: return "float";
      case Kind::String: return "str";
      case Kind::Bytes: return "bytes";
      case Kind::List: return "list";
      case Kind::Tuple: return "tuple";
      case Kind::Dict: return "dict";
      case Kind::Tensor: return "tensor";
      case Kind::Unsupported: return "unsupported";
    }
    return "?";
  }
  const char* kind_name() const { return kind_name(kind_); }

  // ---- scalar access (throws CheckpointError naming the kind found) ----------------------------
  bool as_bool() const {
    if (kind_ == Kind::Bool) return i_ != 0;
    throw wrong("bool");
  }
  // int (a bool counts as 0/1, as in Python).
  int64_t as_int() const {
    if (kind_ == Kind::Int || kind_ == Kind::Bool) return i_;
    throw wrong("int");
  }
  // float, or an int/bool converted.
  double as_float() const {
    if (kind_ == Kind::Float) return f_;
    if (kind_ == Kind::Int || kind_ == Kind::Bool) return static_cast<double>(i_);
    throw wrong("float");
  }
  const std::string& as_string() const {
    if (kind_ == Kind::String) return s_;
    throw wrong("str");
  }
  const std::string& as_bytes() const {
    if (kind_ == Kind::Bytes) return s_;
    throw wrong("bytes");
  }
  const torch::Tensor& as_tensor() const {
    if (kind_ == Kind::Tensor) return t_;
    throw wrong("tensor");
  }
  // What an unsupported placeholder stood for ("" for other kinds).
  const std::string& unsupported_what() const {
    static const std::string empty;
    return kind_ == Kind::Unsupported ? s_ : empty;
  }

  // ---- containers ----------------------------------------------------------------------------
  // Elements of a list/tuple.
  const std::vector<PyValue>& items() const {
    if (kind_ == Kind::List || kind_ == Kind::Tuple) return items_;
    throw wrong("list or tuple");
  }
  std::vector<PyValue>& items() {
    if (kind_ == Kind::List || kind_ == Kind::Tuple) return items_;
    throw wrong("list or tuple");
  }
  // Number of elements (list/tuple) or entries (dict); 0 for scalars.
  size_t size() const {
    if (kind_ == Kind::Dict) return dict_.size();
    if (kind_ == Kind::List || kind_ == Kind::Tuple) return items_.size();
    return 0;
  }
  const PyValue& operator[](size_t i) const {
    const auto& v = items();
    if (i >= v.size())
      throw CheckpointError("index " + std::to_string(i) + " is out of range for a " + kind_name() + " of " +
                            std::to_string(v.size()));
    return v[i];
  }
  void append(PyValue v) {
    if (kind_ != Kind::List && kind_ != Kind::Tuple) throw wrong("list or tuple");
    items_.push_back(std::move(v));
  }

  // Entries of a dict, in insertion order.
  const std::vector<Item>& dict_items() const {
    if (kind_ == Kind::Dict) return dict_;
    throw wrong("dict");
  }
  // Looks a key up (nullptr when absent or when this is not a dict). Keys compare as in Python:
  // 1, 1.0 and True are the same key.
  const PyValue* find(const PyValue& key) const {
    if (kind_ != Kind::Dict) return nullptr;
    for (const auto& [k, v] : dict_)
      if (key_equal(k, key)) return &v;
    return nullptr;
  }
  const PyValue* find(std::string_view key) const { return find(string(std::string(key))); }
  const PyValue* find(const char* key) const { return find(std::string_view(key)); }
  const PyValue* find(int64_t key) const { return find(integer(key)); }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // The value under a string key; throws CheckpointError listing the keys that exist.
  const PyValue& at(std::string_view key) const {
    if (kind_ != Kind::Dict) throw wrong("dict");
    if (const PyValue* v = find(key)) return *v;
    std::string have;
    size_t n = 0;
    for (const auto& [k, v] : dict_) {
      if (n++ == 12) {
        have += ", ...";
        break;
      }
      have += (have.empty() ? "" : ", ") + k.repr(40);
    }
    throw CheckpointError("no key '" + std::string(key) + "' in a dict of " + std::to_string(dict_.size()) +
                          " entries (keys: " + have + ")");
  }
  // Sets key -> value, replacing the value of an equal key (keeping its position) as Python does.
  void set(PyValue key, PyValue value) {
    if (kind_ != Kind::Dict) throw wrong("dict");
    for (auto& [k, v] : dict_)
      if (key_equal(k, key)) {
        v = std::move(value);
        return;
      }
    dict_.emplace_back(std::move(key), std::move(value));
  }
  void set(std::string_view key, PyValue value) { set(string(std::string(key)), std::move(value)); }
  void set(const char* key, PyValue value) { set(std::string_view(key), std::move(value)); }
  // Appends an entry without looking for an equal key (the caller guarantees uniqueness).
  void append_item_unchecked(PyValue key, PyValue value) {
    if (kind_ != Kind::Dict) throw wrong("dict");
    dict_.emplace_back(std::move(key), std::move(value));
  }

  // Python's key equality for hashable scalars and tuples of them (tensors/others: never equal
  // unless both are the same tensor).
  static bool key_equal(const PyValue& a, const PyValue& b) {
    const bool an = a.is_number(), bn = b.is_number();
    if (an || bn) {
      if (!(an && bn)) return false;
      if (a.kind_ != Kind::Float && b.kind_ != Kind::Float) return a.i_ == b.i_;
      return a.as_float() == b.as_float();
    }
    if (a.kind_ != b.kind_) return false;
    switch (a.kind_) {
      case Kind::None: return true;
      case Kind::String:
      case Kind::Bytes: return a.s_ == b.s_;
      case Kind::Tuple:
        if (a.items_.size() != b.items_.size()) return false;
        for (size_t i = 0; i < a.items_.size(); ++i)
          if (!key_equal(a.items_[i], b.items_[i])) return false;
        return true;
      case Kind::Tensor: return a.t_.defined() && b.t_.defined() && a.t_.is_same(b.t_);
      default: return false;
    }
  }

  // A short Python-like rendering for messages: 'abc', 3, 0.5, <tensor float32 [16, 3]>, {...}.
  std::string repr(size_t max_len = 80) const {
    std::string r;
    switch (kind_) {
      case Kind::None: r = "None"; break;
      case Kind::Bool: r = i_ ? "True" : "False"; break;
      case Kind::Int: r = std::to_string(i_); break;
      case Kind::Float: {  // the shortest form that reads back as the same double, as Python prints
        char buf[40];
        for (int prec = 1; prec <= 17; ++prec) {
          std::snprintf(buf, sizeof buf, "%.*g", prec, f_);
          if (std::strtod(buf, nullptr) == f_ || std::isnan(f_)) break;
        }
        r = buf;
        break;
      }
      case Kind::String: r = "'" + s_ + "'"; break;
      case Kind::Bytes: r = "<bytes of " + std::to_string(s_.size()) + ">"; break;
      case Kind::List:
      case Kind::Tuple: {
        r = kind_ == Kind::List ? "[" : "(";
        for (size_t i = 0; i < items_.size() && r.size() < max_len; ++i) r += (i ? ", " : "") + items_[i].repr(max_len);
        r += kind_ == Kind::List ? "]" : (items_.size() == 1 ? ",)" : ")");
        break;
      }
      case Kind::Dict: r = std::string(ordered_ ? "OrderedDict" : "dict") + " of " + std::to_string(dict_.size()); break;
      case Kind::Tensor: r = tensor_summary(t_); break;
      case Kind::Unsupported: r = "<unsupported " + s_ + ">"; break;
    }
    if (r.size() > max_len) r = r.substr(0, max_len > 3 ? max_len - 3 : 0) + "...";
    return r;
  }

  // "<tensor float32 [16, 3, 3, 3]>"
  static std::string tensor_summary(const torch::Tensor& t) {
    if (!t.defined()) return "<tensor undefined>";
    std::string r = "<tensor " + dtype_name(t.scalar_type()) + " [";
    for (int64_t d = 0; d < t.dim(); ++d) r += (d ? ", " : "") + std::to_string(t.size(d));
    return r + "]>";
  }

 private:
  explicit PyValue(Kind k) : kind_(k) {}
  CheckpointError wrong(const char* want) const {
    return CheckpointError(std::string("expected a ") + want + ", found " + kind_name() + " " + repr(60));
  }

  Kind kind_ = Kind::None;
  bool ordered_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;               // str, bytes, unsupported description
  std::vector<PyValue> items_;  // list, tuple
  std::vector<Item> dict_;      // dict
  torch::Tensor t_;
};

}  // namespace libreyolo::io
