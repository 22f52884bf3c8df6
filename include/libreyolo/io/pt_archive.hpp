#pragma once
// Reading and writing PyTorch's torch.save checkpoints (the zip format) without Python and without
// running pickle code.
//
//   PyValue v = io::read_pt("last.pt");                      // the saved dict, tensors on the CPU
//   auto sd = io::state_dict(v, "model", "last.pt");          // ordered (name, tensor) pairs
//   io::load_state_dict_strict(net, sd, "last.pt 'model'");   // all-or-nothing copy into a module
//   io::write_pt("out.pt", v);                                // torch.load reads it back in Python
//   nlohmann::ordered_json meta = io::to_json(v);             // metadata, tensors summarised
//
// Reading goes through caffe2's PyTorchStreamReader (the reader torch.load uses) after an own pass
// over the zip's central directory, and verifies every record's CRC-32 (PyTorchStreamReader does
// not); a stored CRC of 0 on a non-empty record is taken as "not computed" (torch 2.x can save
// without CRCs) and not checked. Memory is bounded before anything but data.pkl is inflated: the
// pickle is first run against the sizes the zip directory declares (no storage read), so a storage
// record whose declared size is not what the pickle's storage id says (element count x element
// size), or storages beyond max_storage_bytes in all, are refused naming the record and both sizes;
// each record is then inflated into a buffer of exactly its vetted size (miniz stops with an error
// where the deflate stream would produce more). Unsupported objects (numpy arrays, custom classes, ...) become
// placeholders and are reported as warnings; a file that names code-executing globals is refused.
#include <libreyolo/core/atomic_file.hpp>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

#include <libreyolo/core/api.hpp>
#include "libreyolo/core/error.hpp"
#include "libreyolo/core/log.hpp"
#include "libreyolo/io/pickle.hpp"
#include "libreyolo/io/pyvalue.hpp"
#include "libreyolo/io/zip.hpp"

namespace libreyolo::io {

struct PtReadOptions {
  // Receives one line per unsupported value (with its key path); nullptr: they are logged as warnings.
  std::vector<std::string>* warnings = nullptr;
  bool verify_crc = true;
  uint64_t max_pickle_bytes = uint64_t(64) << 20;  // data.pkl (a large model's is a few MB)
  // Records other than data.pkl and the storages (byteorder, version, ...): a few bytes each.
  uint64_t max_other_record_bytes = uint64_t(1) << 20;
  // All storage records together, as the zip directory declares them (and the pickle agrees).
  uint64_t max_storage_bytes = uint64_t(16) << 30;
  PickleLimits limits = {};
};

namespace detail {

LIBREYOLO_INLINE std::string c10_message(const c10::Error& e);

LIBREYOLO_INLINE PyValue read_archive(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in, const std::string& src,
                                      const PtReadOptions& opt);

}  // namespace detail

// Reads a torch.save checkpoint. Throws CheckpointError naming the file and what is wrong.
LIBREYOLO_INLINE PyValue read_pt(const std::string& path, const PtReadOptions& opt = {});
LIBREYOLO_INLINE PyValue read_pt(const std::string& path, std::vector<std::string>* warnings);
// The same from a buffer in memory (`name` stands for the file in messages). Writes nothing to disk.
LIBREYOLO_INLINE PyValue read_pt_bytes(const void* data, size_t size, const std::string& name = "<memory>",
                                       const PtReadOptions& opt = {});
LIBREYOLO_INLINE PyValue read_pt_bytes(const std::string& bytes, const std::string& name = "<memory>", const PtReadOptions& opt = {});

// Serialises `root` as torch.save does (zip: archive/data.pkl, archive/byteorder, archive/data/<k>,
// archive/version). `what` names the destination in errors.
LIBREYOLO_INLINE std::string write_pt_bytes(const PyValue& root, const std::string& what = "<memory>");

// Writes `root` to `path` atomically: a temporary file beside it, flushed to disk, then renamed.
LIBREYOLO_INLINE void write_pt(const std::string& path, const PyValue& root);

// Metadata as JSON (dict order kept): tensors become "<tensor float32 [16, 3, 3, 3]>", bytes
// "<bytes of N>", placeholders "<unsupported ...>", non-finite floats "nan"/"inf"/"-inf", and
// non-string dict keys their Python repr (1 -> "1").
LIBREYOLO_INLINE nlohmann::ordered_json to_json(const PyValue& v);

using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;

// The (name, tensor) pairs of a state dict, in file order: `root[key]`, or `root` itself when `key`
// is empty. Throws CheckpointError (naming `what` and the key) when it is absent, not a dict, or
// holds a non-string key or a value that is not a tensor.
LIBREYOLO_INLINE StateDict state_dict(const PyValue& root, std::string_view key = {}, std::string_view what = "checkpoint");

// A module's parameters and buffers in the order PyTorch's state_dict() lists them: module by module
// (the module, then its descendants depth-first), each module's own parameters, then its buffers.
// With PyValue::state_dict() this makes a state dict a Python model can load_state_dict().
LIBREYOLO_INLINE StateDict module_state_dict(const torch::nn::Module& m);

// Copies `state` into `m`'s parameters and buffers by name, all or nothing: when any name is missing
// from `state`, unexpected in it, duplicated, or has another shape, one CheckpointError lists the
// first few of each (prefixed by `what`) and nothing is copied. Returns the number of tensors copied.
LIBREYOLO_INLINE size_t load_state_dict_strict(torch::nn::Module& m, const StateDict& state, std::string_view what = "checkpoint");

}  // namespace libreyolo::io

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/io/pt_archive-inl.hpp>
#endif
