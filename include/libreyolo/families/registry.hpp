#pragma once
// The run-time name -> family table the facade and the command line dispatch through, built from
// families/list.hpp: every listed family's header is included here, and `registered_families` is the
// Hana type list of their trainer policies (in list order).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/list.hpp>
#include <libreyolo/tasks/all.hpp>

#include <boost/hana.hpp>
#include <boost/preprocessor/arithmetic/dec.hpp>
#include <boost/preprocessor/iteration/iterate.hpp>
#include <boost/preprocessor/seq/elem.hpp>
#include <boost/preprocessor/seq/enum.hpp>
#include <boost/preprocessor/seq/size.hpp>
#include <boost/preprocessor/seq/transform.hpp>
#include <boost/preprocessor/stringize.hpp>
#include <boost/preprocessor/tuple/elem.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

// Each family's header.
#define LIBREYOLO_FAMILY_AS_SEQ_(folder, Type) ((folder, Type))
#define LIBREYOLO_FAMILY_SEQ_ LIBREYOLO_REGISTERED_FAMILIES(LIBREYOLO_FAMILY_AS_SEQ_)
#define BOOST_PP_ITERATION_LIMITS (0, BOOST_PP_DEC(BOOST_PP_SEQ_SIZE(LIBREYOLO_FAMILY_SEQ_)))
#define BOOST_PP_FILENAME_1 <libreyolo/families/detail/include_family.hpp>
#include BOOST_PP_ITERATE()

namespace libreyolo {

#define LIBREYOLO_FAMILY_TYPE_(s, data, elem) ::libreyolo::BOOST_PP_TUPLE_ELEM(2, 1, elem)
inline constexpr auto registered_families =
    boost::hana::tuple_t<BOOST_PP_SEQ_ENUM(BOOST_PP_SEQ_TRANSFORM(LIBREYOLO_FAMILY_TYPE_, _, LIBREYOLO_FAMILY_SEQ_))>;
#undef LIBREYOLO_FAMILY_TYPE_

namespace families {

// The trainer policies of a family: one per task it trains (Type::task_policies), else Type alone.
template <class F>
constexpr auto task_policies() {
  if constexpr (requires { F::task_policies; }) return F::task_policies;
  else return boost::hana::tuple_t<F>;
}

// The model name of policy P of family F at `size`: family + size, plus the task's suffix ("-cls") for
// every task but the family's first.
template <class F, class P>
std::string model_name(std::string_view size) {
  std::string n = std::string(F::name) + std::string(size);
  if constexpr (!std::is_same_v<F, P>) n += std::string(P::task_info::model_suffix);
  return n;
}

// "resnet18, resnet34 (classify: ...); yolo9t, yolo9s (detect: ...)" for help texts and errors.
template <class Registry>
std::string model_list(Registry reg, bool with_data = false) {
  std::string out;
  boost::hana::for_each(reg, [&](auto t) {
    using F = typename decltype(t)::type;
    boost::hana::for_each(task_policies<F>(), [&](auto pt) {
      using P = typename decltype(pt)::type;
      std::string line;
      for (std::string_view size : P::sizes) line += (line.empty() ? "" : ", ") + model_name<F, P>(size);
      if (with_data) line += " (" + std::string(P::task_info::name) + ": " + std::string(P::task_info::data_help) + ")";
      out += (out.empty() ? "" : with_data ? "\n" : ", ") + line;
    });
  });
  return out;
}

// The default model= (the first size of the first listed family).
inline std::string default_model() {
  using F = typename decltype(+boost::hana::front(registered_families))::type;
  return std::string(F::name) + std::string(F::sizes.front());
}

}  // namespace families

// Runs `fn(policy_instance)` for the trainer policy that a model name (family + size [+ task suffix])
// names; `task` (the task= key, "" = the name's) picks another task of the same family. Returns fn's
// result by value; every call of fn must return the same type.
template <class Registry, class Fn>
auto with_family_in(Registry reg, const std::string& model, const std::string& task, Fn&& fn) {
  namespace hana = boost::hana;
  using First = typename decltype(+hana::front(reg))::type;
  using R = std::decay_t<decltype(fn(std::declval<First>()))>;
  std::optional<Task> want;
  if (!task.empty()) {
    want = tasks::parse_task(task);
    if (!want) throw ConfigError("task=" + task + ": unknown task; allowed: detect, classify, semantic, point");
  }
  std::optional<R> out;
  bool family_matched = false;
  std::string family_tasks;
  hana::for_each(reg, [&](auto t) {
    using F = typename decltype(t)::type;
    hana::for_each(families::task_policies<F>(), [&](auto pt) {
      using P = typename decltype(pt)::type;
      auto visit = [&](std::string_view size, bool planned) {
        const std::string base = std::string(F::name) + std::string(size);
        const bool by_name = !want && model == families::model_name<F, P>(size);
        const bool by_task = want && (model == base || model == families::model_name<F, P>(size));
        if (want && (model == base || model.rfind(base + "-", 0) == 0)) {
          family_matched = true;
          family_tasks += (family_tasks.empty() ? "" : ", ") + std::string(P::task_info::name);
        }
        if (out || !(by_name || (by_task && P::task == *want))) return;
        if (planned) (void)P(std::string(size));  // throws "not implemented yet"
        else out.emplace(fn(P(std::string(size))));
      };
      for (std::string_view size : P::sizes) visit(size, false);
      if constexpr (requires { P::planned_sizes; })
        for (std::string_view size : P::planned_sizes) visit(size, true);
    });
  });
  if (!out && family_matched)
    throw ConfigError("task=" + task + ": model " + model + " does not train this task; its tasks: " + family_tasks);
  if (!out) {
    const std::string_view left_out = LIBREYOLO_UNSELECTED_FAMILY_NAMES;
    throw ConfigError("model=" + model + ": unknown model; available: " + families::model_list(reg) +
                      (left_out.empty() ? std::string{}
                                        : "; this build compiled some families only (LIBREYOLO_FAMILIES), leaving out: " +
                                              std::string(left_out)));
  }
  return R(std::move(*out));
}

template <class Fn>
auto with_family(const std::string& model, Fn&& fn) {
  return with_family_in(registered_families, model, "", std::forward<Fn>(fn));
}
template <class Fn>
auto with_family(const std::string& model, const std::string& task, Fn&& fn) {
  return with_family_in(registered_families, model, task, std::forward<Fn>(fn));
}

}  // namespace libreyolo
