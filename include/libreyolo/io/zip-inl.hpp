#pragma once
// Definitions of zip.hpp (core/api.hpp): included by zip.hpp when header-only, compiled once otherwise.
#include <libreyolo/io/zip.hpp>

namespace libreyolo::io {

LIBREYOLO_INLINE uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

LIBREYOLO_INLINE size_t MemoryReadAdapter::read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const {
  if (pos >= size_) return 0;
  const size_t k = std::min<uint64_t>(n, size_ - pos);
  if (k) std::memcpy(buf, data_ + pos, k);
  return k;
}

LIBREYOLO_INLINE FileReadAdapter::FileReadAdapter(const std::string& path) : path_(path) {
  fp_ = std::fopen(path.c_str(), "rb");
  if (!fp_) throw CheckpointError(path + ": cannot open the checkpoint for reading (" + std::strerror(errno) + ")");
  if (std::fseek(fp_, 0, SEEK_END) != 0) fail("cannot seek");
  const long end = std::ftell(fp_);
  if (end < 0) fail("cannot tell its size");
  size_ = static_cast<size_t>(end);
}

LIBREYOLO_INLINE FileReadAdapter::~FileReadAdapter() {
  if (fp_) std::fclose(fp_);
}

LIBREYOLO_INLINE size_t FileReadAdapter::read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const {
  if (pos >= size_) return 0;
  n = std::min<uint64_t>(n, size_ - pos);
  if (fseeko(fp_, static_cast<off_t>(pos), SEEK_SET) != 0) return 0;
  return std::fread(buf, 1, n, fp_);
}

[[noreturn]] LIBREYOLO_INLINE void FileReadAdapter::fail(const char* what) {
  std::fclose(fp_);
  fp_ = nullptr;
  throw CheckpointError(path_ + ": " + what);
}

LIBREYOLO_INLINE const ZipEntry* ZipDirectory::find(const std::string& full) const {
  auto it = by_name.find(full);
  return it == by_name.end() ? nullptr : &entries[it->second];
}

LIBREYOLO_INLINE ZipDirectory read_zip_directory(const caffe2::serialize::ReadAdapterInterface& in, const std::string& src) {
  using detail::le16;
  using detail::le32;
  using detail::le64;
  const uint64_t fsize = in.size();
  auto fail = [&](const std::string& what) -> CheckpointError { return CheckpointError(src + ": " + what); };
  auto read_at = [&](uint64_t pos, void* buf, size_t n, const char* what) {
    if (pos > fsize || n > fsize - pos || in.read(pos, buf, n) != n)
      throw fail(std::string("truncated file: cannot read the ") + what + " at byte " + std::to_string(pos) + " (file is " +
                 std::to_string(fsize) + " bytes)");
  };

  unsigned char head[16] = {};
  const size_t hn = static_cast<size_t>(std::min<uint64_t>(fsize, sizeof head));
  if (hn) read_at(0, head, hn, "header");
  if (hn < 4 || std::memcmp(head, "PK\x03\x04", 4) != 0) {
    if (hn >= 2 && head[0] == 0x80 && head[1] <= 5)
      throw fail("not a zip archive: this is a bare pickle, the legacy (pre-1.6) torch.save format, which is not "
                 "supported; re-save it with a current torch.save");
    if (hn >= 2 && head[0] == 'P' && head[1] == 'K')
      throw fail("not a torch.save zip archive (a zip that does not start with a local file header)");
    throw fail("not a zip archive (a torch.save checkpoint starts with 'PK\\x03\\x04'; this file is " +
               std::to_string(fsize) + " bytes and starts otherwise)");
  }

  // End of central directory: the last 22..65557 bytes.
  const uint64_t tail_n = std::min<uint64_t>(fsize, 22 + 65535);
  std::vector<unsigned char> tail(static_cast<size_t>(tail_n));
  read_at(fsize - tail_n, tail.data(), tail.size(), "end of the archive");
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail.size()) - 22; i >= 0; --i)
    if (le32(&tail[static_cast<size_t>(i)]) == 0x06054b50u) {
      eocd = i;
      break;
    }
  if (eocd < 0)
    throw fail("truncated or damaged zip archive: no end-of-central-directory record (the file is " + std::to_string(fsize) +
               " bytes; was the save interrupted or the download cut short?)");
  const unsigned char* e = &tail[static_cast<size_t>(eocd)];
  uint64_t n_entries = le16(e + 10), cd_size = le32(e + 12), cd_offset = le32(e + 16);
  const uint64_t eocd_pos = fsize - tail_n + static_cast<uint64_t>(eocd);
  if (n_entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu) {
    if (eocd_pos < 20) throw fail("damaged zip64 archive: no zip64 end-of-central-directory locator");
    unsigned char loc[20];
    read_at(eocd_pos - 20, loc, 20, "zip64 locator");
    if (le32(loc) != 0x07064b50u) throw fail("damaged zip64 archive: no zip64 end-of-central-directory locator");
    const uint64_t z64 = le64(loc + 8);
    unsigned char z[56];
    read_at(z64, z, 56, "zip64 end-of-central-directory record");
    if (le32(z) != 0x06064b50u) throw fail("damaged zip64 archive: bad zip64 end-of-central-directory signature");
    n_entries = le64(z + 32);
    cd_size = le64(z + 40);
    cd_offset = le64(z + 48);
  }
  if (cd_offset > fsize || cd_size > fsize - cd_offset)
    throw fail("truncated or damaged zip archive: the central directory (" + std::to_string(cd_size) + " bytes at " +
               std::to_string(cd_offset) + ") lies outside the " + std::to_string(fsize) + "-byte file");
  if (cd_size > (uint64_t(256) << 20))
    throw fail("zip central directory of " + std::to_string(cd_size) + " bytes is beyond the 256 MiB limit");
  if (n_entries > cd_size / 46)
    throw fail("damaged zip archive: " + std::to_string(n_entries) + " entries cannot fit in a " + std::to_string(cd_size) +
               "-byte central directory");
  if (n_entries == 0) throw fail("empty zip archive (no records; a torch.save file has data.pkl)");

  std::vector<unsigned char> cd(static_cast<size_t>(cd_size));
  read_at(cd_offset, cd.data(), cd.size(), "central directory");
  ZipDirectory dir;
  std::set<std::string> folded_names;
  dir.entries.reserve(static_cast<size_t>(n_entries));
  size_t p = 0;
  for (uint64_t k = 0; k < n_entries; ++k) {
    if (cd.size() - p < 46 || le32(&cd[p]) != 0x02014b50u)
      throw fail("damaged zip archive: central directory entry " + std::to_string(k) + " is malformed");
    const unsigned char* c = &cd[p];
    ZipEntry en;
    en.method = le16(c + 10);
    en.crc = le32(c + 16);
    en.comp_size = le32(c + 20);
    en.size = le32(c + 24);
    const size_t nlen = le16(c + 28), xlen = le16(c + 30), clen = le16(c + 32);
    en.local_offset = le32(c + 42);
    if (cd.size() - p - 46 < nlen + xlen + clen)
      throw fail("damaged zip archive: central directory entry " + std::to_string(k) + " runs past the directory");
    en.name.assign(reinterpret_cast<const char*>(c + 46), nlen);
    // zip64 extended information: the 64-bit fields whose 32-bit ones are 0xFFFFFFFF, in order.
    const unsigned char* x = c + 46 + nlen;
    for (size_t q = 0; q + 4 <= xlen;) {
      const uint16_t id = le16(x + q), len = le16(x + q + 2);
      if (q + 4 + len > xlen) break;
      if (id == 0x0001) {
        const unsigned char* f = x + q + 4;
        size_t off = 0;
        auto take = [&](uint64_t& field) {
          if (field != 0xFFFFFFFFu) return;
          if (off + 8 > len) throw fail("damaged zip64 archive: short zip64 field for record '" + en.name + "'");
          field = le64(f + off);
          off += 8;
        };
        take(en.size);
        take(en.comp_size);
        take(en.local_offset);
      }
      q += 4 + len;
    }
    p += 46 + nlen + xlen + clen;
    if (en.method != 0 && en.method != 8)
      throw fail("record '" + en.name + "' uses zip compression method " + std::to_string(en.method) +
                 " (only stored and deflated records are supported)");
    if (en.local_offset > fsize || en.comp_size > fsize - en.local_offset)
      throw fail("truncated file: record '" + en.name + "' (" + std::to_string(en.comp_size) + " bytes at " +
                 std::to_string(en.local_offset) + ") runs past the end of the " + std::to_string(fsize) + "-byte file");
    if (en.method == 0 && en.size != en.comp_size)
      throw fail("damaged zip archive: stored record '" + en.name + "' has different compressed and uncompressed sizes");
    if (en.method == 8 && en.size > en.comp_size * 1100 + 65536)
      throw fail("record '" + en.name + "' claims to inflate " + std::to_string(en.comp_size) + " bytes to " +
                 std::to_string(en.size) + ", beyond what deflate can do");
    // miniz looks names up case-insensitively: names equal but for case would make the record it
    // reads differ from the one whose CRC is checked here.
    std::string folded = en.name;
    for (char& ch : folded) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (!dir.by_name.emplace(en.name, dir.entries.size()).second || !folded_names.insert(folded).second)
      throw fail("damaged zip archive: record '" + en.name + "' appears twice");
    dir.entries.push_back(std::move(en));
  }
  // PyTorchStreamReader's archive name: the first record's top-level folder.
  const std::string& first = dir.entries.front().name;
  const auto slash = first.find('/');
  if (slash == std::string::npos || slash == 0)
    throw fail("not a torch.save archive: its first record '" + first + "' is not inside a folder");
  dir.prefix = first.substr(0, slash + 1);
  return dir;
}

}  // namespace libreyolo::io
