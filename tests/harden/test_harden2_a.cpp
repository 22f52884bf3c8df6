// Hardening, second pass (issue 36), items 1-3: writes never replace what is not theirs, no result
// lost to a file name that is not UTF-8, resume finds the newest complete state. Each case failed on
// main b3bb2e4 (see REPORT-a.md for how).
#include <doctest/doctest.h>

#include "harden_support.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

namespace h2a {

namespace ly = libreyolo;
namespace fs = std::filesystem;
using ResNetTrainer = ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::Eager, ly::profile::Off>;

// Whether this process can make device nodes (root with CAP_MKNOD): decided once, at registration.
inline bool can_mknod() {
  static const bool ok = [] {
    const fs::path p = fs::temp_directory_path() / ("lry_h2a_mknod_probe." + std::to_string(::getpid()));
    const bool made = ::mknod(p.c_str(), S_IFCHR | 0600, ::makedev(1, 3)) == 0;
    if (made) ::unlink(p.c_str());
    return made;
  }();
  return ok;
}

// st_mode's file type of `p` (lstat: a symlink is itself), 0 when absent.
inline mode_t type_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

inline std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Names in `dir` that contain ".tmp".
inline std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path().filename().string());
  return out;
}

// A listening-less UNIX socket file at `p` (the descriptor is closed; the file stays).
inline bool make_socket(const fs::path& p) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", p.c_str());
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// Every writer that replaces a whole file, pointed at `target`.
inline std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> writers() {
  return {
      {"checkpoint", [](const fs::path& t) {
         ly::train::Checkpoint ck;
         ck.meta = {{"x", 1}};
         ck.tensors["w"] = torch::ones({2});
         ly::train::save_checkpoint(ck, t);
       }},
      {"export", [](const fs::path& t) { ly::io::write_pt(t.string(), ly::io::PyValue::dict()); }},
      {"results", [](const fs::path& t) { ly::train::write_text_atomic(t, "epoch\n1\n"); }},
      {"profile", [](const fs::path& t) { ly::profile::write_text_file(t, "{}"); }},
      {"image", [](const fs::path& t) { ly::data::write_png(t, ly::data::Image(2, 2, 3)); }},
  };
}

// `write` must refuse `target` (kind `what`, st type `type`): OutputPathError naming the path and the
// kind, the node unchanged, no temp file beside it.
inline void expect_refused(const std::string& writer, const std::function<void(const fs::path&)>& write,
                           const fs::path& target, const std::string& what, mode_t type) {
  CAPTURE(writer);
  CAPTURE(what);
  REQUIRE(type_of(target) == type);
  std::string msg;
  try {
    write(target);
  } catch (const ly::OutputPathError& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("another error: " << e.what());
  }
  CHECK_MESSAGE(msg.find(target.string()) != std::string::npos, msg);
  CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("not a regular file") != std::string::npos, msg);
  CHECK(type_of(target) == type);  // not replaced
  CHECK(temp_files(target.parent_path()).empty());
}

// A finished one-epoch classification run (39 train images, batch 8: 4 batches, the partial fifth dropped), made once.
inline const fs::path& finished_run() {
  static lry_test::TempDir runs("lry_h2a_run");
  static const fs::path dir = [] {
    ResNetTrainer(ly::parse_args({"model=resnet18", "data=" + lry_test::tiny_classify_set().string(), "imgsz=32",
                                  "batch=8", "nbs=8", "workers=0", "device=cpu", "warmup_epochs=0", "epochs=1",
                                  "project=" + runs.path.string(), "name=r", "seed=3"}))
        .fit();
    return runs.path / "r";
  }();
  return dir;
}

// Log lines written while `f` runs.
inline std::string captured_log(const std::function<void()>& f) {
  std::string lines;
  auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines += std::string(m) + "\n"; });
  try {
    f();
  } catch (...) {
    ly::log::set_sink(prev);
    throw;
  }
  ly::log::set_sink(prev);
  return lines;
}

}  // namespace h2a

TEST_CASE("issue 36 item 1: every whole-file writer refuses a FIFO, socket, directory or symlink target") {
  for (const auto& [name, write] : h2a::writers()) {
    lry_test::TempDir td("lry_h2a_1");
    const auto fifo = td.path / "fifo.out";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    h2a::expect_refused(name, write, fifo, "a FIFO", S_IFIFO);
    const auto dir = td.path / "dir.out";
    h2a::fs::create_directories(dir);
    h2a::expect_refused(name, write, dir, "a directory", S_IFDIR);
    const auto sock = td.path / "sock.out";
    REQUIRE(h2a::make_socket(sock));
    h2a::expect_refused(name, write, sock, "a socket", S_IFSOCK);
    // A symlink pointing out of the folder: neither followed nor replaced, its target kept.
    lry_test::TempDir elsewhere("lry_h2a_1x");
    lry_harden::write_bytes(elsewhere / "precious", "keep");
    const auto link = td.path / "link.out";
    h2a::fs::create_symlink(elsewhere / "precious", link);
    h2a::expect_refused(name, write, link, "a symlink to '" + (elsewhere / "precious").string() + "'", S_IFLNK);
    CHECK(h2a::read_all(elsewhere / "precious") == "keep");
    // A plain new file is still written.
    CHECK_NOTHROW(write(td.path / "plain.out"));
    CHECK(h2a::type_of(td.path / "plain.out") == S_IFREG);
  }
}

TEST_CASE("issue 36 item 1: export out=/dev/null is refused and /dev/null stays a character device") {
  struct stat before {}, after {};
  REQUIRE(::stat("/dev/null", &before) == 0);
  REQUIRE(S_ISCHR(before.st_mode));
  CHECK_THROWS_WITH_AS(libreyolo::io::write_pt("/dev/null", libreyolo::io::PyValue::dict()),
                       doctest::Contains("'/dev/null': it is a character device"), libreyolo::OutputPathError);
  REQUIRE(::stat("/dev/null", &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_ino == before.st_ino);
  CHECK(after.st_rdev == before.st_rdev);
  CHECK(h2a::temp_files("/dev").empty());
  // The command line: exit 2 (usage: out= is an argument), a sentence that says what to do.
  REQUIRE(h2a::fs::exists(lry_harden::cli_path()));
  const auto ckpt = h2a::finished_run() / "weights" / "best.ckpt";
  REQUIRE(h2a::fs::exists(ckpt));
  std::string out;
  CHECK(lry_harden::run_cli({"export", "model=" + ckpt.string(), "out=/dev/null"}, &out) == 2);
  CHECK_MESSAGE(out.find("'/dev/null': it is a character device") != std::string::npos, out);
  CHECK_MESSAGE(out.find("choose another out=") != std::string::npos, out);
  REQUIRE(::stat("/dev/null", &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
}

TEST_CASE("issue 36 item 1: a device node made with mknod is refused by every writer (root)" * doctest::skip(!h2a::can_mknod())) {
  for (const auto& [name, write] : h2a::writers()) {
    lry_test::TempDir td("lry_h2a_dev");
    const auto dev = td.path / "null.dev";
    REQUIRE(::mknod(dev.c_str(), S_IFCHR | 0600, ::makedev(1, 3)) == 0);
    h2a::expect_refused(name, write, dev, "a character device", S_IFCHR);
  }
}

TEST_CASE("issue 36 item 1: a run whose weights folder is a symlink out of it is refused") {
  lry_test::TempDir td("lry_h2a_w");
  lry_test::TempDir elsewhere("lry_h2a_wx");
  h2a::fs::create_directories(td.path / "exp");
  h2a::fs::create_directory_symlink(elsewhere.path, td.path / "exp" / "weights");
  libreyolo::TrainConfig cfg;
  cfg.project = td.path.string();
  cfg.name = "exp";
  cfg.exist_ok = true;
  CHECK_THROWS_WITH_AS(libreyolo::train::prepare_run_dir(cfg), doctest::Contains("weights is a symlink to"),
                       libreyolo::OutputPathError);
  CHECK(h2a::fs::is_empty(elsewhere.path));
}

TEST_CASE("issue 36 item 2: a source file name that is not UTF-8 is escaped in predictions.json, with a warning") {
  lry_test::TempDir td("lry_h2a_utf8");
  const auto src = td.path / "src";
  h2a::fs::create_directories(src);
  h2a::fs::path first;
  for (const auto& e : h2a::fs::recursive_directory_iterator(lry_test::tiny_classify_set()))
    if (e.path().extension() == ".jpg" || e.path().extension() == ".png") {
      first = e.path();
      break;
    }
  REQUIRE(!first.empty());
  h2a::fs::copy_file(first, src / ("ok" + first.extension().string()));
  h2a::fs::copy_file(first, src / ("caf\xE9" + first.extension().string()));  // Latin-1 'e acute'
  libreyolo::ResNetFamily fam("18");
  fam.restore({{"names", {"a", "b", "c"}}});
  auto net = fam.make_network();
  net->eval();
  auto forward = [&](const torch::Tensor& x) { return net->forward(x); };
  libreyolo::tasks::PredictOptions po;
  po.imgsz = 32;
  po.save_images = false;
  nlohmann::json j;
  const std::string log = h2a::captured_log([&] { j = fam.predict(forward, src, po, torch::kCPU, td.path / "pred"); });
  CHECK(j.size() == 2);
  const auto file = td.path / "pred" / "predictions.json";
  REQUIRE(h2a::fs::exists(file));
  const auto saved = nlohmann::json::parse(h2a::read_all(file));
  REQUIRE(saved.size() == 2);
  std::string names;
  for (const auto& p : saved) names += p["file"].get<std::string>() + "|";
  CHECK_MESSAGE(names.find("caf\\xE9") != std::string::npos, names);
  CHECK_MESSAGE(log.find("caf\\xE9") != std::string::npos, log);
  CHECK_MESSAGE(log.find("not valid UTF-8") != std::string::npos, log);
}

TEST_CASE("issue 36 item 2: predict skips an unreadable image, writes every other one, then says how many failed") {
  lry_test::TempDir td("lry_h2a_skip");
  const auto src = td.path / "src";
  h2a::fs::create_directories(src);
  h2a::fs::path first;
  for (const auto& e : h2a::fs::recursive_directory_iterator(lry_test::tiny_classify_set()))
    if (e.path().extension() == ".jpg") {
      first = e.path();
      break;
    }
  REQUIRE(!first.empty());
  h2a::fs::copy_file(first, src / "a.jpg");
  lry_harden::write_bytes(src / "b.jpg", "\xFF\xD8\xFF truncated");  // sorted between the two good ones
  h2a::fs::copy_file(first, src / "c.jpg");
  libreyolo::ResNetFamily fam("18");
  fam.restore({{"names", {"a", "b", "c"}}});
  auto net = fam.make_network();
  net->eval();
  libreyolo::tasks::PredictOptions po;
  po.imgsz = 32;
  po.save_images = false;
  SUBCASE("a corrupt image in the middle: the two others are predicted and written, then a DataError") {
    auto forward = [&](const torch::Tensor& x) { return net->forward(x); };
    std::string what;
    const std::string log = h2a::captured_log([&] {
      try {
        fam.predict(forward, src, po, torch::kCPU, td.path / "pred");
      } catch (const libreyolo::DataError& e) {
        what = e.what();
      }
    });
    CHECK_MESSAGE(what.find("1 of 3 image(s) could not be read and were skipped (first: " + (src / "b.jpg").string()) != std::string::npos, what);
    CHECK_MESSAGE(what.find("the other 2 are in " + (td.path / "pred" / "predictions.json").string()) != std::string::npos, what);
    CHECK_MESSAGE(log.find("predict: skipped " + (src / "b.jpg").string() + ": ") != std::string::npos, log);
    const auto saved = nlohmann::json::parse(h2a::read_all(td.path / "pred" / "predictions.json"));
    REQUIRE(saved.size() == 2);
    CHECK(saved[0]["file"] == (src / "a.jpg").string());
    CHECK(saved[1]["file"] == (src / "c.jpg").string());
  }
  SUBCASE("any other failure stops the loop, but what was predicted before it is written") {
    h2a::fs::remove(src / "b.jpg");
    int calls = 0;
    auto forward = [&](const torch::Tensor& x) {
      if (++calls == 2) throw std::runtime_error("out of memory (simulated)");
      return net->forward(x);
    };
    CHECK_THROWS_WITH(fam.predict(forward, src, po, torch::kCPU, td.path / "pred"), "out of memory (simulated)");
    const auto saved = nlohmann::json::parse(h2a::read_all(td.path / "pred" / "predictions.json"));
    REQUIRE(saved.size() == 1);
    CHECK(saved[0]["file"] == (src / "a.jpg").string());
  }
}

TEST_CASE("issue 36 item 3: a kill during the first last.ckpt write resumes from best.ckpt, saying so") {
  lry_test::TempDir td("lry_h2a_r");
  h2a::fs::copy(h2a::finished_run(), td.path / "r", h2a::fs::copy_options::recursive);
  const auto weights = td.path / "r" / "weights";
  REQUIRE(h2a::fs::exists(weights / "best.ckpt"));
  h2a::fs::remove(weights / "last.ckpt");  // what the kill left: best.ckpt, and last.ckpt's partial temp
  lry_harden::write_bytes(weights / "last.ckpt.tmp.999999999", "partial");
  const std::vector<std::string> resume{"resume=true", "project=" + td.path.string(), "name=r", "epochs=2"};
  libreyolo::TrainResult r;
  const std::string log = h2a::captured_log([&] { r = h2a::ResNetTrainer(libreyolo::parse_args(resume)).fit(); });
  CHECK(r.epochs_done == 2);
  CHECK_MESSAGE(log.find("resuming from " + (weights / "best.ckpt").string()) != std::string::npos, log);
  CHECK_MESSAGE(log.find("last.ckpt is missing") != std::string::npos, log);
  CHECK_MESSAGE(log.find("from epoch 2") != std::string::npos, log);
  CHECK(h2a::fs::exists(weights / "last.ckpt"));
}

TEST_CASE("issue 36 item 3: resuming inside an epoch with another batch is refused, naming both values") {
  lry_test::TempDir td("lry_h2a_b");
  const std::vector<std::string> base{"model=resnet18", "data=" + lry_test::tiny_classify_set().string(), "imgsz=32",
                                      "batch=8", "nbs=8", "workers=0", "device=cpu", "warmup_epochs=0", "epochs=1",
                                      "project=" + td.path.string(), "name=m", "seed=3", "max_steps=2"};
  h2a::ResNetTrainer(libreyolo::parse_args(base)).fit();  // stops after 2 of 4 batches: last.ckpt mid-epoch
  REQUIRE(h2a::fs::exists(td.path / "m" / "weights" / "last.ckpt"));
  const std::vector<std::string> other{"resume=true", "project=" + td.path.string(), "name=m", "batch=4", "max_steps=0"};
  CHECK_THROWS_WITH_AS(h2a::ResNetTrainer(libreyolo::parse_args(other)).fit(),
                       doctest::Contains("after 2 batches of batch=8 (16 images); batch=4 would not continue at that image"),
                       libreyolo::ConfigError);
  // The same batch (given again explicitly) continues.
  const std::vector<std::string> same{"resume=true", "project=" + td.path.string(), "name=m", "batch=8", "max_steps=0"};
  libreyolo::TrainResult r;
  CHECK_NOTHROW(r = h2a::ResNetTrainer(libreyolo::parse_args(same)).fit());
  CHECK(r.epochs_done == 1);
}
