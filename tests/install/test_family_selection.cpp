// LIBREYOLO_FAMILIES: configuring the source tree with a subset of the registered families generates the
// selection header the registry reads, one family unit per chosen family, and a command line that
// compiles against the subset; a wrong name or a subset with the tests on fails at configure time with
// a message that says what is allowed.
#include <doctest/doctest.h>

#include "install/install_support.hpp"
#include "support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace {
using lry_test::sh;
using lry_test::slurp;
// cmake -S <source> -B <dir> with this build's dependency prefixes and `args`.
int configure(const std::filesystem::path& dir, const std::string& args, const std::filesystem::path& log) {
  std::string deps = LIBREYOLO_PREFIX_PATH;
  std::replace(deps.begin(), deps.end(), '|', ';');
  return sh("cmake -S " + std::string(LIBREYOLO_SOURCE_DIR) + " -B " + dir.string() + " -G Ninja" +
                (deps.empty() ? std::string{} : " \"-DCMAKE_PREFIX_PATH=" + deps + "\"") + " " + args,
            log);
}
}  // namespace

TEST_CASE("LIBREYOLO_FAMILIES compiles a subset of the families into the command line") {
  lry_test::TempDir d("lry_families");
  const auto log = d / "log.txt";
  INFO("log: " << log.string());

  SUBCASE("a subset: the selection header, one unit per chosen family, a command line that compiles") {
    const auto b = d / "b";
    int rc = configure(b,
                       "\"-DLIBREYOLO_FAMILIES=yolo9;resnet\" -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_EXAMPLES=OFF "
                       "-DLIBREYOLO_USE_PCH=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                       log);
    INFO(slurp(log));
    REQUIRE(rc == 0);
    CHECK(slurp(log).find("libreyolo: families resnet, yolo9 (left out: yolox,") != std::string::npos);
    const auto header = slurp(b / "generated" / "libreyolo_family_selection.hpp");
    // In the list's order, whatever the order given.
    CHECK(header.find("LIBREYOLO_FAMILY(resnet, ResNetFamily) LIBREYOLO_FAMILY(yolo9, Yolo9Family)\n") !=
          std::string::npos);
    CHECK(header.find("#define LIBREYOLO_UNSELECTED_FAMILY_NAMES \"yolox, rtmdet,") != std::string::npos);
    CHECK(std::filesystem::exists(b / "tools" / "families" / "family_yolo9.cpp"));
    CHECK(std::filesystem::exists(b / "tools" / "families" / "family_resnet.cpp"));
    CHECK_FALSE(std::filesystem::exists(b / "tools" / "families" / "family_yolox.cpp"));

    // The command line's unit compiles against the subset (its registry names the two families only and
    // declares their trainers extern): its own compile command, syntax only.
    std::ifstream cc(b / "compile_commands.json");
    REQUIRE(cc.good());
    const auto commands = nlohmann::json::parse(cc);
    std::string cli_command;
    for (const auto& c : commands)
      if (c.at("file").get<std::string>().ends_with("tools/libreyolo.cpp")) cli_command = c.at("command");
    REQUIRE_FALSE(cli_command.empty());
    CHECK(cli_command.find("-DLIBREYOLO_FAMILY_SELECTION") != std::string::npos);
    const auto o = cli_command.find(" -o ");
    REQUIRE(o != std::string::npos);
    const auto o_end = cli_command.find(' ', o + 4);
    cli_command = cli_command.substr(0, o) + " -fsyntax-only" + cli_command.substr(o_end);
    rc = sh("cd " + b.string() + " && " + cli_command, log);
    INFO(slurp(log));
    CHECK(rc == 0);
  }
  SUBCASE("an unknown family is named with the allowed ones") {
    const int rc = configure(d / "bad", "\"-DLIBREYOLO_FAMILIES=yolo9;yolo99\" -DLIBREYOLO_BUILD_TESTS=OFF", log);
    const auto out = slurp(log);
    INFO(out);
    CHECK(rc != 0);
    CHECK(out.find("LIBREYOLO_FAMILIES: 'yolo99' is not a family of") != std::string::npos);
    CHECK(out.find("allowed: resnet, yolo9, yolox") != std::string::npos);
  }
  SUBCASE("a subset with the tests on is refused") {
    const int rc = configure(d / "tests", "-DLIBREYOLO_FAMILIES=yolo9 -DLIBREYOLO_BUILD_TESTS=ON", log);
    const auto out = slurp(log);
    INFO(out);
    CHECK(rc != 0);
    CHECK(out.find("the tests and benchmarks use every family") != std::string::npos);
  }
}
