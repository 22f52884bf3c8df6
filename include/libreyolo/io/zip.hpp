#pragma once
// The zip side of a torch.save file: read adapters (file, memory) for caffe2's PyTorchStreamReader,
// and an independent, bounds-checked parse of the zip's central directory, used to vet the archive
// before miniz sees it (sizes inside the file, no duplicate names, stored/deflated only) and to
// verify each record's CRC-32: PyTorchStreamReader does not check CRCs (LibTorch 1.13 and 2.x
// build miniz with its CRC checks disabled; torch.load reads a file with a flipped storage byte).
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <libreyolo/core/api.hpp>
#include "libreyolo/core/error.hpp"

namespace libreyolo::io {

// ---- CRC-32 (IEEE, the zip one) --------------------------------------------------------------
LIBREYOLO_INLINE uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// ---- read adapters ---------------------------------------------------------------------------
// Over a caller-owned buffer; reads past the end return fewer bytes (never read out of bounds).
class MemoryReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  MemoryReadAdapter(const void* data, size_t size) : data_(static_cast<const char*>(data)), size_(size) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/ = "") const override;

 private:
  const char* data_;
  size_t size_;
};

// Over a file opened for reading (throws CheckpointError when it cannot be opened).
class FileReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit FileReadAdapter(const std::string& path);
  FileReadAdapter(const FileReadAdapter&) = delete;
  FileReadAdapter& operator=(const FileReadAdapter&) = delete;
  ~FileReadAdapter() override;
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/ = "") const override;

 private:
  [[noreturn]] void fail(const char* what);
  std::string path_;
  std::FILE* fp_ = nullptr;
  size_t size_ = 0;
};

// ---- central directory -----------------------------------------------------------------------
struct ZipEntry {
  std::string name;
  uint32_t crc = 0;
  uint64_t comp_size = 0;
  uint64_t size = 0;  // uncompressed
  uint16_t method = 0;
  uint64_t local_offset = 0;
};

struct ZipDirectory {
  std::vector<ZipEntry> entries;           // in directory order
  std::map<std::string, size_t> by_name;   // full name -> index
  std::string prefix;                      // "<archive>/" as PyTorchStreamReader sees it
  const ZipEntry* find(const std::string& full) const;
};

namespace detail {
inline uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t le64(const unsigned char* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }
}  // namespace detail

// Parses and vets the archive's central directory. `src` names the file in errors.
LIBREYOLO_INLINE ZipDirectory read_zip_directory(const caffe2::serialize::ReadAdapterInterface& in, const std::string& src);

}  // namespace libreyolo::io

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/io/zip-inl.hpp>
#endif
