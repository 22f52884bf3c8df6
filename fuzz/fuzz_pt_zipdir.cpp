// Fuzz target: the torch.save reader (io/pt_archive.hpp) on archives whose zip structure lies: the
// central directory, the local headers and the end-of-central-directory record are edited field by
// field (sizes, offsets, methods, name and extra lengths, CRCs, entry counts) while the pickle and
// the data stay as a valid file wrote them, so inputs get past the signature checks to the size
// checks. Input: byte 0 = number of edits k (mod 17), then k edits of 6 bytes [field, op, value32],
// then the .pt file itself (the driver also mutates its bytes). Seeds: fuzz/corpus/pt_zipdir/ (valid
// small .pt files behind a 0 edit count).
// Every input must end in a value or a named libreyolo error, and in bounded memory: the address
// space is capped (RLIMIT_AS, 1 GiB above the start) and the peak resident set may not grow by more
// than 256 MiB (the reader's caps: data.pkl 64 MiB, other records 1 MiB, storages the pickle's sizes,
// which these seeds keep small). An allocation failure reported as an error is a finding too.
#include <libreyolo/io/pt_archive.hpp>

#include "fuzz_common.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <sys/resource.h>

namespace {

struct Field {
  size_t at;
  int width;  // 2 or 4 bytes, little-endian
};

uint32_t rd(const std::string& s, size_t at, int w) {
  uint32_t v = 0;
  for (int i = w - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

void wr(std::string& s, size_t at, int w, uint32_t v) {
  for (int i = 0; i < w; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// The editable fields of the zip structure, found leniently (whatever is out of range is skipped).
std::vector<Field> fields_of(const std::string& z) {
  std::vector<Field> f;
  if (z.size() < 22) return f;
  size_t eocd = std::string::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;)
    if (std::memcmp(z.data() + i, "PK\x05\x06", 4) == 0) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) return f;
  for (size_t off : {8, 10}) f.push_back({eocd + off, 2});  // entry counts
  for (size_t off : {12, 16}) f.push_back({eocd + off, 4});  // directory size, offset
  size_t p = rd(z, eocd + 16, 4);
  const uint32_t n = rd(z, eocd + 10, 2);
  for (uint32_t k = 0; k < n && p + 46 <= z.size() && std::memcmp(z.data() + p, "PK\x01\x02", 4) == 0; ++k) {
    f.push_back({p + 10, 2});                                          // method
    for (size_t off : {16, 20, 24, 42}) f.push_back({p + off, 4});     // crc, compressed, size, local offset
    for (size_t off : {28, 30, 32}) f.push_back({p + off, 2});         // name, extra, comment lengths
    const size_t lh = rd(z, p + 42, 4);
    if (lh + 30 <= z.size() && std::memcmp(z.data() + lh, "PK\x03\x04", 4) == 0) {
      f.push_back({lh + 8, 2});                                        // local method
      for (size_t off : {14, 18, 22}) f.push_back({lh + off, 4});      // local crc, compressed, size
      for (size_t off : {26, 28}) f.push_back({lh + off, 2});          // local name, extra lengths
    }
    p += 46 + rd(z, p + 28, 2) + rd(z, p + 30, 2) + rd(z, p + 32, 2);
  }
  return f;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint64_t rss0 = [] {
    libreyolo::log::set_level(libreyolo::log::Level::quiet);
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    const rlim_t cap = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + (uint64_t(1) << 30);
    rlimit lim{cap, cap};
    ::setrlimit(RLIMIT_AS, &lim);
    return peak_rss_bytes();
  }();
  if (size < 1) return 0;
  const size_t k = data[0] % 17;
  if (size < 1 + 6 * k) return 0;
  std::string z(reinterpret_cast<const char*>(data) + 1 + 6 * k, size - 1 - 6 * k);
  const auto fields = fields_of(z);
  for (size_t e = 0; e < k && !fields.empty(); ++e) {
    const uint8_t* ed = data + 1 + 6 * e;
    const Field& f = fields[ed[0] % fields.size()];
    const uint32_t arg = ed[2] | (ed[3] << 8) | (ed[4] << 16) | (static_cast<uint32_t>(ed[5]) << 24);
    const uint32_t old = rd(z, f.at, f.width);
    const uint32_t mask = f.width == 2 ? 0xFFFFu : 0xFFFFFFFFu;
    uint32_t v = arg;
    switch (ed[1] % 6) {
      case 0: v = arg; break;                                     // any value
      case 1: v = old + static_cast<uint32_t>(static_cast<int8_t>(arg)); break;  // off by a little
      case 2: v = mask; break;                                    // 0xFFFF(FFFF): zip64 markers
      case 3: v = old << (arg % 16); break;                       // much larger
      case 4: v = static_cast<uint32_t>(z.size()) - (arg % 64); break;  // near the end of the file
      case 5: v = old ? old - 1 : 8; break;                        // one less (method 0 -> 8)
    }
    wr(z, f.at, f.width, v & mask);
  }
  libreyolo::io::PtReadOptions opt;
  std::vector<std::string> warnings;
  opt.warnings = &warnings;
  opt.verify_crc = (size % 2) == 0;
  try {
    (void)libreyolo::io::read_pt_bytes(z, "fuzz.pt", opt);
  } catch (const libreyolo::Error& e) {
    const std::string m = e.what();
    if (m.find("allocate") != std::string::npos || m.find("bad_alloc") != std::string::npos)
      lry_fuzz::broken(("an allocation beyond the memory cap, reported as: " + m).c_str());
  } catch (const std::exception& e) {
    lry_fuzz::unnamed(e.what());
  } catch (...) {
    lry_fuzz::unnamed("a non-std exception");
  }
  if (peak_rss_bytes() > rss0 + (uint64_t(256) << 20)) lry_fuzz::broken("peak resident memory grew by more than 256 MiB");
  return 0;
}
