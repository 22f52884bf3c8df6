#include <doctest/doctest.h>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/log.hpp>

#include <string>
#include <vector>

TEST_CASE("notice_once prints a key exactly once") {
  using namespace libreyolo;
  std::vector<std::string> lines;
  auto prev = log::set_sink([&](log::Level, std::string_view m) { lines.emplace_back(m); });
  log::reset_once();
  CHECK(log::notice_once("k", "first"));
  CHECK_FALSE(log::notice_once("k", "second"));
  CHECK(log::notice_once("k2", "other"));
  log::set_sink(prev);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "first");
  CHECK(lines[1] == "other");
}

TEST_CASE("compat reports the LibTorch version it was built with") {
  CHECK(libreyolo::compat::torch_version().rfind(std::to_string(TORCH_VERSION_MAJOR) + ".", 0) == 0);
}
