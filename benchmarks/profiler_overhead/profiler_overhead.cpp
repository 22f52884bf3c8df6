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
//                     [--steps 200] [--reps 3] [--workers 4] [--device cuda] [--traced 4]
// Prints one JSON line per epoch, then a summary line with the median epoch time per arm, the ratios of
// the medians and the per-repetition (paired) ratios with their spread.
#include <libreyolo/libreyolo.hpp>

#include "../bench_options.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

namespace ly = libreyolo;

namespace {
struct Args {
  std::string data, model = "resnet18", device = "cuda";
  int imgsz = 224, batch = 16, steps = 200, reps = 3, workers = 4, traced = 4;
};

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
  void on_epoch_start(const ly::EpochInfo&) { t0 = last = std::chrono::steady_clock::now(); }
  void after_step(const ly::StepInfo&) {
    const auto now = std::chrono::steady_clock::now();
    step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  }
  void on_epoch_end(const ly::EpochInfo&) {
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

template <class Family>
void run_arms(const Args& a, std::map<std::string, std::vector<double>>& secs, std::map<std::string, std::vector<double>>& fit_secs) {
  // A first, untimed epoch warms up cuDNN, the allocator and the page cache for every arm alike.
  run_epoch<Family, ly::profile::Off>(a, "warmup", false);
  const std::vector<std::string> arms{"off", "idle", "window", "window_all", "window_fg"};
  for (int rep = 0; rep < a.reps; ++rep) {
    // Each repetition starts one arm later, so no arm always runs first (or right after another one).
    for (size_t i = 0; i < arms.size(); ++i) {
      const std::string& arm = arms[(i + static_cast<size_t>(rep)) % arms.size()];
      const bool all = arm == "window_all";
      const Timing s = arm == "off" ? run_epoch<Family, ly::profile::Off>(a, arm, false)
                                    : run_epoch<Family, ly::profile::Window<>>(a, arm, arm != "idle", all ? 0 : a.traced,
                                                                               /*background=*/arm != "window_fg");
      secs[arm].push_back(s.epoch_s);
      fit_secs[arm].push_back(s.fit_s);
      std::cout << nlohmann::json{{"rep", rep}, {"arm", arm}, {"epoch_s", s.epoch_s}, {"fit_s", s.fit_s}, {"steps", a.steps},
                                  {"first30_s", s.first30_s}, {"rest_median_ms", s.rest_median_ms}, {"tracer", s.tracer}}
                       .dump()
                << std::endl;
    }
  }
}
}  // namespace

int main(int argc, char** argv) try {
  const auto a = parse(argc, argv);
  std::map<std::string, std::vector<double>> secs, fit_secs;
  if (a.model == "resnet18" || a.model == "resnet34") run_arms<ly::ResNetFamily>(a, secs, fit_secs);
  else if (a.model == "yolo9t" || a.model == "yolo9s") run_arms<ly::Yolo9Family>(a, secs, fit_secs);
  else throw std::invalid_argument("--model " + a.model + ": allowed resnet18, resnet34, yolo9t, yolo9s");
  const auto median = median_of;
  const double off = median(secs["off"]), idle = median(secs["idle"]), win = median(secs["window"]),
               win_all = median(secs["window_all"]), win_fg = median(secs["window_fg"]);
  // Paired ratios: each repetition's arm over that repetition's off (drift between repetitions cancels);
  // their spread is the noise this measure has on this machine (idle does no profiling work at all).
  nlohmann::json paired = nlohmann::json::object();
  for (const char* arm : {"idle", "window", "window_all", "window_fg"}) {
    std::vector<double> r;
    for (size_t k = 0; k < secs[arm].size(); ++k) r.push_back(secs[arm][k] / secs["off"][k]);
    paired[arm] = {{"median", median(r)}, {"min", *std::min_element(r.begin(), r.end())},
                   {"max", *std::max_element(r.begin(), r.end())}};
  }
  std::cout << nlohmann::json{{"summary", true},       {"model", a.model},        {"batch", a.batch},
                              {"imgsz", a.imgsz},       {"steps", a.steps},        {"reps", a.reps},
                              {"off_s", off},           {"idle_s", idle},          {"window_s", win},
                              {"window_all_s", win_all}, {"traced", a.traced},
                              {"idle_over_off", idle / off}, {"window_over_off", win / off},
                              {"window_all_over_off", win_all / off}, {"window_fg_s", win_fg},
                              {"window_fg_over_off", win_fg / off},
                              {"fit_off_s", median(fit_secs["off"])}, {"fit_window_s", median(fit_secs["window"])},
                              {"paired_over_off", paired},
                              {"torch", ly::compat::torch_version()}}
                   .dump()
            << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "profiler_overhead: " << e.what() << "\n";
  return 2;
}
