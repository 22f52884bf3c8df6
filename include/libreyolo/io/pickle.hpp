#pragma once
// A restricted unpickler and a small pickler for torch.save's data.pkl (pickle protocol 2); their
// definitions: unpickler-inl.hpp and pickler-inl.hpp.
//
// Reading never executes anything: GLOBAL/STACK_GLOBAL only name things, and REDUCE/NEWOBJ/BUILD
// are interpreted for an allow-list of globals:
//   collections.OrderedDict                          -> an ordered dict
//   torch._utils._rebuild_tensor_v2 / _rebuild_tensor, _rebuild_parameter(_with_state),
//   torch._tensor._rebuild_from_type_v2 (plain Tensor/Parameter) -> a tensor over a storage record
//   torch.{Float,Double,Half,BFloat16,Long,Int,Short,Char,Byte,Bool,ComplexFloat,ComplexDouble}Storage,
//   torch.UntypedStorage                             -> the element type of a persistent storage id
//   numpy.(_)core.multiarray.scalar + numpy.dtype    -> an int/float/bool decoded from its bytes
//   _codecs.encode(str, 'latin1')                    -> bytes (how protocol 2 writes bytes)
//   builtins.set/frozenset -> list, builtins.bytearray -> bytes, torch.Size -> tuple
// Any other global that is called or instantiated becomes an "unsupported" placeholder value (the
// reader warns with its key path), except globals that give code execution or system access (os,
// subprocess, builtins.eval/exec/getattr/__import__/open, sys, importlib, ...), which refuse the whole
// file as soon as the pickle names them. Everything is bounded: stack, marks, memo, object count,
// nesting depth, strings (by the bytes present), and the expansion of shared references.
#include <torch/torch.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <libreyolo/core/api.hpp>
#include "libreyolo/core/error.hpp"
#include "libreyolo/io/pyvalue.hpp"

namespace libreyolo::io {

struct PickleLimits {
  size_t max_stack = size_t(1) << 22;     // stack entries
  size_t max_marks = size_t(1) << 20;     // open MARKs
  size_t max_memo = size_t(1) << 24;      // memo entries
  size_t max_objects = size_t(1) << 23;   // objects built while unpickling
  int max_depth = 256;                    // nesting of the resulting value tree
  size_t max_warnings = 20;               // further warnings are counted in one line
};

// torch storage class name -> element type ("FloatStorage" -> float32); nullopt when unknown.
LIBREYOLO_INLINE std::optional<at::ScalarType> storage_dtype(std::string_view name);
LIBREYOLO_INLINE std::optional<std::string> storage_name(at::ScalarType t);

namespace detail {

// Replaces invalid UTF-8 (and encoded surrogates) by U+FFFD so every string is valid UTF-8.
LIBREYOLO_INLINE std::string sanitize_utf8(const char* p, size_t n);
// UTF-8 -> latin-1 bytes (false when a code point is above U+00FF).
LIBREYOLO_INLINE bool utf8_to_latin1(const std::string& s, std::string& out);
// latin-1 bytes -> UTF-8 (Python 2 str records).
LIBREYOLO_INLINE std::string latin1_to_utf8(const char* p, size_t n);

// Globals that give code execution or system access: a checkpoint has no reason to name them.
LIBREYOLO_INLINE bool denied_global(const std::string& module, const std::string& name);

}  // namespace detail

// Returns the bytes of the storage record `data/<key>` as a 1-D uint8 CPU tensor.
using StorageLoader = std::function<torch::Tensor(const std::string& key)>;

class Unpickler {
 public:
  // `src` names the file in errors and warnings ("runs/x/last.pt: data.pkl byte 123: ...").
  Unpickler(const char* data, size_t size, std::string src, StorageLoader loader, PickleLimits lim = {});

  // Runs the pickle to its STOP and returns the top value. Unsupported objects are reported in
  // `warnings` (one line each, naming the key path).
  PyValue load(std::vector<std::string>& warnings);

 private:
  enum class T : uint8_t { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, Tensor, Unsupported, Global, Storage, NpDtype };
  enum class G : uint8_t {
    Unknown, OrderedDict, Dict, RebuildTensorV2, RebuildTensor, RebuildParameter, RebuildParameterWithState,
    RebuildFromTypeV2, StorageType, NpScalar, NpDtype, Set, Bytearray, CodecsEncode, Reconstructor, TorchSize,
    TorchTensorType
  };
  struct Obj {
    T t = T::None;
    G g = G::Unknown;        // Global: what it is
    bool ordered = false;    // Dict
    bool busy = false;       // conversion in progress (cycle detection)
    int64_t i = 0;           // Bool/Int; NpDtype: byte order char
    double f = 0;            // Float
    std::string s;           // Str/Bytes/Unsupported description/Global "module.name"/NpDtype "f8"/Storage key
    std::vector<Obj*> v;     // List/Tuple items; Dict keys and values interleaved
    torch::Tensor tensor;    // Tensor; Storage: the record's bytes (uint8)
    at::ScalarType dtype = at::kByte;  // Storage element type
  };

  // ---- errors ----------------------------------------------------------------------------------
  CheckpointError err(const std::string& what) const;
  static const char* tname(T t);

  // ---- objects ---------------------------------------------------------------------------------
  Obj* make(T t);
  Obj* make_int(int64_t x);
  Obj* make_str(std::string s, T t = T::Str);
  Obj* unsupported(std::string what) { return make_str(std::move(what), T::Unsupported); }

  // Canonical hash key of a dict key (Python equality: 1 == 1.0 == True); throws when unhashable.
  std::string canon(const Obj* k, int depth = 0) const;
  void dict_set(Obj* d, Obj* k, Obj* v);

  // ---- stack -----------------------------------------------------------------------------------
  void push(Obj* o);
  Obj* pop();
  Obj* top();
  size_t floor_() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the last MARK, and the MARK.
  std::vector<Obj*> pop_mark();

  // ---- input -----------------------------------------------------------------------------------
  const unsigned char* take(size_t k, const char* what);
  uint64_t le(size_t k, const char* what);
  std::string line(const char* what, size_t max_len = 4096);
  static bool parse_i64(const std::string& s, int64_t& out);

  // ---- memo ------------------------------------------------------------------------------------
  void memo_put(uint64_t idx);
  Obj* memo_get(uint64_t idx);

  // ---- globals ---------------------------------------------------------------------------------
  static bool valid_name(const std::string& s);
  Obj* global(std::string module, std::string name);

  // ---- persistent ids: ('storage', torch.XStorage, key, location, numel) ------------------------
  Obj* persistent_load(Obj* pid);

  // ---- tensors ---------------------------------------------------------------------------------
  std::vector<int64_t> int_tuple(Obj* o, const char* what);
  Obj* rebuild_tensor(const std::vector<Obj*>& a);

  // ---- numpy scalars ---------------------------------------------------------------------------
  Obj* numpy_scalar(Obj* dtype, Obj* data);

  // ---- REDUCE / NEWOBJ -------------------------------------------------------------------------
  Obj* call(Obj* fn, Obj* args, int depth = 0);
  Obj* instantiate(Obj* cls, Obj* args);

  // ---- the opcode loop -------------------------------------------------------------------------
  Obj* run();
  void append_to(Obj* target, const std::vector<Obj*>& items);
  void set_items(Obj* target, const std::vector<Obj*>& items);

  // ---- conversion to PyValue -------------------------------------------------------------------
  static bool identifier(const std::string& s);
  static std::string child_path(const std::string& path, const Obj* key);
  void warn_unsupported(const std::string& path, const std::string& what);
  PyValue convert(Obj* o, std::string& path, int depth);

  const unsigned char* p_;
  size_t n_;
  size_t pos_ = 0, op_pos_ = 0;
  std::string src_;
  StorageLoader loader_;
  PickleLimits lim_;
  std::deque<Obj> arena_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Obj*> memo_;
  std::unordered_map<const Obj*, std::unordered_map<std::string, size_t>> dict_index_;
  std::map<std::string, torch::Tensor> storages_;
  std::vector<std::string>* warnings_ = nullptr;
  size_t n_warn_ = 0;
  size_t budget_ = 0;
};

// ---- writing -----------------------------------------------------------------------------------
// Pickles a PyValue as protocol 2, the way torch.save lays tensors out: each distinct storage becomes
// a record `data/<key>` (tensors sharing a storage keep sharing it), each tensor a
// torch._utils._rebuild_tensor_v2 call. Dicts flagged ordered become collections.OrderedDict.
// Bytes are written with BINBYTES (a protocol-3 opcode every Python 3 unpickler reads).
class Pickler {
 public:
  struct Storage {
    std::string key;
    const void* data = nullptr;
    size_t nbytes = 0;
    torch::Tensor keep;  // owns the bytes
  };

  explicit Pickler(std::string what) : what_(std::move(what)) {}

  std::string dump(const PyValue& v);
  const std::vector<Storage>& storages() const { return storages_; }

 private:
  CheckpointError err(const std::string& path, const std::string& what) const;
  void u32(uint32_t x);
  void str(const std::string& s);
  void integer(int64_t v);
  void global(const std::string& module, const std::string& name);
  void int_tuple(at::IntArrayRef xs);
  void tensor(const torch::Tensor& t0, const std::string& path);
  void emit(const PyValue& v, std::string& path, int depth);

  std::string what_;
  std::string out_;
  std::map<std::string, uint32_t> memo_;
  std::vector<Storage> storages_;
  std::map<const void*, size_t> by_impl_;
};

}  // namespace libreyolo::io

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/io/pickler-inl.hpp>
#include <libreyolo/io/unpickler-inl.hpp>
#endif
