// The conformance suite (kit/conformance.inc) over the test-only family list (kit/example_families.hpp),
// and the guide's example checked against the code compiled here: docs/adding-a-family.md quotes
// kit/tiny_family.hpp verbatim, so the guide is a program that passes conformance.
// Its own translation unit (tests/CMakeLists.txt keeps it out of the kit's unity unit, as the generated
// conformance units are).
#include "kit/example_families.hpp"
#include "kit/kit_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

namespace lry_test {
#define LRY_EXAMPLE_POLICIES(folder, Type) std::declval<family_policies<libreyolo::Type>>(),
using kit_policies = decltype(std::tuple_cat(LRY_TEST_FAMILIES(LRY_EXAMPLE_POLICIES) std::tuple<>()));
#undef LRY_EXAMPLE_POLICIES
}  // namespace lry_test

#include "kit/conformance.inc"

namespace {
std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f, "cannot read " << p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("docs/adding-a-family.md: its smallest complete example is tests/kit/tiny_family.hpp, verbatim") {
  const std::string guide = read_text(LIBREYOLO_SOURCE_DIR "/docs/adding-a-family.md");
  const std::string code = read_text(LIBREYOLO_SOURCE_DIR "/tests/kit/tiny_family.hpp");
  REQUIRE(code.rfind("// tests/kit/tiny_family.hpp", 0) == 0);
  // The guide's ```cpp block that opens with the file's first line.
  const auto open = guide.find("```cpp\n" + code.substr(0, code.find('\n') + 1));
  REQUIRE_MESSAGE(open != std::string::npos, "the guide has no ```cpp block opening with the file's first line");
  const auto body = open + std::string("```cpp\n").size();
  const auto close = guide.find("```\n", body);
  REQUIRE(close != std::string::npos);
  CHECK(guide.substr(body, close - body) == code);
  // The example is registered in the test-only list, so the conformance suite above ran over it.
  CHECK(std::tuple_size_v<lry_test::kit_policies> >= 1);
  CHECK((std::is_same_v<std::tuple_element_t<0, lry_test::kit_policies>, libreyolo::TinyFamily>));
}
