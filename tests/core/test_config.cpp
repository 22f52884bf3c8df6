#include <doctest/doctest.h>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/device.hpp>
#include <libreyolo/core/traits.hpp>

#include "support.hpp"

#include <fstream>

using libreyolo::ConfigError;
using libreyolo::TrainConfig;
using libreyolo::parse_args;

namespace {
// The message of the ConfigError that `f` throws ("" when it does not throw).
template <class Fn>
std::string error_of(Fn&& f) {
  return lry_test::message_of<ConfigError>(std::forward<Fn>(f));
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("TrainConfig defaults follow SPEC section 3") {
  TrainConfig c;
  CHECK(c.epochs == 300);
  CHECK(c.batch == 16);
  CHECK(c.imgsz == 640);
  CHECK(c.optimizer == "SGD");
  CHECK(c.lr0 == doctest::Approx(0.01));
  CHECK(c.momentum == doctest::Approx(0.937));
  CHECK(c.nesterov);
  CHECK(c.weight_decay == doctest::Approx(5e-4));
  CHECK(c.scheduler == "yoloxwarmcos");
  CHECK(c.warmup_epochs == doctest::Approx(5));
  CHECK(c.min_lr_ratio == doctest::Approx(0.05));
  CHECK(c.no_aug_epochs == 15);
  CHECK(c.ema);
  CHECK(c.ema_decay == doctest::Approx(0.9998));
  CHECK(c.ema_tau == doctest::Approx(2000));
  CHECK(c.workers == 4);
  CHECK(c.cache == "off");
  CHECK(c.clip_grad_norm == 0.0);
  CHECK_FALSE(c.amp.has_value());
  CHECK(c.amp_dtype == "float16");
  CHECK(c.cuda_graph == libreyolo::GraphMode::off);
  CHECK_FALSE(c.profile);
  CHECK(c.profile_warmup == 5);
  CHECK(c.profile_steps == 20);
  CHECK(c.run_dir() == std::filesystem::path("runs/train/exp"));
}

TEST_CASE("key=value arguments set typed values and mark keys explicit") {
  auto c = parse_args({"epochs=7", "lr0=0.02", "nesterov=false", "amp=true", "amp_dtype=bf16", "optimizer=adamw",
                       "cache=true", "device=cuda:1", "model=yolo9t"});
  CHECK(c.epochs == 7);
  CHECK(c.lr0 == doctest::Approx(0.02));
  CHECK_FALSE(c.nesterov);
  REQUIRE(c.amp.has_value());
  CHECK(*c.amp);
  CHECK(c.amp_dtype == "bfloat16");
  CHECK(c.optimizer == "AdamW");
  CHECK(c.cache == "ram");
  CHECK(c.device == "cuda:1");
  CHECK(c.model == "yolo9t");
  CHECK(c.is_explicit("epochs"));
  CHECK_FALSE(c.is_explicit("batch"));
  CHECK_FALSE(parse_args({"amp=auto"}).amp.has_value());
  CHECK(parse_args({"amp_dtype=fp16"}).amp_dtype == "float16");
}

TEST_CASE("accumulation follows nbs / batch, and is off by default (the original's nbs is unset)") {
  CHECK(parse_args({"batch=16"}).nbs == 0);
  CHECK(parse_args({"batch=16"}).accumulate() == 1);
  CHECK(parse_args({"batch=16", "nbs=64"}).accumulate() == 4);
  CHECK(parse_args({"batch=64", "nbs=64"}).accumulate() == 1);
  CHECK(parse_args({"batch=128", "nbs=64"}).accumulate() == 1);
  CHECK(parse_args({"batch=24", "nbs=64"}).accumulate() == 3);  // round(2.67)
}

TEST_CASE("each configuration error names the key, the value and what is allowed") {
  auto e = error_of([] { parse_args({"epoch=3"}); });
  CHECK(contains(e, "unknown key 'epoch'"));
  CHECK(contains(e, "epochs"));
  e = error_of([] { parse_args({"epochs=abc"}); });
  CHECK(contains(e, "epochs=abc"));
  CHECK(contains(e, "integer"));
  e = error_of([] { parse_args({"epochs=0"}); });
  CHECK(contains(e, "epochs=0"));
  CHECK(contains(e, "1 .. "));
  e = error_of([] { parse_args({"lr0=fast"}); });
  CHECK(contains(e, "lr0=fast"));
  CHECK(contains(e, "number"));
  e = error_of([] { parse_args({"nesterov=maybe"}); });
  CHECK(contains(e, "nesterov=maybe"));
  CHECK(contains(e, "true or false"));
  e = error_of([] { parse_args({"amp_dtype=int8"}); });
  CHECK(contains(e, "amp_dtype=int8"));
  CHECK(contains(e, "float16 | bfloat16 | fp16 | bf16"));
  e = error_of([] { parse_args({"scheduler=multistep"}); });
  CHECK(contains(e, "linear | cos | warmcos | yoloxwarmcos | flat_cosine | deimv2_flat_cosine | step | constant"));
  e = error_of([] { parse_args({"optimizer=adam"}); });
  CHECK(contains(e, "sgd | adamw"));
  e = error_of([] { parse_args({"cache=gpu"}); });
  CHECK(contains(e, "off | ram | disk"));
  e = error_of([] { parse_args({"batch=0"}); });
  CHECK(contains(e, "-1 or an integer >= 1"));
  e = error_of([] { parse_args({"device=gpu"}); });
  CHECK(contains(e, "device=gpu"));
  CHECK(contains(e, "cuda:N"));
  for (const char* bad : {"device=0,x", "device=0,", "device=,1"})
    CHECK(contains(error_of([&] { parse_args({bad}); }), "N,M,..."));
  CHECK(libreyolo::device_list("4,5,6") == std::vector<std::string>{"4", "5", "6"});
  CHECK(libreyolo::device_list("cuda:0") == std::vector<std::string>{"cuda:0"});
  e = error_of([] { parse_args({"epochs"}); });
  CHECK(contains(e, "expected key=value"));
  CHECK_NOTHROW(parse_args({"batch=-1", "device=0,1", "device=cpu"}));
}

TEST_CASE("a YAML config is applied first and key=value arguments override it") {
  lry_test::TempDir d;
  {
    std::ofstream f(d / "train.yaml");
    f << "# comment\nepochs: 12\nbatch: 8\nlr0: 0.005\namp: false\nname: demo\n";
  }
  auto c = parse_args({"batch=4", "cfg=" + (d / "train.yaml").string()});
  CHECK(c.epochs == 12);
  CHECK(c.batch == 4);
  CHECK(c.lr0 == doctest::Approx(0.005));
  REQUIRE(c.amp.has_value());
  CHECK_FALSE(*c.amp);
  CHECK(c.name == "demo");
  CHECK(c.is_explicit("epochs"));
}

TEST_CASE("YAML errors name the file and the line") {
  lry_test::TempDir d;
  {
    std::ofstream f(d / "bad.yaml");
    f << "epochs: 3\n\nwarmup_epochs: soon\n";
  }
  auto e = error_of([&] { parse_args({"cfg=" + (d / "bad.yaml").string()}); });
  CHECK(contains(e, "bad.yaml:3:"));
  CHECK(contains(e, "warmup_epochs=soon"));
  {
    std::ofstream f(d / "unknown.yaml");
    f << "epochs: 3\nlearning_rate: 0.1\n";
  }
  e = error_of([&] { parse_args({"cfg=" + (d / "unknown.yaml").string()}); });
  CHECK(contains(e, "unknown.yaml:2:"));
  CHECK(contains(e, "unknown key 'learning_rate'"));
  {
    std::ofstream f(d / "list.yaml");
    f << "epochs: [1, 2]\n";
  }
  e = error_of([&] { parse_args({"cfg=" + (d / "list.yaml").string()}); });
  CHECK(contains(e, "list.yaml:1:"));
  e = error_of([&] { parse_args({"cfg=" + (d / "missing.yaml").string()}); });
  CHECK(contains(e, "missing.yaml"));
  CHECK(contains(e, "not found"));
  {
    std::ofstream f(d / "broken.yaml");
    f << "epochs: 3\n  batch: [\n";
  }
  e = error_of([&] { parse_args({"cfg=" + (d / "broken.yaml").string()}); });
  CHECK(contains(e, "broken.yaml:"));
  CHECK(contains(e, "not valid YAML"));
}

TEST_CASE("family overrides apply only to keys the user left alone") {
  constexpr std::array<std::string_view, 3> ov{"scheduler=linear", "warmup_epochs=3", "ema_decay=0.9999"};
  auto c = parse_args({"warmup_epochs=1"});
  libreyolo::apply_overrides(c, ov);
  CHECK(c.scheduler == "linear");
  CHECK(c.warmup_epochs == doctest::Approx(1));
  CHECK(c.ema_decay == doctest::Approx(0.9999));
  CHECK_FALSE(c.is_explicit("scheduler"));
}

TEST_CASE("config JSON round trip keeps every key") {
  auto c = parse_args({"epochs=9", "amp=false", "name=r1", "seed=42", "device=cpu"});
  auto j = libreyolo::to_json(c);
  auto back = libreyolo::from_json(j);
  CHECK(libreyolo::to_json(back) == j);
  CHECK(back.seed == 42);
  CHECK(back.amp.has_value());
  CHECK_FALSE(back.explicit_keys.count("epochs"));
}

TEST_CASE("device resolution") {
  CHECK(libreyolo::resolve_device("cpu").is_cpu());
  if (!lry_test::have_cuda()) {
    CHECK(libreyolo::resolve_device("").is_cpu());
    CHECK_THROWS_AS(libreyolo::resolve_device("cuda"), libreyolo::SetupError);
  }
}
