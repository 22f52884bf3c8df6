// libFuzzer target: the torch.save checkpoint reader (zip directory, PyTorchStreamReader, the
// restricted unpickler, tensor views) on arbitrary bytes, from memory; nothing touches the disk.
// Every input must end in a value or a libreyolo::CheckpointError/DataError: any other exception,
// crash, hang or sanitizer report is a bug. What reads successfully is also dumped as JSON and,
// when it has no placeholders, written back and read again.
// Seeds: fuzz/corpus/pt/ (the files tests/data/pt/make_pt_files.py writes).
#include <libreyolo/io/pt_archive.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    libreyolo::log::set_level(libreyolo::log::Level::quiet);
    return true;
  }();
  (void)quiet;
  namespace io = libreyolo::io;
  std::vector<std::string> warnings;
  io::PtReadOptions opt;
  opt.warnings = &warnings;
  // Mutated pickles would mostly stop at the CRC check; check CRCs only on every other input so
  // that the rest reach the unpickler.
  opt.verify_crc = (size % 2) == 0;
  try {
    const io::PyValue v = io::read_pt_bytes(data, size, "fuzz.pt", opt);
    (void)io::to_json(v).dump();
    try {
      const std::string again = io::write_pt_bytes(v, "fuzz-out.pt");
      (void)io::read_pt_bytes(again, "fuzz-out.pt", opt);
    } catch (const libreyolo::CheckpointError&) {
      // placeholders and unwritable values are refused by the writer
    }
  } catch (const libreyolo::CheckpointError&) {
  } catch (const libreyolo::DataError&) {
  }
  return 0;
}
