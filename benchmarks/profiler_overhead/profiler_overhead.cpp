// Profiler overhead, measured inside one process with the arms interleaved (SPEC §2.1, issue 7):
//   off     Trainer<…, profile::Off>        — what `libreyolo train` builds when profile=false
//   idle    Trainer<…, profile::Window<>>  whose window starts after the epoch: the policy's run-time
//                                             checks in every step, nothing measured
//   window  Trainer<…, profile::Window<>>  with profile=true  — 5 warm-up + 20 measured steps (the last
//                                             --traced of the 10 synchronised ones under the kernel tracer),
//                                             report and artifacts written, then the epoch runs on to its end
//   window_all  the same with every synchronised step traced (profile_trace_steps=0)
//   window_fg   the window arm with Kineto's stop and read-out on the training thread instead of the
//               report thread (Window::set_background_readout(false))
// Each arm trains one epoch of `--steps` steps (default 200) of ResNet-18 on a cached classification set
// (or YOLOv9-t/s on a detection set: --model yolo9t --data data.yaml); the epoch is timed from
// on_epoch_start to on_epoch_end (no validation). Repeated `--reps` times.
//   profiler_overhead --data DIR|YAML [--model resnet18|resnet34|yolo9t|yolo9s] [--imgsz 224] [--batch 16]
//                     [--steps 200] [--reps 3] [--workers 4] [--device cuda] [--traced 2]
// --arms off,idle,window picks a subset (default: all five; `off` is always run, it is the reference).
// Prints one JSON line per epoch (with its first --head step times), then a summary line with, per arm,
// the median epoch time and, paired with the same repetition's off (median, min, max), the epoch ratio,
// the steady-rate ratio and the added excess (below). per_step.py reads the epoch lines step by step.
//
// Epoch times on a shared machine drift by ~10% between epochs of the same arm (the whole epoch runs
// faster or slower), which hides a 2% effect. So each epoch's time is also split into its steady rate
// (the median step) and its excess over that rate: excess_s = epoch_s - steps * median step. The window's
// cost is what it adds to the excess (paired with the same repetition's `off`), as a share of off's epoch;
// `idle`, which does no profiling work, gives the noise of that measure. The steady rate itself is
// compared too (median_over_off): a profiler that slowed every later step would show there.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "../bench_options.hpp"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <iostream>
#include <map>
#include <sstream>

namespace ly = libreyolo;

namespace {
struct Args {
  std::string data, model = "resnet18", device = "cuda";
  std::string arms = "off,idle,window,window_all,window_fg";
  int imgsz = 224, batch = 16, steps = 200, reps = 3, workers = 4, traced = ly::profile::Window<>::default_traced, head = 60;
};

const std::vector<std::string> all_arms{"off", "idle", "window", "window_all", "window_fg"};

std::vector<std::string> split_arms(const std::string& list) {
  std::vector<std::string> out{"off"};
  std::string item;
  std::istringstream in(list);
  while (std::getline(in, item, ',')) {
    if (std::find(all_arms.begin(), all_arms.end(), item) == all_arms.end())
      throw std::invalid_argument("--arms: unknown arm '" + item + "'; allowed: off, idle, window, window_all, window_fg");
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  bench::Options()
      .add("--data", &a.data)
      .add("--model", &a.model)
      .add("--device", &a.device)
      .add("--imgsz", &a.imgsz)
      .add("--batch", &a.batch)
      .add("--steps", &a.steps)
      .add("--reps", &a.reps)
      .add("--workers", &a.workers)
      .add("--traced", &a.traced)
      .add("--arms", &a.arms)
      .add("--head", &a.head)
      .parse(argc, argv);
  if (a.data.empty()) throw std::invalid_argument("--data DIR is required (a classification folder, e.g. from `libreyolo data synth`)");
  return a;
}

// Epoch time, and each step's time (between consecutive after_step hooks) to see where a difference
// lands: in the first 30 steps (warm-up + window + the tracer's read-out) or spread over the rest.
struct EpochClock {
  std::chrono::steady_clock::time_point t0, last;
  double seconds = 0;
  std::vector<double> step_ms;
  void operator()(ly::event::epoch_begin, const ly::EpochInfo&) { t0 = last = std::chrono::steady_clock::now(); }
  void operator()(ly::event::step_end, const ly::StepInfo&) {
    const auto now = std::chrono::steady_clock::now();
    step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  }
  void operator()(ly::event::epoch_end, const ly::EpochInfo&) {
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

double median_of(std::vector<double> v) {  // the mean of the middle two for an even count
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Timing {
  double epoch_s = 0, fit_s = 0;
  double first30_s = 0, rest_median_ms = 0;  // steps 1-30 in total; the median step after them
  double median_ms = 0, excess_s = 0;        // the median of all steps; epoch_s - steps * median
  std::vector<double> head_ms;               // the first --head step times
  nlohmann::json tracer = nullptr;  // window arm: the tracer's own cost on the training thread
};

template <class Family, class Prof>
Timing run_epoch(const Args& a, const std::string& arm, bool profile, int traced = 0, bool background = true) {
  auto cfg = ly::parse_args({"data=" + a.data, "epochs=1", "imgsz=" + std::to_string(a.imgsz), "batch=" + std::to_string(a.batch),
                             "nbs=" + std::to_string(a.batch), "workers=" + std::to_string(a.workers), "cache=ram",
                             "val=false", "warmup_epochs=0", "device=" + a.device, "project=runs/profiler_overhead",
                             "name=" + arm, "exist_ok=true", "max_steps=" + std::to_string(a.steps),
                             std::string("profile=") + (profile ? "true" : "false")});
  ly::Trainer<Family, ly::precision::FamilyDefault, ly::capture::Eager, Prof> t(cfg, Family(a.model.substr(Family::name.size())));
  if constexpr (Prof::enabled) {
    if (!profile) t.profiler().set_window(1 << 30, 20);  // never reached: an idle policy
    t.profiler().set_traced_steps(traced);
    t.profiler().set_background_readout(background);
  }
  EpochClock clock;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = t.fit(clock);
  const double fit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.optimizer_steps < a.steps)
    throw std::runtime_error("arm " + arm + " ran " + std::to_string(r.optimizer_steps) + " steps, fewer than --steps " +
                             std::to_string(a.steps) + ": give it a larger data set");
  Timing out{clock.seconds, fit_s};
  const auto& ms = clock.step_ms;
  const size_t head = std::min<size_t>(30, ms.size());
  for (size_t i = 0; i < head; ++i) out.first30_s += ms[i] / 1e3;
  out.rest_median_ms = median_of(std::vector<double>(ms.begin() + static_cast<std::ptrdiff_t>(head), ms.end()));
  out.median_ms = median_of(ms);
  out.excess_s = out.epoch_s - static_cast<double>(ms.size()) * out.median_ms / 1e3;
  for (size_t i = 0; i < std::min<size_t>(static_cast<size_t>(std::max(0, a.head)), ms.size()); ++i)
    out.head_ms.push_back(std::round(ms[i] * 1e3) / 1e3);
  if constexpr (Prof::enabled)
    if (profile && t.profiler().produced()) {
      const auto& rec = t.profiler().record();
      out.tracer = {{"setup_ms", rec.tracer_setup_ms}, {"start_ms", rec.tracer_start_ms},
                    {"detach_ms", rec.tracer_detach_ms}, {"readout_ms", rec.tracer_readout_ms},
                    {"convert_ms", rec.tracer_convert_ms}, {"traced_steps", rec.steps.size() - rec.traced_from},
                    {"device_events", rec.gpu.size()}, {"cpu_ops", rec.cpu_ops.size()}};
    }
  return out;
}

using Results = std::map<std::string, std::vector<Timing>>;  // arm -> one Timing per repetition

template <class Family>
Results run_arms(const Args& a) {
  // A first, untimed epoch warms up cuDNN, the allocator and the page cache for every arm alike.
  run_epoch<Family, ly::profile::Off>(a, "warmup", false);
  const auto arms = split_arms(a.arms);
  Results out;
  for (int rep = 0; rep < a.reps; ++rep) {
    // Each repetition starts one arm later, so no arm always runs first (or right after another one).
    for (size_t i = 0; i < arms.size(); ++i) {
      const std::string& arm = arms[(i + static_cast<size_t>(rep)) % arms.size()];
      const bool all = arm == "window_all";
      const Timing s = arm == "off" ? run_epoch<Family, ly::profile::Off>(a, arm, false)
                                    : run_epoch<Family, ly::profile::Window<>>(a, arm, arm != "idle", all ? 0 : a.traced,
                                                                               /*background=*/arm != "window_fg");
      out[arm].push_back(s);
      std::cout << nlohmann::json{{"rep", rep}, {"arm", arm}, {"epoch_s", s.epoch_s}, {"fit_s", s.fit_s}, {"steps", a.steps},
                                  {"first30_s", s.first30_s}, {"rest_median_ms", s.rest_median_ms},
                                  {"median_ms", s.median_ms}, {"excess_s", s.excess_s}, {"tracer", s.tracer}, {"head_ms", s.head_ms}}
                       .dump()
                << std::endl;
    }
  }
  return out;
}

// median, min and max of `f(arm's timing, off's timing)` over the repetitions (paired with that repetition's off).
template <class F>
nlohmann::json paired(const std::vector<Timing>& arm, const std::vector<Timing>& off, F f) {
  std::vector<double> r;
  for (size_t k = 0; k < arm.size() && k < off.size(); ++k) r.push_back(f(arm[k], off[k]));
  if (r.empty()) return nullptr;
  return {{"median", median_of(r)}, {"min", *std::min_element(r.begin(), r.end())}, {"max", *std::max_element(r.begin(), r.end())}};
}
}  // namespace

int main(int argc, char** argv) try {
  const auto a = parse(argc, argv);
  Results res;
  if (a.model == "resnet18" || a.model == "resnet34") res = run_arms<ly::ResNetFamily>(a);
  else if (a.model == "yolo9t" || a.model == "yolo9s") res = run_arms<ly::Yolo9Family>(a);
  else throw std::invalid_argument("--model " + a.model + ": allowed resnet18, resnet34, yolo9t, yolo9s");
  const auto& off = res.at("off");
  // Per arm: the median epoch (s) and, paired with the same repetition's off, the epoch ratio (drift
  // between repetitions cancels, drift between epochs does not), the steady-rate ratio, and the added
  // excess as a share of off's epoch (the estimate that drift between epochs does not reach).
  nlohmann::json arms = nlohmann::json::object();
  for (const auto& [arm, t] : res) {
    std::vector<double> epochs;
    for (const auto& x : t) epochs.push_back(x.epoch_s);
    arms[arm] = {{"epoch_s", median_of(epochs)}};
    if (arm == "off") continue;
    arms[arm]["epoch_over_off"] = paired(t, off, [](const Timing& x, const Timing& o) { return x.epoch_s / o.epoch_s; });
    arms[arm]["median_over_off"] = paired(t, off, [](const Timing& x, const Timing& o) { return x.median_ms / o.median_ms; });
    arms[arm]["added_excess_pct"] =
        paired(t, off, [](const Timing& x, const Timing& o) { return 100 * (x.excess_s - o.excess_s) / o.epoch_s; });
  }
  std::cout << nlohmann::json{{"summary", true}, {"model", a.model}, {"batch", a.batch},   {"imgsz", a.imgsz},
                              {"steps", a.steps},  {"reps", a.reps},    {"traced", a.traced}, {"arms", arms},
                              {"torch", ly::compat::torch_version()}}
                   .dump()
            << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "profiler_overhead: " << e.what() << "\n";
  return 2;
}
