#pragma once
// Definitions of pyvalue.hpp (core/api.hpp): included by pyvalue.hpp when header-only, compiled once otherwise.
#include <libreyolo/io/pyvalue.hpp>

namespace libreyolo::io {

LIBREYOLO_INLINE std::string dtype_name(at::ScalarType t) {
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

LIBREYOLO_INLINE PyValue PyValue::boolean(bool b) {
  PyValue v(Kind::Bool);
  v.i_ = b ? 1 : 0;
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::integer(int64_t i) {
  PyValue v(Kind::Int);
  v.i_ = i;
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::real(double f) {
  PyValue v(Kind::Float);
  v.f_ = f;
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::string(std::string s) {
  PyValue v(Kind::String);
  v.s_ = std::move(s);
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::bytes(std::string b) {
  PyValue v(Kind::Bytes);
  v.s_ = std::move(b);
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::list(std::vector<PyValue> items) {
  PyValue v(Kind::List);
  v.items_ = std::move(items);
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::tuple(std::vector<PyValue> items) {
  PyValue v(Kind::Tuple);
  v.items_ = std::move(items);
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::dict(bool ordered) {
  PyValue v(Kind::Dict);
  v.ordered_ = ordered;
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::tensor(torch::Tensor t) {
  PyValue v(Kind::Tensor);
  v.t_ = std::move(t);
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::unsupported(std::string what) {
  PyValue v(Kind::Unsupported);
  v.s_ = std::move(what);
  return v;
}

LIBREYOLO_INLINE PyValue PyValue::state_dict(const std::vector<std::pair<std::string, torch::Tensor>>& sd) {
  PyValue v = dict(true);
  v.items_.reserve(sd.size() * 2);
  for (const auto& [k, t] : sd) v.set(string(k), tensor(t));
  return v;
}

LIBREYOLO_INLINE const char* PyValue::kind_name(Kind k) {
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

LIBREYOLO_INLINE bool PyValue::as_bool() const {
  if (kind_ == Kind::Bool) return i_ != 0;
  throw wrong("bool");
}

LIBREYOLO_INLINE int64_t PyValue::as_int() const {
  if (kind_ == Kind::Int || kind_ == Kind::Bool) return i_;
  throw wrong("int");
}

LIBREYOLO_INLINE double PyValue::as_float() const {
  if (kind_ == Kind::Float) return f_;
  if (kind_ == Kind::Int || kind_ == Kind::Bool) return static_cast<double>(i_);
  throw wrong("float");
}

LIBREYOLO_INLINE const std::string& PyValue::as_string() const {
  if (kind_ == Kind::String) return s_;
  throw wrong("str");
}

LIBREYOLO_INLINE const std::string& PyValue::as_bytes() const {
  if (kind_ == Kind::Bytes) return s_;
  throw wrong("bytes");
}

LIBREYOLO_INLINE const torch::Tensor& PyValue::as_tensor() const {
  if (kind_ == Kind::Tensor) return t_;
  throw wrong("tensor");
}

LIBREYOLO_INLINE const std::string& PyValue::unsupported_what() const {
  static const std::string empty;
  return kind_ == Kind::Unsupported ? s_ : empty;
}

LIBREYOLO_INLINE const std::vector<PyValue>& PyValue::items() const {
  if (kind_ == Kind::List || kind_ == Kind::Tuple) return items_;
  throw wrong("list or tuple");
}

LIBREYOLO_INLINE std::vector<PyValue>& PyValue::items() {
  if (kind_ == Kind::List || kind_ == Kind::Tuple) return items_;
  throw wrong("list or tuple");
}

LIBREYOLO_INLINE size_t PyValue::size() const {
  if (kind_ == Kind::Dict) return dict_.size();
  if (kind_ == Kind::List || kind_ == Kind::Tuple) return items_.size();
  return 0;
}

LIBREYOLO_INLINE const PyValue& PyValue::operator[](size_t i) const {
  const auto& v = items();
  if (i >= v.size())
    throw CheckpointError("index " + std::to_string(i) + " is out of range for a " + kind_name() + " of " +
                          std::to_string(v.size()));
  return v[i];
}

LIBREYOLO_INLINE void PyValue::append(PyValue v) {
  if (kind_ != Kind::List && kind_ != Kind::Tuple) throw wrong("list or tuple");
  items_.push_back(std::move(v));
}

LIBREYOLO_INLINE const std::vector<PyValue::Item>& PyValue::dict_items() const {
  if (kind_ == Kind::Dict) return dict_;
  throw wrong("dict");
}

LIBREYOLO_INLINE const PyValue* PyValue::find(const PyValue& key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, v] : dict_)
    if (key_equal(k, key)) return &v;
  return nullptr;
}

LIBREYOLO_INLINE const PyValue& PyValue::at(std::string_view key) const {
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

LIBREYOLO_INLINE void PyValue::set(PyValue key, PyValue value) {
  if (kind_ != Kind::Dict) throw wrong("dict");
  for (auto& [k, v] : dict_)
    if (key_equal(k, key)) {
      v = std::move(value);
      return;
    }
  dict_.emplace_back(std::move(key), std::move(value));
}

LIBREYOLO_INLINE void PyValue::append_item_unchecked(PyValue key, PyValue value) {
  if (kind_ != Kind::Dict) throw wrong("dict");
  dict_.emplace_back(std::move(key), std::move(value));
}

LIBREYOLO_INLINE bool PyValue::key_equal(const PyValue& a, const PyValue& b) {
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

LIBREYOLO_INLINE std::string PyValue::repr(size_t max_len) const {
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

LIBREYOLO_INLINE std::string PyValue::tensor_summary(const torch::Tensor& t) {
  if (!t.defined()) return "<tensor undefined>";
  std::string r = "<tensor " + dtype_name(t.scalar_type()) + " [";
  for (int64_t d = 0; d < t.dim(); ++d) r += (d ? ", " : "") + std::to_string(t.size(d));
  return r + "]>";
}

LIBREYOLO_INLINE CheckpointError PyValue::wrong(const char* want) const {
  return CheckpointError(std::string("expected a ") + want + ", found " + kind_name() + " " + repr(60));
}

}  // namespace libreyolo::io
