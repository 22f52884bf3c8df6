// The family list and the dispatch built on it: model names, task=, the default model, the model list,
// and the static capture fallback for another task of a captured family.
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include "support_extern.hpp"

#include "kit/region_family.hpp"
#include "support.hpp"

#include <boost/hana.hpp>

#include <string>

namespace ly = libreyolo;

namespace {
// A family that trains two tasks: detection through its first policy, classification through a second,
// declared in task_policies; only detection is captured.
struct TwoTaskClassify;
struct TwoTaskDetect : ly::tasks::DetectTask<TwoTaskDetect> {
  static constexpr std::string_view name = "twotask";
  static constexpr std::array<std::string_view, 2> sizes{"a", "b"};
  struct traits : ly::family_defaults {
    static constexpr ly::CaptureRegion capture_region = ly::CaptureRegion::network;
    static constexpr std::array<ly::Task, 1> captured_tasks{ly::Task::detect};
  };
  static constexpr auto task_policies = boost::hana::tuple_t<TwoTaskDetect, TwoTaskClassify>;
  using Network = lry_test::TokenNet;
  explicit TwoTaskDetect(std::string s = "a") : DetectTask(std::move(s)) {}
  Network make_network() const { return Network(3, 8); }
  ly::train::LossOutput loss(const torch::Tensor& t, const Batch&) { return {t.sum(), t.sum().detach().reshape({1})}; }
  static std::vector<std::string> loss_names() { return {"loss"}; }
  std::vector<torch::Tensor> decode(const torch::Tensor&, const ly::tasks::DecodeOptions&) const { return {}; }
};
struct TwoTaskClassify : ly::tasks::ClassifyTask<TwoTaskClassify> {
  static constexpr std::string_view name = "twotask";
  static constexpr std::array<std::string_view, 2> sizes{"a", "b"};
  using traits = TwoTaskDetect::traits;
  using Network = lry_test::TokenNet;
  explicit TwoTaskClassify(std::string s = "a") : ClassifyTask(std::move(s)) {}
  Network make_network() const { return Network(3, 8); }
  static ly::train::LossOutput loss(const torch::Tensor& l, const Batch& b) { return cross_entropy(l, b); }
  static std::vector<std::string> loss_names() { return {"loss"}; }
};
constexpr auto test_registry = boost::hana::tuple_t<ly::ResNetFamily, TwoTaskDetect>;

template <class P>
std::string task_of(const std::string& model, const std::string& task = "") {
  return ly::with_family_in(test_registry, model, task, [](auto p) {
    return std::string(decltype(p)::task_info::name) + ":" + p.size();
  });
}
}  // namespace

static_assert(ly::capture::resolve<TwoTaskDetect, ly::capture::CudaGraph<>>::type::graphs);
static_assert(!ly::capture::resolve<TwoTaskClassify, ly::capture::CudaGraph<>>::type::graphs);
static_assert(ly::family_traits<TwoTaskClassify>::task == ly::Task::classify);
static_assert(ly::tasks::TaskPolicy<TwoTaskDetect> && ly::tasks::TaskPolicy<TwoTaskClassify>);

TEST_CASE("model names pick a family, a size and a task; task= picks another task of the family") {
  CHECK(task_of<void>("twotaska") == "detect:a");
  CHECK(task_of<void>("twotaskb-cls") == "classify:b");
  CHECK(task_of<void>("twotaskb", "classify") == "classify:b");
  CHECK(task_of<void>("twotaska", "detect") == "detect:a");
  CHECK(task_of<void>("resnet34") == "classify:34");
  CHECK(task_of<void>("resnet18", "classify") == "classify:18");
  CHECK_THROWS_WITH_AS(task_of<void>("resnet18", "detect"), doctest::Contains("does not train this task"), ly::ConfigError);
  CHECK_THROWS_WITH_AS(task_of<void>("twotaska", "semantic"), doctest::Contains("its tasks: detect, classify"), ly::ConfigError);
  CHECK_THROWS_WITH_AS(task_of<void>("twotaska", "pose"), doctest::Contains("unknown task"), ly::ConfigError);
  CHECK_THROWS_WITH_AS(task_of<void>("twotaskc"), doctest::Contains("twotaska, twotaskb, twotaska-cls"), ly::ConfigError);
}

TEST_CASE("the list's default model, model list and CLI help come from the registered families") {
  using First = typename decltype(+boost::hana::front(ly::registered_families))::type;
  CHECK(ly::families::default_model() == std::string(First::name) + std::string(First::sizes.front()));
  CHECK(ly::Model("").name() == ly::families::default_model());
  const auto list = ly::families::model_list(ly::registered_families, true);
  boost::hana::for_each(ly::registered_families, [&](auto t) {
    using F = typename decltype(t)::type;
    for (auto size : F::sizes) CHECK(list.find(std::string(F::name) + std::string(size)) != std::string::npos);
    CHECK(list.find(std::string(F::task_info::data_help)) != std::string::npos);
  });
  CHECK(ly::families::model_list(test_registry) == "resnet18, resnet34, resnet50, resnet101, twotaska, twotaskb, twotaska-cls, twotaskb-cls");
}

TEST_CASE("the static capture fallback covers another task of a captured family, with one notice") {
  std::vector<std::string> lines;
  auto prev = ly::log::set_sink([&](ly::log::Level, std::string_view m) { lines.emplace_back(m); });
  ly::capture::resolve<TwoTaskClassify, ly::capture::CudaGraph<>>::notice();
  ly::capture::resolve<TwoTaskClassify, ly::capture::CudaGraph<>>::notice();
  ly::log::set_sink(prev);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "cuda_graph=true ignored (this task of the family is not captured); training runs eager.");
}
