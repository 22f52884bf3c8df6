// The CLI's exit-code table, tested on the built `libreyolo` program (issue 18, the exit-code item and
// item 8's CLI parts). Each failed on main 22d4288 (where dataset/checkpoint/device errors exited 1).
#include <doctest/doctest.h>

#include "harden_support.hpp"

namespace ly = libreyolo;
namespace fs = std::filesystem;
using lry_harden::run_cli;

TEST_CASE("CLI: --help prints the exit-code table") {
  REQUIRE(fs::exists(lry_harden::cli_path()));
  std::string out;
  CHECK(run_cli({"--help"}, &out) == 0);
  CHECK(out.find("Exit codes:") != std::string::npos);
  for (const char* row : {"   2  usage", "   4  dataset", "   5  checkpoint", "   6  device", " 130  interrupted"})
    CHECK_MESSAGE(out.find(row) != std::string::npos, row);
}

TEST_CASE("CLI: each kind of error exits with its own code and names the cause") {
  REQUIRE(fs::exists(lry_harden::cli_path()));
  lry_test::TempDir td("lry_hcli");
  const std::string data = "data=" + lry_test::tiny_classify_set().string();
  const std::string project = "project=" + td.path.string();
  std::string out;
  CHECK(run_cli({"train", "bogus=1"}, &out) == 2);
  CHECK(out.find("unknown key 'bogus'") != std::string::npos);
  CHECK(run_cli({"train", "model=resnet18", "batch=4294967300"}, &out) == 2);
  CHECK(run_cli({"train", "model=resnet18", "data=" + (td / "none").string(), "device=cpu", project}, &out) == 4);
  CHECK(out.find("does not exist") != std::string::npos);
  CHECK(run_cli({"val", "model=" + (td / "nope" / "best.ckpt").string()}, &out) == 5);
  CHECK(out.find("no such checkpoint file") != std::string::npos);  // on main: "unknown model"
  CHECK(run_cli({"predict", "model=" + (td / "gone.ckpt").string(), "source=" + td.path.string()}, &out) == 5);
  lry_harden::write_bytes(td / "junk.ckpt", "not a checkpoint at all");
  CHECK(run_cli({"val", "model=" + (td / "junk.ckpt").string()}, &out) == 5);
  CHECK(out.find("junk.ckpt") != std::string::npos);
  CHECK(run_cli({"train", "model=resnet18", data, "device=cuda:99", project}, &out) == 6);
  CHECK(run_cli({"train", "resume=true", project, "name=missing"}, &out) == 6);
  CHECK(out.find("no checkpoint") != std::string::npos);
}

TEST_CASE("CLI: resume=true project= name= without model= resumes the run's own model; SIGINT exits 130") {
  REQUIRE(fs::exists(lry_harden::cli_path()));
  lry_test::TempDir td("lry_hcli2");
  const std::vector<std::string> common{"data=" + lry_test::tiny_classify_set().string(), "imgsz=32", "batch=8", "nbs=8",
                                        "workers=0", "device=cpu", "warmup_epochs=0", "project=" + td.path.string(),
                                        "name=r34", "val=false"};
  std::vector<std::string> first{"train"};
  first.insert(first.end(), common.begin(), common.end());
  first.insert(first.end(), {"model=resnet34", "epochs=2", "max_steps=2"});
  std::string out;
  REQUIRE(run_cli(first, &out) == 0);  // stops mid-epoch at max_steps
  // The README's form: no model= (on main: resnet18 was built, and the resnet34 checkpoint did not fit).
  const int rc = run_cli({"train", "resume=true", "project=" + td.path.string(), "name=r34", "max_steps=0"}, &out);
  CHECK_MESSAGE(rc == 0, out);
  CHECK(out.find("libreyolo train: resnet34") != std::string::npos);
  // Ctrl-C: the run saves where it is and exits 130.
  auto third = common;
  std::erase(third, "name=r34");  // a key given twice is a usage error (issue 36)
  third.insert(third.end(), {"model=resnet18", "epochs=1000", "name=int"});
  std::string cmd = lry_harden::shell_quote(lry_harden::cli_path().string()) + " train";
  for (const auto& a : third) cmd += " " + lry_harden::shell_quote(a);
  const fs::path log = td / "int.log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + lry_harden::shell_quote(log.string()) + " 2>&1").c_str(),
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  const fs::path csv = td / "int" / "results.csv";
  for (int i = 0; i < 1200 && !fs::exists(csv); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(fs::exists(csv));  // one epoch done
  ::kill(pid, SIGINT);
  const auto r = lry_harden::wait_child(pid, 120);
  CHECK_MESSAGE(r.exited, r.describe());
  CHECK(r.code == 130);
  CHECK_NOTHROW(ly::train::load_checkpoint(td / "int" / "weights" / "last.ckpt"));
}
