#pragma once
// Running the built `libreyolo` program (build/tools/libreyolo: build the libreyolo_cli target first)
// end to end on tiny data: one shared work folder per test process with the data sets and the runs the
// test cases build on.
#include <doctest/doctest.h>

#include "support.hpp"

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace lry_cli {
namespace fs = std::filesystem;

inline fs::path cli_path() { return fs::path(LIBREYOLO_BINARY_DIR) / "tools" / "libreyolo"; }

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
  std::string all() const { return out + err; }
};

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `libreyolo args...` with `env` (NAME=value) in its environment; stdout and stderr kept apart.
inline Result run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  lry_test::TempDir tmp("lry_cli_out");
  std::string cmd = "env";
  for (const auto& e : env) cmd += " " + quote(e);
  cmd += " " + quote(cli_path().string());
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " > " + quote((tmp / "out").string()) + " 2> " + quote((tmp / "err").string()) + " < /dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(tmp / "out");
  r.err = slurp(tmp / "err");
  return r;
}

inline bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }
inline size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}
inline size_t files_in(const fs::path& dir, const std::string& ext) {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ext) ++n;
  return n;
}

// The shared work folder: data sets and trained runs are made once, by the first test case that needs them.
struct Work {
  lry_test::TempDir dir{"lry_cli"};
  fs::path det_data, cls_data, det_run, cls_run;
  static Work& get() {
    static Work w;
    return w;
  }
  fs::path operator/(const std::string& s) const { return dir / s; }

  // The common training keys for a small CPU run.
  static std::vector<std::string> tiny_train(std::vector<std::string> extra) {
    std::vector<std::string> a{"train", "device=cpu", "workers=0", "warmup_epochs=0", "seed=1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  const fs::path& detect_data() {
    if (det_data.empty()) {
      auto r = run({"data", "synth", "--task", "detect", "--out", (dir / "det").string(), "--images", "24", "--imgsz", "64",
                    "--classes", "2", "--seed", "3"});
      REQUIRE_MESSAGE(r.code == 0, r.all());
      det_data = dir / "det" / "data.yaml";
    }
    return det_data;
  }
  const fs::path& classify_data() {
    if (cls_data.empty()) {
      auto r = run({"data", "synth", "--task", "classify", "--out", (dir / "cls").string(), "--images", "36", "--imgsz", "32",
                    "--classes", "3", "--seed", "3"});
      REQUIRE_MESSAGE(r.code == 0, r.all());
      cls_data = dir / "cls";
    }
    return cls_data;
  }
  // A 2-epoch YOLOv9-t run at 64 px (validation each epoch, pictures on).
  const fs::path& detect_run() {
    if (det_run.empty()) {
      auto r = run(tiny_train({"model=yolo9t", "data=" + detect_data().string(), "epochs=2", "imgsz=64", "batch=4",
                               "eval_interval=1", "no_aug_epochs=1", "project=" + (dir / "runs").string(), "name=det"}));
      REQUIRE_MESSAGE(r.code == 0, r.all());
      det_run = dir / "runs" / "det";
    }
    return det_run;
  }
  const fs::path& classify_run() {
    if (cls_run.empty()) {
      auto r = run(tiny_train({"model=resnet18", "data=" + classify_data().string(), "epochs=1", "imgsz=32", "batch=8",
                               "project=" + (dir / "runs").string(), "name=cls"}));
      REQUIRE_MESSAGE(r.code == 0, r.all());
      cls_run = dir / "runs" / "cls";
    }
    return cls_run;
  }
};

inline nlohmann::json parse_json(const std::string& s) {
  try {
    return nlohmann::json::parse(s);
  } catch (const std::exception& e) {
    FAIL("not JSON (" << e.what() << "): " << s.substr(0, 400));
    return {};
  }
}

}  // namespace lry_cli
