// The family conformance suite: every trainer policy of every family in families/list.hpp gets these
// cases by its registration line alone (TEST_CASE_TEMPLATE over the registry).
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>

#include "kit/kit_support.hpp"
#include "support.hpp"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace ly = libreyolo;

namespace {

template <class P>
using EagerTrainer = ly::Trainer<P, ly::precision::FamilyDefault, ly::capture::Eager, ly::profile::Off>;
template <class P>
using GraphTrainer = ly::Trainer<P, ly::precision::FamilyDefault, ly::capture::CudaGraph<>, ly::profile::Off>;

std::filesystem::path fixtures_dir() { return std::filesystem::path(LIBREYOLO_SOURCE_DIR) / ".." / "shared" / "fixtures" / "libreyolo"; }

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("conformance: the policy contract holds and the traits are consistent", P, kit_contract) {
  static_assert(ly::train::FamilyPolicy<P>, "the family policy contract (train/family.hpp)");
  static_assert(ly::tasks::TaskPolicy<P>, "the task contract (tasks/task.hpp)");
  using T = ly::family_traits<P>;
  CHECK(T::task == P::task_info::task);
  CHECK(!P::sizes.empty());
  CHECK(ly::capture::resolve<P, ly::capture::CudaGraph<>>::downgraded == !ly::task_is_captured<P>());
  // Every size constructs; a registered family's model names dispatch back to it with that size.
  constexpr bool registered = decltype(boost::hana::contains(ly::registered_families, boost::hana::type_c<P>))::value;
  for (std::string_view size : P::sizes) {
    CAPTURE(size);
    P p{std::string(size)};
    if constexpr (registered) {
      const std::string name = std::string(P::name) + std::string(size);
      CHECK(ly::with_family(name, [&](auto f) { return std::is_same_v<decltype(f), P> && f.size() == p.size(); }));
    }
  }
  const auto names = P::loss_names();
  CHECK(!names.empty());
}

TEST_CASE_TEMPLATE_DEFINE("conformance: the recipe's overrides parse and never override the user", P, kit_overrides) {
  using T = ly::family_traits<P>;
  ly::TrainConfig applied;
  CHECK_NOTHROW(ly::apply_overrides(applied, T::overrides));
  const auto j = ly::to_json(applied);
  for (std::string_view o : T::overrides) {
    const std::string s(o);
    CAPTURE(s);
    const auto eq = s.find('=');
    REQUIRE(eq != std::string::npos);
    const std::string key = s.substr(0, eq);
    auto alone = ly::to_json(ly::parse_args({s}));
    CHECK(j.at(key) == alone.at(key));
    CHECK_FALSE(applied.is_explicit(key));
  }
  // A key the user set (here: to its default) keeps the user's value.
  const auto defaults = ly::to_json(ly::TrainConfig{});
  for (std::string_view o : T::overrides) {
    const std::string key(o.substr(0, o.find('=')));
    const auto& dv = defaults.at(key);
    auto user = ly::parse_args({key + "=" + (dv.is_string() ? dv.get<std::string>() : dv.dump())});
    REQUIRE(user.is_explicit(key));
    ly::apply_overrides(user, T::overrides);
    CHECK(ly::to_json(user).at(key) == dv);
  }
}

TEST_CASE_TEMPLATE_DEFINE("conformance: the LibreYOLO fixture's recipe and parameter count match", P, kit_fixture) {
  using T = ly::family_traits<P>;
  if constexpr (T::fixture_prefix.empty()) {
    MESSAGE("no LibreYOLO fixture for " << P::name);
  } else {
    int checked_sizes = 0;
    for (std::string_view size : P::sizes) {
      const auto dir = fixtures_dir() / (std::string(T::fixture_prefix) + std::string(size) + std::string(T::fixture_suffix));
      if (!std::filesystem::exists(dir / "config.json")) continue;
      CAPTURE(dir.string());
      ++checked_sizes;
      std::ifstream f(dir / "config.json");
      const auto fx = nlohmann::json::parse(f);
      const auto& d = fx.at("trainer_defaults");
      ly::TrainConfig cfg;
      ly::apply_overrides(cfg, T::overrides);
      CHECK(T::amp_default == d.value("amp", true));
      // The recipe keys the original's trainer config names (original key -> ours).
      const std::pair<const char*, const char*> keys[] = {
          {"lr0", "lr0"}, {"momentum", "momentum"}, {"weight_decay", "weight_decay"}, {"nesterov", "nesterov"},
          {"scheduler", "scheduler"}, {"warmup_epochs", "warmup_epochs"}, {"warmup_lr_start", "warmup_lr_start"},
          {"no_aug_epochs", "no_aug_epochs"}, {"min_lr_ratio", "min_lr_ratio"}, {"ema_decay", "ema_decay"},
          {"mosaic_prob", "mosaic"}, {"mixup_prob", "mixup"}, {"hsv_prob", "hsv_prob"}, {"flip_prob", "fliplr"},
          {"degrees", "degrees"}, {"translate", "translate"}, {"shear", "shear"}, {"workers", "workers"},
          {"eval_interval", "eval_interval"}, {"epochs", "epochs"}, {"batch", "batch"}, {"imgsz", "imgsz"}};
      const auto ours = ly::to_json(cfg);
      for (const auto& kv : keys) {
        const char* orig = kv.first;
        const char* key = kv.second;
        if (!d.contains(orig) || d.at(orig).is_null()) continue;
        CAPTURE(orig);
        if (d.at(orig).is_string()) CHECK(ours.at(key).get<std::string>() == d.at(orig).get<std::string>());
        else if (d.at(orig).is_boolean()) CHECK(ours.at(key).get<bool>() == d.at(orig).get<bool>());
        else CHECK(ours.at(key).get<double>() == doctest::Approx(d.at(orig).get<double>()));
      }
      if (d.contains("optimizer")) CHECK(ly::config_detail::lower(ours.at("optimizer").get<std::string>()) == d.at("optimizer").get<std::string>());
      // The architecture: the network built for the fixture's class count has the original's parameters.
      P p{std::string(size)};
      p.restore({{"names", std::vector<std::string>(static_cast<size_t>(d.value("num_classes", 80)), "c")}});
      auto net = p.make_network();
      int64_t n = 0;
      for (auto& t : net->parameters()) n += t.numel();
      CHECK(n == fx.at("n_params").get<int64_t>());
    }
    MESSAGE(P::name << ": " << checked_sizes << " fixture size(s) checked");
  }
}

TEST_CASE_TEMPLATE_DEFINE("conformance: training on the task's synthetic set gives a finite, falling loss", P, kit_learns) {
  lry_test::TempDir runs("lry_kit_runs");
  auto args = lry_test::kit_args<P>(runs.path, "learn");
  EagerTrainer<P> t(ly::parse_args(args), lry_test::kit_family<P>());
  auto r = t.fit();
  CHECK(r.optimizer_steps == 8);
  const auto l = lry_test::train_losses(r.run_dir);
  REQUIRE(l.size() == 8);
  for (double x : l) CHECK(std::isfinite(x));
  MESSAGE(P::name << " loss " << l.front() << " -> " << l.back());
  if constexpr (P::task_info::task == ly::Task::detect) {
    // Detection losses with the original's task-aligned assigner are not a learning curve over 8 steps:
    // their targets are soft scores that grow with the predicted boxes' IoU, and the box/DFL terms are
    // normalised by max(total soft score, 1), below 1 while the first boxes overlap little, so the loss
    // rises as the boxes improve. Here the weights must move; each detector's falling loss is its own
    // longer overfit test (tests/yolo9/test_assign_loss.cpp: one image, loss 14.7 -> 2.0).
    CHECK(l.back() != l.front());
  } else {
    CHECK((l[5] + l[6] + l[7]) / 3 < (l[0] + l[1]) / 2);
  }
}

TEST_CASE_TEMPLATE_DEFINE("conformance: a checkpoint round-trips bit-exact", P, kit_checkpoint) {
  lry_test::TempDir runs("lry_kit_runs");
  auto args = lry_test::kit_args<P>(runs.path, "ck");
  args.push_back("max_steps=2");
  auto r = EagerTrainer<P>(ly::parse_args(args), lry_test::kit_family<P>()).fit();
  const auto last = r.run_dir / "weights" / "last.ckpt";
  const auto first = runs.path / "first.ckpt";
  std::filesystem::copy_file(last, first);
  auto resume = args;
  resume.push_back("resume=true");
  EagerTrainer<P> t(ly::parse_args(resume), lry_test::kit_family<P>());
  t.setup();             // restores everything from last.ckpt
  t.save_checkpoint();  // and writes it again
  const auto a = ly::train::load_checkpoint(first), b = ly::train::load_checkpoint(last);
  REQUIRE(a.tensors.size() == b.tensors.size());
  REQUIRE(a.tensors.size() > 4);
  for (auto& [k, v] : a.tensors) {
    CAPTURE(k);
    REQUIRE(b.tensors.count(k));
    CHECK(v.dtype() == b.tensors.at(k).dtype());
    CHECK(torch::equal(v, b.tensors.at(k)));
  }
  CHECK(a.meta.at("state") == b.meta.at("state"));
  CHECK(a.meta.at("family") == b.meta.at("family"));
  CHECK(a.meta.at("family_name") == std::string(P::name));
}

TEST_CASE_TEMPLATE_DEFINE("conformance: cache=ram and cache=disk give the batches of cache=off", P, kit_cache) {
  auto batch_of = [](const std::string& cache) {
    auto cfg = ly::parse_args({"data=" + lry_test::kit_data<P>().string(), "imgsz=64", "cache=" + cache, "seed=1"});
    auto p = lry_test::kit_family<P>();
    p.setup(cfg);
    const auto ds = p.train_set();
    std::vector<torch::Tensor> out;
    for (int pass = 0; pass < 2; ++pass) {  // the second pass reads what the first one cached
      std::mt19937_64 rng(9);
      std::vector<typename P::Dataset::Sample> samples;
      for (size_t i = 0; i < 4; ++i) samples.push_back(ds->get(i, rng, 0));
      out.push_back(P::input(P::Dataset::collate(std::move(samples))));
    }
    return out;
  };
  const auto off = batch_of("off");
  REQUIRE(off.size() == 2);
  for (const char* mode : {"ram", "disk"}) {
    CAPTURE(mode);
    const auto got = batch_of(mode);
    CHECK(torch::equal(got[0], off[0]));
    CHECK(torch::equal(got[1], off[1]));
  }
}

TEST_CASE_TEMPLATE_APPLY(kit_contract, lry_test::kit_policies);
TEST_CASE_TEMPLATE_APPLY(kit_overrides, lry_test::kit_policies);
TEST_CASE_TEMPLATE_APPLY(kit_fixture, lry_test::kit_policies);
TEST_CASE_TEMPLATE_APPLY(kit_learns, lry_test::kit_policies);
TEST_CASE_TEMPLATE_APPLY(kit_checkpoint, lry_test::kit_policies);
TEST_CASE_TEMPLATE_APPLY(kit_cache, lry_test::kit_policies);

// On a GPU: 10 training steps through the real trainer with cuda_graph=true equal the eager ones bit for
// bit under the family's AMP default (or stay within the eager runs' own spread, or the family's declared
// graph_eager_spread, where eager is not reproducible).
TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE_DEFINE("conformance: a 10-step graph run equals eager under AMP", P, kit_graph) {
    LRY_REQUIRE_CUDA();
    if constexpr (!ly::task_is_captured<P>()) {
      MESSAGE(P::name << ": not captured for this task; nothing to compare");
    } else {
      lry_test::TempDir runs("lry_kit_gpu");
      auto run = [&](const std::string& name, bool graph) {
        auto args = lry_test::kit_args<P>(runs.path, name);
        for (auto& a : args)
          if (a == "device=cpu") a = "device=cuda";
          else if (a == "batch=24") a = "batch=4";  // 6 steps per epoch: capture on the third, 7 replays
        args.insert(args.end(), {"max_steps=10", "epochs=2", "cuda_graph=" + std::string(graph ? "true" : "false")});
        std::vector<torch::Tensor> losses;
        struct Losses {  // the epoch's running loss sums after each step: equal sums <=> equal steps
          std::vector<torch::Tensor>* out;
          void operator()(ly::event::step_end, const ly::StepInfo& s) { out->push_back(s.loss_items.detach().cpu().clone()); }
        } cb{&losses};
        nlohmann::json report;
        std::vector<torch::Tensor> params;
        if (graph) {
          GraphTrainer<P> t(ly::parse_args(args), lry_test::kit_family<P>());
          t.fit(cb);
          report = t.capture().report();
          for (auto& p : t.network()->parameters()) params.push_back(p.detach().cpu());
          for (auto& b : t.network()->buffers()) params.push_back(b.detach().cpu());
        } else {
          EagerTrainer<P> t(ly::parse_args(args), lry_test::kit_family<P>());
          t.fit(cb);
          for (auto& p : t.network()->parameters()) params.push_back(p.detach().cpu());
          for (auto& b : t.network()->buffers()) params.push_back(b.detach().cpu());
        }
        return std::make_tuple(torch::stack(losses), params, report);
      };
      const auto run1 = run("eager1", false), run2 = run("eager2", false), rung = run("graph", true);
      const torch::Tensor& e1 = std::get<0>(run1);
      const torch::Tensor& e2 = std::get<0>(run2);
      const torch::Tensor& g = std::get<0>(rung);
      const std::vector<torch::Tensor>& pe1 = std::get<1>(run1);
      const std::vector<torch::Tensor>& pe2 = std::get<1>(run2);
      const std::vector<torch::Tensor>& pg = std::get<1>(rung);
      const nlohmann::json& rg = std::get<2>(rung);
      CHECK(rg["captures"] == 1);
      CHECK(rg["replayed_steps"].get<int64_t>() >= 7);
      bool reproducible = e1.equal(e2);
      for (size_t i = 0; reproducible && i < pe1.size(); ++i) reproducible = pe1[i].equal(pe2[i]);
      // A family with randomness inside its captured region (graph_eager_spread > 0: drop-path, dropout)
      // replays the graph's own random stream: statistically equivalent, never bit-equal.
      if (reproducible && ly::family_traits<P>::graph_eager_spread == 0) {
        CHECK(g.equal(e1));
        REQUIRE(pg.size() == pe1.size());
        for (size_t i = 0; i < pg.size(); ++i) CHECK(pg[i].equal(pe1[i]));
      } else {
        const double spread = std::max((e1 - e2).abs().max().item<double>(), ly::family_traits<P>::graph_eager_spread);
        MESSAGE(P::name << ": " << (reproducible ? "randomness inside the graph" : "eager is not bit-reproducible")
                        << " (spread " << spread << "); comparing within it");
        CHECK((g - e1).abs().max().item<double>() <= 2 * spread + 1e-6);
      }
    }
  }
  TEST_CASE_TEMPLATE_APPLY(kit_graph, lry_test::kit_policies);
}
