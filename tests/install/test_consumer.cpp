// Installs the library from this build tree into a temporary prefix and builds + runs a downstream
// project that finds it with find_package(libreyolo) — the way users embed it.
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
}  // namespace

TEST_CASE("an installed libreyolo is found by find_package and builds a consumer") {
  lry_test::TempDir d("lry_install");
  const std::string src = LIBREYOLO_SOURCE_DIR, bin = LIBREYOLO_BINARY_DIR;
  auto prefix = d / "prefix";
  auto log = d / "log.txt";
  INFO("log: " << log.string());
  int rc = sh("cmake --install " + bin + " --component dev --prefix " + prefix.string(), log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  CHECK(std::filesystem::exists(prefix / "include/libreyolo/libreyolo.hpp"));
  CHECK(std::filesystem::exists(prefix / "lib/cmake/libreyolo/libreyoloConfig.cmake"));
  // The same prefixes this build found its dependencies with (LibTorch of a pip PyTorch, ...).
  std::string deps = LIBREYOLO_PREFIX_PATH;
  std::replace(deps.begin(), deps.end(), '|', ';');
  const std::string extra = deps.empty() ? "" : ";" + deps;
  rc = sh("cmake -S " + src + "/tests/install/consumer -B " + (d / "build").string() +
              " -DCMAKE_BUILD_TYPE=Release \"-DCMAKE_PREFIX_PATH=" + prefix.string() + extra + "\"",
          log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  rc = sh("cmake --build " + (d / "build").string() + " -j2", log);
  INFO(slurp(log));
  REQUIRE(rc == 0);
  rc = sh((d / "build" / "consumer").string(), log);
  auto out = slurp(log);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("consumer ok 2x10 epochs=2 checkpoint=same") != std::string::npos);
}
