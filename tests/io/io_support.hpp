#pragma once
// Shared by the io tests (and tests/deimv2's .pt case): a python3 that can import torch, for checks against
// Python's torch.load (lry_test::python_with_torch and Need::python_torch, tests/support_prereq.hpp); a
// small original-style checkpoint (original_like).
#include "support_prereq.hpp"

#include <libreyolo/io/pt_archive.hpp>

#include <cstdint>
#include <string>

namespace lry_test {

// A small original-style checkpoint: `model` = the given state dict and the schema's metadata.
inline libreyolo::io::PyValue original_like(const libreyolo::io::StateDict& sd, const std::string& family, const std::string& size,
                                            int64_t nc) {
  using libreyolo::io::PyValue;
  PyValue root = PyValue::dict();
  root.set("model", PyValue::state_dict(sd));
  root.set("schema_version", PyValue::string("1.0"));
  root.set("libreyolo_version", PyValue::string("0.0.0.dev0"));
  root.set("model_family", PyValue::string(family));
  root.set("size", PyValue::string(size));
  root.set("task", PyValue::string("detect"));
  root.set("nc", PyValue::integer(nc));
  PyValue names = PyValue::dict();
  for (int64_t i = 0; i < nc; ++i) names.set(PyValue::integer(i), PyValue::string("c" + std::to_string(i)));
  root.set("names", names);
  root.set("imgsz", PyValue::integer(640));
  return root;
}

}  // namespace lry_test
