// Fuzz target: the dataset YAML parser (data/detect_yaml.hpp, load_dataset_yaml). The file sits in a
// folder with images/ and labels/ sub-folders, so relative split paths can resolve.
// fuzz-engine: libfuzzer (no LibTorch headers: coverage-guided with clang)
#include "fuzz_common.hpp"

#include <libreyolo/data/detect_yaml.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool made = [] {
    std::filesystem::create_directories(lry_fuzz::scratch() / "images" / "train");
    std::filesystem::create_directories(lry_fuzz::scratch() / "images" / "val");
    return true;
  }();
  (void)made;
  const auto file = lry_fuzz::write_input("data.yaml", data, size);
  lry_fuzz::guarded([&] {
    const auto d = libreyolo::data::load_dataset_yaml(file);
    if (d.names.empty()) lry_fuzz::broken("a dataset YAML loaded without class names");
    if (d.train.empty() || d.val.empty()) lry_fuzz::broken("a dataset YAML loaded without train or val");
    for (const auto& n : d.names)
      if (!libreyolo::utf8::valid(n)) lry_fuzz::broken("a class name that is not UTF-8 was accepted");
  });
  return 0;
}
