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

#include <libreyolo/core/api.hpp>
#include "libreyolo/core/error.hpp"

namespace libreyolo::io {

// Python's name of a dtype: float32, float16, bfloat16, int64, uint8, bool, ...
LIBREYOLO_INLINE std::string dtype_name(at::ScalarType t);

class PyValue {
 public:
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Tensor, Unsupported };
  using Item = std::pair<PyValue, PyValue>;

  PyValue() = default;  // None

  // ---- construction --------------------------------------------------------------------------
  static PyValue none() { return {}; }
  static PyValue boolean(bool b);
  static PyValue integer(int64_t i);
  static PyValue real(double f);
  static PyValue string(std::string s);
  static PyValue bytes(std::string b);
  static PyValue list(std::vector<PyValue> items = {});
  static PyValue tuple(std::vector<PyValue> items = {});
  // An empty dict; `ordered` makes it a collections.OrderedDict (what state dicts are).
  static PyValue dict(bool ordered = false);
  static PyValue tensor(torch::Tensor t);
  static PyValue unsupported(std::string what);
  // A state dict (OrderedDict of name -> tensor) from ordered pairs.
  static PyValue state_dict(const std::vector<std::pair<std::string, torch::Tensor>>& sd);

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

  static const char* kind_name(Kind k);
  const char* kind_name() const { return kind_name(kind_); }

  // ---- scalar access (throws CheckpointError naming the kind found) ----------------------------
  bool as_bool() const;
  // int (a bool counts as 0/1, as in Python).
  int64_t as_int() const;
  // float, or an int/bool converted.
  double as_float() const;
  const std::string& as_string() const;
  const std::string& as_bytes() const;
  const torch::Tensor& as_tensor() const;
  // What an unsupported placeholder stood for ("" for other kinds).
  const std::string& unsupported_what() const;

  // ---- containers ----------------------------------------------------------------------------
  // Elements of a list/tuple.
  const std::vector<PyValue>& items() const;
  std::vector<PyValue>& items();
  // Number of elements (list/tuple) or entries (dict); 0 for scalars.
  size_t size() const;
  const PyValue& operator[](size_t i) const;
  void append(PyValue v);

  // Entries of a dict, in insertion order.
  const std::vector<Item>& dict_items() const;
  // Looks a key up (nullptr when absent or when this is not a dict). Keys compare as in Python:
  // 1, 1.0 and True are the same key.
  const PyValue* find(const PyValue& key) const;
  const PyValue* find(std::string_view key) const { return find(string(std::string(key))); }
  const PyValue* find(const char* key) const { return find(std::string_view(key)); }
  const PyValue* find(int64_t key) const { return find(integer(key)); }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // The value under a string key; throws CheckpointError listing the keys that exist.
  const PyValue& at(std::string_view key) const;
  // Sets key -> value, replacing the value of an equal key (keeping its position) as Python does.
  void set(PyValue key, PyValue value);
  void set(std::string_view key, PyValue value) { set(string(std::string(key)), std::move(value)); }
  void set(const char* key, PyValue value) { set(std::string_view(key), std::move(value)); }
  // Appends an entry without looking for an equal key (the caller guarantees uniqueness).
  void append_item_unchecked(PyValue key, PyValue value);

  // Python's key equality for hashable scalars and tuples of them (tensors/others: never equal
  // unless both are the same tensor).
  static bool key_equal(const PyValue& a, const PyValue& b);

  // A short Python-like rendering for messages: 'abc', 3, 0.5, <tensor float32 [16, 3]>, {...}.
  std::string repr(size_t max_len = 80) const;

  // "<tensor float32 [16, 3, 3, 3]>"
  static std::string tensor_summary(const torch::Tensor& t);

 private:
  explicit PyValue(Kind k) : kind_(k) {}
  CheckpointError wrong(const char* want) const;

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

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/io/pyvalue-inl.hpp>
#endif
