// Hardening, second pass (issue 36), items 4 and 5: bounded memory on hostile .pt archives, and
// errors that name what is wrong, where. Each case failed on main b3bb2e4.
#include <doctest/doctest.h>

#include "harden_support.hpp"

#include <sys/resource.h>
#include <sys/stat.h>

namespace h2b {

namespace ly = libreyolo;
namespace io = libreyolo::io;
namespace fs = std::filesystem;
using lry_harden::run_cli;

// ---- a minimal zip writer (stored or deflated records, as given) --------------------------------
struct Rec {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint32_t crc = 0;
  std::string data;     // the bytes in the file (compressed for method 8)
  uint64_t size = 0;    // the uncompressed size the directory declares
};

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xFFFF);
  put16(s, v >> 16);
}

std::string zip_of(const std::vector<Rec>& recs) {
  std::string out, cd;
  for (const auto& r : recs) {
    const auto off = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50u);
    put16(out, 20), put16(out, 0), put16(out, r.method), put16(out, 0), put16(out, 0);
    put32(out, r.crc), put32(out, static_cast<uint32_t>(r.data.size())), put32(out, static_cast<uint32_t>(r.size));
    put16(out, static_cast<uint32_t>(r.name.size())), put16(out, 0);
    out += r.name + r.data;
    put32(cd, 0x02014b50u);
    put16(cd, 20), put16(cd, 20), put16(cd, 0), put16(cd, r.method), put16(cd, 0), put16(cd, 0);
    put32(cd, r.crc), put32(cd, static_cast<uint32_t>(r.data.size())), put32(cd, static_cast<uint32_t>(r.size));
    put16(cd, static_cast<uint32_t>(r.name.size())), put16(cd, 0), put16(cd, 0), put16(cd, 0), put16(cd, 0);
    put32(cd, 0), put32(cd, off);
    cd += r.name;
  }
  const auto cd_off = static_cast<uint32_t>(out.size());
  out += cd;
  put32(out, 0x06054b50u);
  put16(out, 0), put16(out, 0), put16(out, static_cast<uint32_t>(recs.size())), put16(out, static_cast<uint32_t>(recs.size()));
  put32(out, static_cast<uint32_t>(cd.size())), put32(out, cd_off), put16(out, 0);
  return out;
}

// A raw deflate stream that really inflates to `total` zero bytes (a multiple of 1 MiB): one
// independently compressed MiB (full flush: byte-aligned, no reference before it) repeated, then an
// empty final block. About 1 KB per MiB, so the declared size passes the zip directory's ratio check.
std::string zero_bomb(uint64_t total) {
  const std::string mib(size_t(1) << 20, '\0');
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string chunk(deflateBound(&z, mib.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(mib.data()));
  z.avail_in = static_cast<uInt>(mib.size());
  z.next_out = reinterpret_cast<Bytef*>(chunk.data());
  z.avail_out = static_cast<uInt>(chunk.size());
  REQUIRE(deflate(&z, Z_FULL_FLUSH) == Z_OK);
  chunk = chunk.substr(0, chunk.size() - z.avail_out);
  deflateEnd(&z);
  std::string out;
  out.reserve(chunk.size() * (total >> 20) + 2);
  for (uint64_t i = 0; i < (total >> 20); ++i) out += chunk;
  return out + std::string("\x03\x00", 2);
}

// The records of a valid torch.save file of {"w": 4 float32} (16 bytes of storage), from our writer.
std::vector<Rec> small_pt_records() {
  io::PyValue root = io::PyValue::dict();
  root.set("w", io::PyValue::tensor(torch::arange(4, torch::kFloat32)));
  const std::string bytes = io::write_pt_bytes(root);
  io::MemoryReadAdapter in(bytes.data(), bytes.size());
  const auto dir = io::read_zip_directory(in, "seed");
  std::vector<Rec> recs;
  for (const auto& en : dir.entries) {
    const auto* lh = reinterpret_cast<const unsigned char*>(bytes.data() + en.local_offset);
    const size_t at = en.local_offset + 30 + io::detail::le16(lh + 26) + io::detail::le16(lh + 28);
    REQUIRE(en.method == 0);
    recs.push_back({en.name, 0, en.crc, bytes.substr(at, en.comp_size), en.size});
  }
  return recs;
}

Rec& record(std::vector<Rec>& recs, const std::string& suffix) {
  for (auto& r : recs)
    if (r.name.size() >= suffix.size() && r.name.compare(r.name.size() - suffix.size(), suffix.size(), suffix) == 0) return r;
  FAIL("no record ending in " << suffix);
  return recs.front();
}

void make_bomb(Rec& r, uint64_t declared) {
  r.method = 8;
  r.crc = 0;
  r.data = zero_bomb(declared);
  r.size = declared;
  REQUIRE(declared <= r.data.size() * 1100 + 65536);  // passes the directory's deflate-ratio check
}

uint64_t vm_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t pages = 0;
  f >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A two-layer network: a stem whose width is the "size", a head whose outputs are the classes.
struct TinyNet : torch::nn::Module {
  TinyNet(int64_t width, int64_t nc)
      : stem(register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, width, 3)))),
        head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(width, nc, 1)))) {}
  torch::nn::Conv2d stem, head;
};

io::PyValue original_root(const torch::nn::Module& net, int64_t nc) {
  io::PyValue root = io::PyValue::dict();
  root.set("model", io::PyValue::state_dict(io::module_state_dict(net)));
  root.set("schema_version", io::PyValue::string("1.0"));
  root.set("model_family", io::PyValue::string("yolox"));
  root.set("size", io::PyValue::string("n"));
  root.set("task", io::PyValue::string("detect"));
  root.set("nc", io::PyValue::integer(nc));
  io::PyValue names = io::PyValue::dict();
  for (int64_t i = 0; i < nc; ++i) names.set(io::PyValue::integer(i), io::PyValue::string("c" + std::to_string(i)));
  root.set("names", names);
  root.set("imgsz", io::PyValue::integer(640));
  return root;
}

// A checkpoint of ours that names a real model but holds no weights: enough for the CLI's Model().
fs::path weightless_checkpoint(const fs::path& dir, nlohmann::json config = {{"task", "detect"}}) {
  ly::train::Checkpoint ck;
  ck.meta = {{"format", io::kTrainerCheckpointFormat}, {"model", "yoloxt"}, {"family_name", "yolox"},
             {"family", {{"names", {"c0", "c1", "c2"}}, {"nc", 3}, {"size", "t"}}}, {"config", config}};
  ck.tensors["model.unused"] = torch::zeros({1});
  const fs::path p = dir / "weightless.ckpt";
  ly::train::save_checkpoint(ck, p);
  return p;
}

}  // namespace h2b

TEST_CASE("issue 36 item 4: a .pt whose zip directory declares 2 GiB for a 16-byte storage is refused before inflating, in bounded memory") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b4");
  auto recs = small_pt_records();
  const uint64_t declared = uint64_t(2) << 30;
  make_bomb(record(recs, "/data/0"), declared);  // a real bomb: the stream does inflate to 2 GiB
  const std::string file = zip_of(recs);
  CHECK(file.size() < (uint64_t(4) << 20));
  // In a child whose address space is capped at 512 MiB above what it has: on main the reader
  // allocated the declared 2 GiB (and inflated into it) before comparing it with the pickle.
  const fs::path msg_file = td / "message.txt";
  const uint64_t cap = vm_bytes() + (uint64_t(512) << 20);
  const auto r = lry_harden::in_child([&] {
    rlimit lim{cap, cap};
    if (::setrlimit(RLIMIT_AS, &lim) != 0) return 5;
    try {
      io::read_pt_bytes(file, "hostile.pt");
    } catch (const ly::CheckpointError& e) {
      std::ofstream(msg_file) << e.what();
      return 0;
    } catch (const std::bad_alloc&) {
      return 3;
    }
    return 4;
  });
  INFO(r.describe());
  CHECK((r.exited && r.code == 0));
  const std::string m = slurp(msg_file);
  INFO(m);
  CHECK(m.find("hostile.pt") != std::string::npos);
  CHECK(m.find("'data/0'") != std::string::npos);
  CHECK(m.find(std::to_string(declared) + " bytes") != std::string::npos);  // what the directory declares
  CHECK(m.find("(16 bytes)") != std::string::npos);                         // what the pickle says
  CHECK(m.find("as the zip directory declares it") != std::string::npos);   // found before inflating
}

TEST_CASE("issue 36 item 4: records other than the storages (version, data.pkl) declaring huge sizes are refused uninflated") {
  using namespace h2b;
  {
    auto recs = small_pt_records();
    Rec& version = record(recs, "version");  // read by PyTorchStreamReader's constructor
    make_bomb(version, uint64_t(100) << 20);
    const std::string m = lry_test::message_of<ly::CheckpointError>([&] { io::read_pt_bytes(zip_of(recs), "big_version.pt"); });
    INFO(m);
    CHECK(m.find("big_version.pt") != std::string::npos);
    CHECK(m.find("record '" + version.name + "' declares 104857600 bytes") != std::string::npos);
  }
  {
    auto recs = small_pt_records();
    make_bomb(record(recs, "/data.pkl"), uint64_t(100) << 20);
    const std::string m = lry_test::message_of<ly::CheckpointError>([&] { io::read_pt_bytes(zip_of(recs), "big_pickle.pt"); });
    INFO(m);
    CHECK(m.find("big_pickle.pt") != std::string::npos);
    CHECK(m.find("record 'archive/data.pkl' declares 104857600 bytes") != std::string::npos);
  }
  // The untouched records still read (the writer's layout, rezipped without alignment padding).
  const auto v = io::read_pt_bytes(h2b::zip_of(h2b::small_pt_records()), "fine.pt");
  CHECK(v.find("w") != nullptr);
}

TEST_CASE("issue 36 item 5: a shape mismatch names the checkpoint file and says whether the class count or the model size differs") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5s");
  TinyNet trained(8, 3);
  ly::train::Checkpoint ck;
  ly::train::put_module_state(ck, "model.", trained);
  ck.meta = {{"family", {{"nc", 3}, {"size", "n"}}}};
  const fs::path path = td / "tiny.ckpt";
  ly::train::save_checkpoint(ck, path);
  const auto back = ly::train::load_checkpoint(path);
  TinyNet other_classes(8, 5), other_size(16, 3);
  std::string m = lry_test::message_of<ly::CheckpointError>([&] { ly::train::get_module_state(back, "model.", other_classes); });
  INFO(m);
  CHECK(m.find(path.string()) != std::string::npos);
  CHECK(m.find("'model.head.weight'") != std::string::npos);
  CHECK(m.find("the class count differs") != std::string::npos);
  CHECK(m.find("3 classes") != std::string::npos);
  m = lry_test::message_of<ly::CheckpointError>([&] { ly::train::get_module_state(back, "model.", other_size); });
  CHECK(m.find(path.string()) != std::string::npos);
  CHECK(m.find("the model size differs") != std::string::npos);
  // For a new training run (weights=): another class count loads the stem and leaves the head as initialised.
  const auto head_before = other_classes.head->weight.clone();
  const auto fresh = ly::train::get_module_state_new_classes(back, "model.", other_classes);
  CHECK(fresh == std::vector<std::string>{"head.weight", "head.bias"});
  CHECK(torch::equal(other_classes.stem->weight, trained.stem->weight));
  CHECK(torch::equal(other_classes.head->weight, head_before));
  const auto stem_before = other_size.stem->weight.clone();
  m = lry_test::message_of<ly::CheckpointError>([&] { ly::train::get_module_state_new_classes(back, "model.", other_size); });
  CHECK(m.find("the model size differs") != std::string::npos);
  CHECK(torch::equal(other_size.stem->weight, stem_before));  // a refused load changes nothing
  // One-dimensional differences by unequal amounts are not a class count (head rows 3 -> 5, its bias 3 -> 4).
  auto uneven = back;
  uneven.tensors["model.head.bias"] = torch::zeros({4});
  TinyNet five(8, 5);
  m = lry_test::message_of<ly::CheckpointError>([&] { ly::train::get_module_state_new_classes(uneven, "model.", five); });
  CHECK(m.find("the model size differs") != std::string::npos);
  CHECK(m.find("'n'") != std::string::npos);
  // The original's .pt: its tensors' errors name the .pt (on main they said just "checkpoint").
  const fs::path pt = td / "orig.pt";
  io::write_pt(pt.string(), original_root(trained, 3));
  const auto from_pt = io::load_any_checkpoint(pt);
  m = lry_test::message_of<ly::CheckpointError>([&] { ly::train::get_module_state(from_pt, "model.", other_classes); });
  CHECK(m.find(pt.string()) != std::string::npos);
  CHECK(m.find("the class count differs") != std::string::npos);
}

TEST_CASE("issue 36 item 5: an original .pt of an unknown schema_version is refused (2.0) or warned about (1.1)") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5v");
  TinyNet net(4, 2);
  auto root = original_root(net, 2);
  root.set("schema_version", io::PyValue::string("2.0"));
  const fs::path v2 = td / "schema2.pt";
  io::write_pt(v2.string(), root);
  const std::string m = lry_test::message_of<ly::CheckpointError>([&] { io::load_any_checkpoint(v2); });
  INFO(m);
  CHECK(m.find(v2.string()) != std::string::npos);
  CHECK(m.find("schema_version '2.0' is not supported") != std::string::npos);
  root.set("schema_version", io::PyValue::string("1.1"));
  const fs::path v11 = td / "schema11.pt";
  io::write_pt(v11.string(), root);
  std::string warned;
  auto old = ly::log::set_sink([&](ly::log::Level, std::string_view line) { warned += std::string(line) + "\n"; });
  CHECK_NOTHROW(io::load_any_checkpoint(v11));
  ly::log::set_sink(old);
  INFO(warned);
  CHECK(warned.find(v11.string() + ": schema_version '1.1' differs") != std::string::npos);
}

TEST_CASE("issue 36 item 5: our .ckpt renamed to .pt is named a libreyolo checkpoint, not a code-execution refusal") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5r");
  ly::train::Checkpoint ck;
  ck.meta = {{"format", io::kTrainerCheckpointFormat}};
  ck.tensors["model.w"] = torch::ones({2});
  const fs::path pt = td / "renamed.pt";
  ly::train::save_checkpoint(ck, pt);
  const std::string m = lry_test::message_of<ly::CheckpointError>([&] { io::load_any_checkpoint(pt); });
  INFO(m);
  CHECK(m.find(pt.string() + ": this is a libreyolo checkpoint") != std::string::npos);
  CHECK(m.find("renamed.ckpt") != std::string::npos);
  CHECK(m.find("code execution") == std::string::npos);
  std::string out;
  CHECK(run_cli({"val", "model=" + pt.string()}, &out) == 5);
  CHECK(out.find("this is a libreyolo checkpoint") != std::string::npos);
}

TEST_CASE("issue 36 item 5: checkpoint metadata imgsz = 10^12 is named, not wrapped to an int") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5i");
  ly::train::Checkpoint ck;
  ck.meta = {{"format", io::kTrainerCheckpointFormat}, {"config", {{"imgsz", 1000000000000LL}}}};
  ck.tensors["model.w"] = torch::ones({2});
  const fs::path ours = td / "big.ckpt";
  ly::train::save_checkpoint(ck, ours);
  std::string m = lry_test::message_of<ly::CheckpointError>([&] { io::load_any_checkpoint(ours); });
  INFO(m);
  CHECK(m.find(ours.string()) != std::string::npos);
  CHECK(m.find("config.imgsz = 1000000000000") != std::string::npos);
  TinyNet net(4, 2);
  auto root = original_root(net, 2);
  root.set("imgsz", io::PyValue::integer(1000000000000LL));
  const fs::path pt = td / "big.pt";
  io::write_pt(pt.string(), root);
  m = lry_test::message_of<ly::CheckpointError>([&] { io::load_any_checkpoint(pt); });
  CHECK(m.find(pt.string()) != std::string::npos);
  CHECK(m.find("config.imgsz = 1000000000000") != std::string::npos);
}

TEST_CASE("issue 36 item 5: predict source= of a FIFO or a device is a sentence (exit 4), not a filesystem exception") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5p");
  const fs::path model = weightless_checkpoint(td.path);
  const fs::path fifo = td / "pipe.jpg";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string out;
  CHECK(run_cli({"predict", "model=" + model.string(), "source=" + fifo.string(), "project=" + (td / "runs").string()}, &out) == 4);
  INFO(out);
  CHECK(out.find("source=" + fifo.string() + " is a FIFO (named pipe)") != std::string::npos);
  CHECK(out.find("filesystem error") == std::string::npos);
  CHECK(run_cli({"predict", "model=" + model.string(), "source=/dev/null", "project=" + (td / "runs").string()}, &out) == 4);
  CHECK(out.find("source=/dev/null is a character device") != std::string::npos);
}

TEST_CASE("issue 36 item 5: a .ckpt without the model's name, family or config is named with the key it lacks (exit 5)") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5m");
  const nlohmann::json full = {{"format", io::kTrainerCheckpointFormat},
                               {"model", "yoloxt"},
                               {"family_name", "yolox"},
                               {"family", {{"names", {"c0"}}, {"nc", 1}, {"size", "t"}}},
                               {"config", {{"task", "detect"}}}};
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {[&] { auto m = full; m.erase("model"); return m; }(), "its metadata has no 'model' name"},
      {[&] { auto m = full; m["model"] = ""; return m; }(), "its metadata has no 'model' name"},
      {[&] { auto m = full; m.erase("family"); return m; }(), "its metadata has no 'family' object"},
      {[&] { auto m = full; m["family"]["names"] = {1, 2}; return m; }(), "'family.names' is not a list of class names"},
      {[&] { auto m = full; m.erase("config"); return m; }(), "its metadata has no 'config' object"},
  };
  for (const auto& [meta, want] : cases) {
    ly::train::Checkpoint ck;
    ck.meta = meta;
    ck.tensors["model.unused"] = torch::zeros({1});
    const fs::path p = td / "partial.ckpt";
    ly::train::save_checkpoint(ck, p);
    for (const std::string cmd : {"predict", "val", "export"}) {
      std::string out;
      std::vector<std::string> args = {cmd, "model=" + p.string()};
      if (cmd == "predict") args.push_back("source=" + (td / "none.jpg").string());
      CAPTURE(cmd);
      CAPTURE(want);
      CHECK(run_cli(args, &out) == 5);
      INFO(out);
      CHECK(out.find("checkpoint " + p.string() + ": " ) != std::string::npos);
      CHECK(out.find(want) != std::string::npos);
      CHECK(out.find("json.exception") == std::string::npos);
    }
  }
}

TEST_CASE("issue 36 item 5: data synth --images 0 gets a plain message") {
  using namespace h2b;
  lry_test::TempDir td("lry_h2b5d");
  std::string out;
  CHECK(run_cli({"data", "synth", "--task", "detect", "--out", (td / "s").string(), "--images", "0"}, &out) == 2);
  INFO(out);
  CHECK(out.find("--images: a dataset needs at least one image (got 0)") != std::string::npos);
  CHECK(out.find("179769") == std::string::npos);
  CHECK(!fs::exists(td / "s"));
}
