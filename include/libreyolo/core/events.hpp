#pragma once
// Events keyed by tag types (the shape of Boost.Hana's event_system example): an event is a tag type
// that names its handler signature; a system knows its events; subscribing to an event the system does
// not raise, or with a handler of another signature, is a compile error that says so. A misspelt event
// is an unknown type, also a compile error.
//
//   struct epoch_end : event<const EpochInfo&> { static constexpr std::string_view name = "epoch_end"; };
//   events::System<epoch_begin, epoch_end> sys;
//   sys.on(epoch_end{}, [](const EpochInfo& e) { ... });   // run-time subscription (std::function)
//   sys.raise(epoch_end{}, info);
//
// Subscriber objects (a trainer's fit(callbacks...)) are checked and called statically instead: an object
// handles event E by a member `void operator()(E, args...)`; check_subscriber<Sub, Events...>() rejects an
// object that handles none of the events, that has a handler for E whose arguments are not E's, or that
// still uses the old named-hook form.
#include <functional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace libreyolo::events {

// Base of an event tag: the arguments its handlers take.
template <class... Args>
struct event {
  using handler = std::function<void(Args...)>;
  template <class H>
  static constexpr bool invocable = std::is_invocable_v<H&, Args...>;
  template <class Sub, class E>
  static constexpr bool subscriber_invocable = std::is_invocable_v<Sub&, E, Args...>;
  template <class Sub, class E>
  static void deliver(Sub& s, Args... a) {
    s(E{}, std::forward<Args>(a)...);
  }
};

template <class E>
concept Event = requires {
  { E::name } -> std::convertible_to<std::string_view>;
  typename E::handler;
};

namespace detail {
// Converts to any lvalue type: probes "does Sub have some operator()(E, x...)" whatever the x are.
struct any_arg {
  template <class T>
  operator T&() const;
};
template <class Sub, class E>
constexpr bool declares_handler() {
  return std::is_invocable_v<Sub&, E> || std::is_invocable_v<Sub&, E, any_arg> ||
         std::is_invocable_v<Sub&, E, any_arg, any_arg> || std::is_invocable_v<Sub&, E, any_arg, any_arg, any_arg>;
}
template <class T, class... Ts>
inline constexpr bool one_of = (std::is_same_v<T, Ts> || ...);
template <class T, class... Ts>
constexpr size_t index_of() {
  size_t i = 0, found = sizeof...(Ts);
  ((std::is_same_v<T, Ts> ? (found = i, ++i) : ++i), ...);
  return found;
}
}  // namespace detail

// Whether a subscriber object handles E (with E's exact arguments).
template <class Sub, class E>
inline constexpr bool handles = E::template subscriber_invocable<Sub, E>;

// Compile-time checks of a subscriber object against the events a system raises.
template <class Sub, class... Es>
constexpr bool check_subscriber() {
  using S = std::remove_cvref_t<Sub>;
  static_assert(!requires(S s) { &S::after_step; } && !requires(S s) { &S::on_epoch_start; } &&
                    !requires(S s) { &S::on_epoch_end; },
                "libreyolo events: after_step / on_epoch_start / on_epoch_end members are the old hook form and "
                "would be ignored; write `void operator()(libreyolo::event::step_end, const StepInfo&)` (or "
                "epoch_begin / epoch_end with const EpochInfo&)");
  static_assert((detail::declares_handler<S, Es>() || ...),
                "libreyolo events: this callback handles none of the trainer's events (epoch_begin, step_end, "
                "epoch_end, ...): a handler is `void operator()(libreyolo::event::<name>, args)`");
  static_assert(((!detail::declares_handler<S, Es>() || handles<S, Es>) && ...),
                "libreyolo events: a handler of this callback has the wrong signature for its event (see the "
                "event's declaration in train/events.hpp for the arguments it passes)");
  return true;
}

// A run-time event system over the tags Es: handlers are std::function, kept per event.
template <Event... Es>
class System {
 public:
  template <class E, class H>
  void on(E, H&& h) {
    static_assert(detail::one_of<E, Es...>, "libreyolo events: unknown event: this system does not raise it");
    static_assert(E::template invocable<std::decay_t<H>>,
                  "libreyolo events: the handler's signature does not match the event's arguments");
    std::get<detail::index_of<E, Es...>()>(handlers_).emplace_back(std::forward<H>(h));
  }
  template <class E, class... A>
  void raise(E, A&&... a) const {
    static_assert(detail::one_of<E, Es...>, "libreyolo events: unknown event: this system does not raise it");
    for (auto& h : std::get<detail::index_of<E, Es...>()>(handlers_)) h(a...);
  }
  template <class E>
  size_t count(E) const {
    return std::get<detail::index_of<E, Es...>()>(handlers_).size();
  }

 private:
  std::tuple<std::vector<typename Es::handler>...> handlers_;
};

}  // namespace libreyolo::events
