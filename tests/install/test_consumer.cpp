// Installs the library from this build tree into a temporary prefix and builds + runs downstream projects
// that find it with find_package(libreyolo) — the ways users embed it: header-only in two units
// (tests/install/consumer), and the run-time facade through the installed compiled components
// (tests/install/facade_consumer).
#include <doctest/doctest.h>

#include "install/install_support.hpp"
#include "support.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace {
using lry_test::sh;
using lry_test::slurp;
// The same prefixes this build found its dependencies with (LibTorch of a pip PyTorch, ...), after `first`.
std::string prefix_path(const std::filesystem::path& first) {
  std::string deps = LIBREYOLO_PREFIX_PATH;
  std::replace(deps.begin(), deps.end(), '|', ';');
  return first.string() + (deps.empty() ? "" : ";" + deps);
}
// Configures tests/install/<project> against the installed `prefix` (no optimisation: the programs run a
// little, and compile much), builds it in `dir` and runs `program_and_args` there; returns its output.
std::string build_and_run(const std::string& project, const std::filesystem::path& prefix,
                          const std::filesystem::path& dir, const std::string& program_and_args,
                          const std::filesystem::path& log) {
  int rc = sh("cmake -S " + std::string(LIBREYOLO_SOURCE_DIR) + "/tests/install/" + project + " -B " +
                  dir.string() + " -DCMAKE_BUILD_TYPE= \"-DCMAKE_PREFIX_PATH=" + prefix_path(prefix) + "\"",
              log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  rc = sh("cmake --build " + dir.string() + " -j2", log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  rc = sh((dir / program_and_args).string(), log);
  auto out = slurp(log);
  INFO(out);
  CHECK(rc == 0);
  return out;
}
}  // namespace

TEST_CASE("an installed libreyolo is found by find_package and builds a consumer") {
  lry_test::TempDir d("lry_install");
  const std::string bin = LIBREYOLO_BINARY_DIR;
  auto prefix = d / "prefix";
  auto log = d / "log.txt";
  INFO("log: " << log.string());
  int rc = sh("cmake --install " + bin + " --component dev --prefix " + prefix.string(), log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  CHECK(std::filesystem::exists(prefix / "include/libreyolo/libreyolo.hpp"));
  CHECK(std::filesystem::exists(prefix / "lib/cmake/libreyolo/libreyoloConfig.cmake"));
  const auto out = build_and_run("consumer", prefix, d / "build", "consumer", log);
  CHECK(out.find("consumer ok 2x10 epochs=2 checkpoint=same second=3") != std::string::npos);
}

#if defined(LIBREYOLO_TESTS_COMPONENTS)
TEST_CASE("the installed compiled components run the facade: Model::train with libreyolo::families") {
#else
TEST_CASE("the installed compiled components run the facade: Model::train with libreyolo::families" *
          doctest::skip()) {  // this build has no compiled core (LIBREYOLO_COMPILED_LIB=OFF): nothing to install
#endif
  lry_test::TempDir d("lry_install_facade");
  const std::string bin = LIBREYOLO_BINARY_DIR;
  auto prefix = d / "prefix";
  auto log = d / "log.txt";
  INFO("log: " << log.string());
  for (const char* component : {"dev", "core", "families"}) {
    int rc = sh("cmake --install " + bin + " --component " + component + " --prefix " + prefix.string(), log);
    INFO(component << ": " << slurp(log));
    REQUIRE(rc == 0);
  }
  CHECK(std::filesystem::exists(prefix / "lib/cmake/libreyolo/libreyoloCoreTargets.cmake"));
  CHECK(std::filesystem::exists(prefix / "lib/cmake/libreyolo/libreyoloFamiliesTargets.cmake"));
  CHECK(std::filesystem::exists(prefix / "lib/liblibreyolo_families.a"));
  const auto out = build_and_run("facade_consumer", prefix, d / "build", "facade_consumer " + (d / "work").string(), log);
  CHECK(out.find("facade ok model=resnet18 epochs=1 best=written") != std::string::npos);
}

TEST_CASE("find_package(libreyolo COMPONENTS ...) names a component that is not installed or does not exist") {
  lry_test::TempDir d("lry_install_components");
  const std::string bin = LIBREYOLO_BINARY_DIR;
  auto prefix = d / "prefix";
  auto log = d / "log.txt";
  int rc = sh("cmake --install " + bin + " --component dev --prefix " + prefix.string(), log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  auto proj = d / "proj";
  std::filesystem::create_directories(proj);
  auto try_components = [&](const std::string& components) {
    std::ofstream(proj / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.22)\nproject(p LANGUAGES CXX)\n"
                                           << "find_package(libreyolo REQUIRED COMPONENTS " << components << ")\n";
    std::filesystem::remove_all(d / "build");
    int r = sh("cmake -S " + proj.string() + " -B " + (d / "build").string() + " \"-DCMAKE_PREFIX_PATH=" +
                   prefix_path(prefix) + "\"",
               log);
    return std::make_pair(r, slurp(log));
  };
  auto [rc1, out1] = try_components("families");  // only the headers were installed
  INFO(out1);
  CHECK(rc1 != 0);
  CHECK(out1.find("component 'core' is not installed") != std::string::npos);
  auto [rc2, out2] = try_components("cuda");
  INFO(out2);
  CHECK(rc2 != 0);
  CHECK(out2.find("no component 'cuda'; the components are: core, families") != std::string::npos);
}
