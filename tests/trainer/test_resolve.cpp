// Static resolution of capture policies: a combination that cannot be captured becomes Eager at
// compile time, and says so exactly once.
#include <doctest/doctest.h>
#include <libreyolo/capture/eager.hpp>
#include <libreyolo/families/resnet/family.hpp>

#include <string>
#include <type_traits>
#include <vector>

namespace ly = libreyolo;

namespace {
struct FakeGraphs : ly::capture::Eager {  // stands in for a graph-capturing policy
  static constexpr bool graphs = true;
};
struct NotCapturable {
  static constexpr ly::Task task = ly::Task::detect;
  struct traits : ly::family_defaults {};  // capture_region = none
};
}  // namespace

static_assert(ly::capture::CapturePolicy<ly::capture::Eager>);
static_assert(std::is_same_v<ly::capture::resolve_t<ly::ResNetFamily, FakeGraphs>, FakeGraphs>);
static_assert(std::is_same_v<ly::capture::resolve_t<NotCapturable, FakeGraphs>, ly::capture::Eager>);
static_assert(std::is_same_v<ly::capture::resolve_t<ly::ResNetFamily, FakeGraphs, ly::capture::Mode::distributed>,
                             ly::capture::Eager>);
static_assert(std::is_same_v<ly::capture::resolve_t<ly::ResNetFamily, ly::capture::Eager>, ly::capture::Eager>);

TEST_CASE("a static capture downgrade prints its notice exactly once") {
  std::vector<std::string> lines;
  auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines.emplace_back(m); });
  using R = ly::capture::resolve<NotCapturable, FakeGraphs>;
  R::notice();
  R::notice();
  using D = ly::capture::resolve<ly::ResNetFamily, FakeGraphs, ly::capture::Mode::distributed>;
  D::notice();
  D::notice();
  ly::capture::resolve<ly::ResNetFamily, FakeGraphs>::notice();  // not downgraded: silent
  ly::log::set_sink(prev);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "cuda_graph=true ignored (family not capturable); training runs eager.");
  CHECK(lines[1] == "cuda_graph=true ignored (distributed); training runs eager.");
}
