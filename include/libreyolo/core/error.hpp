#pragma once
// Error types. Every user-facing error names the bad input (file, line, key or value) and what is
// allowed, so the message alone tells the user what to fix.
#include <stdexcept>
#include <string>

namespace libreyolo {

// Base of all libreyolo errors.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A configuration key/value problem (unknown key, wrong type, value outside what is allowed).
struct ConfigError : Error {
  using Error::Error;
};
// A data problem: missing/unreadable/truncated file, bad label line, ...
struct DataError : Error {
  using Error::Error;
};
// A checkpoint problem: unreadable file, other family, incompatible shapes.
struct CheckpointError : Error {
  using Error::Error;
};
// Setup problem at run time (device not available, bf16 unsupported, run dir exists, ...).
struct SetupError : Error {
  using Error::Error;
};

}  // namespace libreyolo
