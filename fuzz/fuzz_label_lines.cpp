// Fuzz target: YOLO label files (data/label_cache.hpp, parse_label_file): every accepted box must be a
// valid normalised box of a known class, every refusal a reason naming the file.
#include "fuzz_common.hpp"

#include <libreyolo/data/label_cache.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = lry_fuzz::write_input("label.txt", data, size);
  lry_fuzz::guarded([&] {
    constexpr int nc = 3;
    libreyolo::data::LabelEntry e;
    uint64_t dups = 0;
    std::string note;
    bool overflow = false;
    const std::string why = libreyolo::data::detail::parse_label_file(file, nc, e, dups, note, &overflow);
    if (!why.empty()) {
      if (why.find(file.string()) == std::string::npos) lry_fuzz::broken("a refusal that does not name the file");
      return;
    }
    if (overflow) lry_fuzz::broken("class overflow flagged on an accepted file");
    for (const auto& b : e.boxes) {
      if (!(b[0] >= 0 && b[0] < nc && b[0] == static_cast<float>(static_cast<int>(b[0]))))
        lry_fuzz::broken("an accepted box with a bad class id");
      for (int k = 1; k < 5; ++k)
        if (!(b[k] >= 0.f && b[k] <= 1.f)) lry_fuzz::broken("an accepted coordinate outside [0, 1]");
      if (!(b[3] > 0.f && b[4] > 0.f)) lry_fuzz::broken("an accepted box of zero width or height");
    }
  });
  return 0;
}
