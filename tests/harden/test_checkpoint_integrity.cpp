// Hardening regression tests: checkpoints from elsewhere (issue 18, item 7, and item 8's checkpoint
// messages and temp files). Each failed on main 22d4288.
#include <doctest/doctest.h>

#include "harden_support.hpp"

namespace ly = libreyolo;
namespace fs = std::filesystem;

namespace {

ly::train::Checkpoint small_checkpoint() {
  ly::train::Checkpoint ck;
  ck.meta = {{"format", "test"}, {"note", "hello"}};
  ck.tensors["model.weight"] = torch::arange(0, 4096, torch::kFloat).reshape({64, 64});
  ck.tensors["model.bias"] = torch::linspace(-1, 1, 64);
  ck.tensors["steps"] = torch::full({}, 7, torch::kLong);
  return ck;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("item 7: a flipped byte in a checkpoint's tensor data or meta is detected (checksum)") {
  lry_test::TempDir td("lry_h7");
  const fs::path good = td / "good.ckpt";
  ly::train::save_checkpoint(small_checkpoint(), good);
  const auto back = ly::train::load_checkpoint(good);
  CHECK(torch::equal(back.tensors.at("model.weight"), small_checkpoint().tensors.at("model.weight")));
  CHECK(back.source == good);
  const std::string bytes = read_all(good);
  // Find the tensor data (float 1.0f = 00 00 80 3F follows 0.0f in the arange) and the meta text.
  const std::string one_f("\x00\x00\x80\x3f", 4);
  const size_t data_at = bytes.find(std::string(4, '\0') + one_f);
  const size_t meta_at = bytes.find("hello");
  REQUIRE(data_at != std::string::npos);
  REQUIRE(meta_at != std::string::npos);
  int detected = 0, tried = 0;
  for (size_t at : {data_at + 6, data_at + 1000, meta_at + 1}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    const fs::path p = td / ("bad" + std::to_string(tried++) + ".ckpt");
    lry_harden::write_bytes(p, bad);
    try {
      ly::train::load_checkpoint(p);
    } catch (const ly::CheckpointError& e) {
      detected += std::string(e.what()).find(p.string()) != std::string::npos;
    }
  }
  CHECK(detected == tried);  // on main the two data flips loaded silently
}

TEST_CASE("item 7: NaN or Inf weights are refused on load, naming the tensor") {
  lry_test::TempDir td("lry_h7n");
  auto ck = small_checkpoint();
  ck.tensors["model.bias"][3] = std::numeric_limits<float>::quiet_NaN();
  ck.tensors["model.weight"][0][1] = std::numeric_limits<float>::infinity();
  ly::train::save_checkpoint(ck, td / "nan.ckpt");
  const std::string msg = lry_test::message_of<ly::CheckpointError>([&] { ly::train::load_checkpoint(td / "nan.ckpt"); });
  CHECK(msg.find("nan.ckpt") != std::string::npos);
  CHECK(msg.find("NaN/Inf") != std::string::npos);
}

TEST_CASE("item 8: temp files left by a killed writer are removed; a live writer's are kept") {
  lry_test::TempDir td("lry_h8t");
  lry_harden::write_bytes(td / "last.ckpt.tmp.999999999", "partial");  // beyond pid_max: no such process
  lry_harden::write_bytes(td / "best.ckpt.tmp.1", "live");              // pid 1 is always running
  lry_harden::write_bytes(td / "notes.tmp.x", "not ours");
  CHECK(ly::train::remove_stale_temp_files(td.path) == 1);
  CHECK_FALSE(fs::exists(td / "last.ckpt.tmp.999999999"));
  CHECK(fs::exists(td / "best.ckpt.tmp.1"));
  CHECK(fs::exists(td / "notes.tmp.x"));
}
