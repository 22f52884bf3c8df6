// The command-line program end to end (issue 26): the built `libreyolo` runs train, val, predict (every
// task that exists), export, checks, data synth and profile (run with --repeat 2, the exit code 3 without
// a profile, also in a reused directory, and every profile subcommand with and without --json) on tiny
// generated data; exit codes and key lines are asserted. Build the libreyolo_cli target first.
#include "cli_support.hpp"

#include <libreyolo/core/compat.hpp>
#include <libreyolo/plot/canvas.hpp>

using namespace lry_cli;

TEST_CASE("cli: checks prints one screen of versions, and --json the same as a document") {
  REQUIRE(fs::exists(cli_path()));
  auto r = run({"checks"});
  REQUIRE_MESSAGE(r.code == 0, r.all());
  for (const char* line : {"libreyolo ", "LibTorch ", "CUDA ", "cuDNN ", "NCCL ", "GPU", "Kineto ", "plots (cairo) ", "models "})
    CHECK_MESSAGE(has(r.out, line), line);
  CHECK(has(r.out, libreyolo::compat::torch_version()));
  CHECK(has(r.out, "yolo9t"));
  auto j = run({"checks", "--json"});
  REQUIRE(j.code == 0);
  const auto d = parse_json(j.out);
  CHECK(d["libtorch"] == libreyolo::compat::torch_version());
  CHECK(d["cuda_build"] == libreyolo::compat::with_cuda);
  CHECK(d["cairo_plots"] == libreyolo::plot::available);
  CHECK(d["gpus"].is_array());
  if (!libreyolo::compat::with_cuda) {
    CHECK(has(r.out, "not in this build"));
    CHECK(d["cudnn"].is_null());
  }
}

TEST_CASE("cli: data synth writes each task's set; bad options exit 2") {
  auto& w = Work::get();
  CHECK(fs::exists(w.detect_data()));
  CHECK(files_in(w.detect_data().parent_path() / "images" / "train", ".jpg") + files_in(w.detect_data().parent_path() / "images" / "val", ".jpg") == 24);
  CHECK(fs::exists(w.classify_data() / "train"));
  auto bad = run({"data", "synth", "--task", "nonsense", "--out", (w / "x").string()});
  CHECK(bad.code == 2);
  // Plain progress lines (not a terminal): at most every --progress-interval seconds, and one at the end.
  auto r = run({"data", "synth", "--task", "classify", "--out", (w / "cls_progress").string(), "--images", "30", "--imgsz",
                "32", "--classes", "3", "--progress-interval", "0.000001"},
               {"LIBREYOLO_PROGRESS=plain"});
  REQUIRE(r.code == 0);
  CHECK(has(r.err, "synth  30/30 (100%)"));
  CHECK(count_of(r.err, "synth  ") >= 2);
  auto quiet = run({"data", "synth", "--task", "classify", "--out", (w / "cls_quiet").string(), "--images", "30", "--imgsz",
                    "32", "--classes", "3", "--progress-interval", "0"},
                   {"LIBREYOLO_PROGRESS=plain"});
  REQUIRE(quiet.code == 0);
  CHECK_FALSE(has(quiet.err, "synth  "));
  CHECK(has(quiet.out, "wrote 30 images"));
}

TEST_CASE("cli: train (detection) writes its run directory, pictures and progress lines") {
  auto& w = Work::get();
  const auto run_dir = w.detect_run();
  for (const char* f : {"results.csv", "results.json", "args.json", "weights/last.ckpt", "weights/best.ckpt"})
    CHECK_MESSAGE(fs::exists(run_dir / f), f);
  const bool pics = libreyolo::plot::available;
  for (const char* f : {"results.png", "labels.png", "confusion_matrix.png", "PR_curve.png", "val_batch0_labels.jpg",
                        "val_batch0_pred.jpg"})
    CHECK_MESSAGE(fs::exists(run_dir / f) == pics, f);
  // Plain progress: a line per batch with progress_interval tiny, none with 0; the epoch line after.
  auto r = run(Work::tiny_train({"model=yolo9t", "data=" + w.detect_data().string(), "epochs=1", "imgsz=64", "batch=4",
                                 "progress_interval=0.000001", "plots=false", "project=" + (w / "runs").string(),
                                 "name=det_progress"}),
               {"LIBREYOLO_PROGRESS=plain"});
  REQUIRE_MESSAGE(r.code == 0, r.all());
  CHECK(has(r.err, "epoch 1/1  1/"));
  CHECK(has(r.err, " it/s  ETA "));
  CHECK(has(r.err, "box "));  // the running mean of each loss part
  CHECK(has(r.err, "val  "));
  CHECK(has(r.err, "epoch 1/1  "));
  CHECK(has(r.out, "run: "));
  CHECK_FALSE(fs::exists(w / "runs" / "det_progress" / "results.png"));  // plots=false
  auto q = run(Work::tiny_train({"model=yolo9t", "data=" + w.detect_data().string(), "epochs=1", "imgsz=64", "batch=4",
                                 "progress_interval=0", "val=false", "project=" + (w / "runs").string(), "name=det_quiet"}),
               {"LIBREYOLO_PROGRESS=plain"});
  REQUIRE(q.code == 0);
  CHECK_FALSE(has(q.err, "epoch 1/1  1/"));  // no progress line (the epoch's summary line stays)
  CHECK(has(q.err, "epoch 1/1  "));
}

TEST_CASE("cli: the run header states cuda_graph only when capture can still happen") {
  auto& w = Work::get();
  auto r = run(Work::tiny_train({"model=resnet18", "data=" + w.classify_data().string(), "epochs=1", "imgsz=32", "batch=8",
                                 "cuda_graph=true", "max_steps=1", "val=false", "project=" + (w / "runs").string(),
                                 "name=graph_cpu"}));
  REQUIRE_MESSAGE(r.code == 0, r.all());
  CHECK(has(r.err, "falling back to eager"));
  const auto header = r.err.substr(r.err.find("libreyolo train: "));
  CHECK(has(header, "precision fp32"));
  CHECK_FALSE(has(header.substr(0, header.find('\n')), "cuda_graph"));
}

TEST_CASE("cli: val and export of the trained detector") {
  auto& w = Work::get();
  const auto best = w.detect_run() / "weights" / "best.ckpt";
  auto v = run({"val", "model=" + best.string(), "device=cpu", "workers=0"});
  REQUIRE_MESSAGE(v.code == 0, v.all());
  CHECK(has(v.out, "mAP50 "));
  CHECK(has(v.out, "\"mAP50-95\""));
  auto e = run({"export", "model=" + best.string(), "out=" + (w / "best.pt").string()});
  REQUIRE_MESSAGE(e.code == 0, e.all());
  CHECK(has(e.out, "exported "));
  CHECK(fs::file_size(w / "best.pt") > 100000);
  CHECK(run({"export", "model=" + best.string(), "format=onnx"}).code == 2);
  CHECK(run({"val", "model=" + (w / "missing.ckpt").string()}).code == 5);
}

TEST_CASE("cli: predict (detection): a folder, a file and a glob; annotated images, save_txt, predictions.json") {
  auto& w = Work::get();
  const auto best = w.detect_run() / "weights" / "best.ckpt";
  const auto val_dir = w.detect_data().parent_path() / "images" / "val";
  const size_t n = files_in(val_dir, ".jpg");
  REQUIRE(n > 0);
  auto r = run({"predict", "model=" + best.string(), "source=" + val_dir.string(), "conf=0.01", "save_txt=true", "device=cpu",
                "project=" + (w / "pred").string(), "name=folder"});
  REQUIRE_MESSAGE(r.code == 0, r.all());
  const auto out = w / "pred" / "folder";
  CHECK(has(r.out, std::to_string(n) + " image(s), "));
  CHECK(has(r.out, "annotated: " + out.string()));
  CHECK(has(r.out, "labels: "));
  const auto j = parse_json(slurp(out / "predictions.json"));
  REQUIRE(j.size() == n);
  CHECK(j[0].contains("boxes"));
  CHECK(files_in(out, ".jpg") == n);
  CHECK(files_in(out / "labels", ".txt") == n);
  // save_txt: `class cx cy w h conf` in [0, 1], one line per box of predictions.json
  const auto stem = fs::path(j[0]["file"].get<std::string>()).stem().string();
  std::ifstream txt(out / "labels" / (stem + ".txt"));
  size_t lines = 0;
  for (std::string line; std::getline(txt, line); ++lines) {
    std::istringstream is(line);
    int cls = -1;
    double v[5];
    is >> cls >> v[0] >> v[1] >> v[2] >> v[3] >> v[4];
    CHECK(!is.fail());
    CHECK(cls >= 0);
    for (double x : v) CHECK((x >= 0 && x <= 1));
  }
  CHECK(lines == j[0]["boxes"].size());
  auto file = run({"predict", "model=" + best.string(), "source=" + j[0]["file"].get<std::string>(), "device=cpu",
                   "project=" + (w / "pred").string(), "name=file"});
  REQUIRE(file.code == 0);
  CHECK(has(file.out, "1 image(s)"));
  auto glob = run({"predict", "model=" + best.string(), "source=" + (val_dir / "*.jpg").string(), "device=cpu",
                   "project=" + (w / "pred").string(), "name=glob"});
  REQUIRE_MESSAGE(glob.code == 0, glob.all());
  CHECK(has(glob.out, std::to_string(n) + " image(s)"));
  auto none = run({"predict", "model=" + best.string(), "source=" + (val_dir / "*.nothing").string(), "device=cpu",
                   "project=" + (w / "pred").string(), "name=none"});
  CHECK(none.code == 4);
  CHECK(has(none.err, "matches no"));
  // iou= and max_det= (the original's predict keys): max_det caps each image's boxes, a looser NMS keeps at
  // least as many; bad values are refused naming the key, the value and what is allowed.
  auto pred = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a{"predict", "model=" + best.string(), "source=" + val_dir.string(), "conf=0", "device=cpu",
                               "project=" + (w / "pred").string(), "name=" + name};
    a.insert(a.end(), extra.begin(), extra.end());
    auto r = run(a);
    REQUIRE_MESSAGE(r.code == 0, r.all());
    const auto js = parse_json(slurp(w / "pred" / name / "predictions.json"));
    REQUIRE(js.size() == n);
    return js;
  };
  // conf 0: every anchor. This barely trained model's boxes mostly cover the whole image, so they clamp to the
  // same box: NMS at 0.45 (the default) keeps one per class, at iou=1 (nothing is suppressed) up to max_det.
  const auto tight = pred("tight", {}), loose = pred("loose", {"iou=1"}), capped = pred("capped", {"iou=1", "max_det=2"});
  size_t most = 0, total_tight = 0, total_loose = 0;
  for (size_t i = 0; i < n; ++i) {
    most = std::max(most, capped[i]["boxes"].size());
    total_tight += tight[i]["boxes"].size(), total_loose += loose[i]["boxes"].size();
    CHECK(capped[i]["boxes"].size() == std::min<size_t>(2, loose[i]["boxes"].size()));
    CHECK(tight[i]["boxes"].size() <= loose[i]["boxes"].size());
  }
  MESSAGE("boxes at conf 0: iou 0.45 " << total_tight << ", iou 1 " << total_loose << " over " << n << " images");
  REQUIRE(total_loose > 2 * n);  // so that the checks below compare something
  CHECK(most == 2);
  CHECK(total_loose > total_tight);  // NMS at 1 keeps boxes that 0.45 (the default) drops
  for (const auto& [arg, says] : std::vector<std::pair<std::string, std::string>>{
           {"iou=0", "iou=0: invalid value; allowed: 0 < iou <= 1"}, {"iou=x", "iou=x: invalid value"},
           {"max_det=0", "max_det=0: invalid value; allowed: an integer >= 1"}, {"max_det=2.5", "max_det=2.5: invalid value"},
           {"conf=1.5", "conf=1.5: invalid value; allowed: 0 .. 1"}}) {
    auto bad = run({"predict", "model=" + best.string(), "source=" + val_dir.string(), arg, "device=cpu",
                    "project=" + (w / "pred").string(), "name=bad"});
    CHECK_MESSAGE(bad.code == 2, arg);
    CHECK_MESSAGE(has(bad.err, says), bad.err);
  }
}

TEST_CASE("cli: classification train, val and predict") {
  auto& w = Work::get();
  const auto run_dir = w.classify_run();
  CHECK(fs::exists(run_dir / "weights" / "best.ckpt"));
  const bool pics = libreyolo::plot::available;
  for (const char* f : {"results.png", "labels.png", "confusion_matrix.png", "val_batch0_labels.jpg", "val_batch0_pred.jpg"})
    CHECK_MESSAGE(fs::exists(run_dir / f) == pics, f);
  const auto best = run_dir / "weights" / "best.ckpt";
  auto v = run({"val", "model=" + best.string(), "device=cpu", "workers=0"});
  REQUIRE_MESSAGE(v.code == 0, v.all());
  CHECK(has(v.out, "top1 "));
  auto p = run({"predict", "model=" + best.string(), "source=" + (w.classify_data() / "val").string(), "save_txt=true",
                "device=cpu", "project=" + (w / "pred").string(), "name=cls"});
  REQUIRE_MESSAGE(p.code == 0, p.all());
  const auto j = parse_json(slurp(w / "pred" / "cls" / "predictions.json"));
  REQUIRE(!j.empty());
  CHECK(j[0]["classes"].size() == 3);  // top-5 of 3 classes
  CHECK(files_in(w / "pred" / "cls" / "labels", ".txt") == j.size());
  CHECK(files_in(w / "pred" / "cls", ".jpg") == j.size());
}

TEST_CASE("cli: profile run --repeat 2, exit code 3 without a profile (also in a reused directory), every lens") {
  auto& w = Work::get();
  const auto project = w / "prof";
  const std::vector<std::string> base{"profile", "run", w.detect_data().string(), "--weights", "yolo9t", "--batch", "4",
                                      "--imgsz", "64", "--device", "cpu", "--project", project.string(), "workers=0",
                                      "profile_warmup=1", "profile_steps=2", "plots=false"};
  auto with_project = [](std::vector<std::string> a, const fs::path& p) {
    for (size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == "--project") a[i + 1] = p.string();
    return a;
  };
  auto rep = base;
  rep.insert(rep.end(), {"--repeat", "2"});
  auto r = run(rep);
  REQUIRE_MESSAGE(r.code == 0, r.all());
  CHECK(fs::exists(project / "prof_1" / "profile.json"));
  CHECK(fs::exists(project / "prof_2" / "profile.json"));
  CHECK(fs::exists(project / "profile_repeat.json"));
  CHECK(has(r.out, "repeat: 2 trials"));
  CHECK(count_of(r.out, ">> BOUND: ") == 2);
  const auto p1 = (project / "prof_1" / "profile.json").string();
  const auto p2 = (project / "prof_2" / "profile.json").string();
  const auto rj = (project / "profile_repeat.json").string();

  // One trial, then the same reused directory with a run that ends before the window fills: its stale
  // profile.json (from the first run) must not count.
  auto one = run(base);
  REQUIRE_MESSAGE(one.code == 0, one.all());
  REQUIRE(fs::exists(project / "prof" / "profile.json"));
  auto short_run = base;
  short_run.push_back("max_steps=1");
  auto stale = run(short_run);
  CHECK_MESSAGE(stale.code == 3, stale.all());
  CHECK(has(stale.err, "produced no profile"));
  CHECK_FALSE(fs::exists(project / "prof" / "profile.json"));
  CHECK(run(with_project(short_run, w / "prof_fresh")).code == 3);  // a new directory
  // Training keys pass through to the run: cuda_graph=true on a CPU falls back to eager, and the profile
  // records what was active.
  auto graphs = with_project(base, w / "prof_graph");
  graphs.push_back("cuda_graph=true");
  auto g = run(graphs);
  REQUIRE_MESSAGE(g.code == 0, g.all());
  CHECK(has(g.err, "falling back to eager"));
  const auto gp = parse_json(slurp(w / "prof_graph" / "prof" / "profile.json"));
  CHECK(gp["config"]["cuda_graph"] == libreyolo::compat::cuda_available());
  // --json on profile run: the profiles and their summaries as one document
  auto rjson = base;
  rjson.push_back("--json");
  auto jr = run(rjson);
  REQUIRE_MESSAGE(jr.code == 0, jr.all());
  const auto jd = parse_json(jr.out);
  CHECK(jd["profiles"].size() == 1);
  CHECK(jd["summaries"][0].contains("bound"));

  struct Lens {
    std::vector<std::string> args;
    const char* text_key;
    const char* json_key;
  };
  const std::vector<Lens> lenses{{{"summary", p1}, ">> BOUND: ", "bound"},
                                 {{"phases", p1}, "phase ", "phases"},
                                 {{"kernels", p1}, "kernels match", "kernels"},
                                 {{"ops", p1}, "operator", "ops"},
                                 {{"what-if", p1}, "ESTIMATES", "levers"},
                                 {{"compare", p1, p2}, "significance", "metrics"},
                                 {{"compare", rj, rj}, "significance", "metrics"}};
  for (const auto& l : lenses) {
    std::vector<std::string> a{"profile"};
    a.insert(a.end(), l.args.begin(), l.args.end());
    auto t = run(a);
    CHECK_MESSAGE(t.code == 0, l.args[0], ": ", t.all());
    CHECK_MESSAGE(has(t.out, l.text_key), l.args[0], ": ", t.out);
    a.push_back("--json");
    auto j = run(a);
    CHECK_MESSAGE(j.code == 0, l.args[0], " --json: ", j.all());
    const auto d = parse_json(j.out);
    CHECK_MESSAGE(d.contains(l.json_key), l.args[0], " --json");
  }
  auto wi = parse_json(run({"profile", "what-if", p1, "--json"}).out);
  CHECK(wi["estimate"] == true);
  CHECK(wi["levers"].size() == 5);  // cuda_graph, amp, workers, channels_last, cudnn
  // A file that is not a profile: exit 2, for every lens
  std::ofstream(w / "junk.json") << "{\"schema\": \"other\"}";
  for (const char* sub : {"summary", "phases", "kernels", "ops", "convs", "what-if"}) {
    CHECK(run({"profile", sub, (w / "junk.json").string()}).code == 2);
    CHECK(run({"profile", sub, (w / "junk.json").string(), "--json"}).code == 2);
  }
  CHECK(run({"profile", "ops", p1, "--phase", "nowhere"}).code == 2);
  // profile get: one bare value; a bad name exits 2 listing the allowed ones
  const auto pj = parse_json(slurp(p1));
  auto step = run({"profile", "get", p1, "step_ms"});
  REQUIRE_MESSAGE(step.code == 0, step.all());
  CHECK(std::stod(step.out) == doctest::Approx(pj["step_ms"].get<double>()).epsilon(1e-12));
  CHECK(run({"profile", "get", p1, "verdict"}).out == pj["bound"].get<std::string>() + "\n");
  CHECK(run({"profile", "get", p1, "util"}).out == "null\n");  // a CPU run: no kernel trace, no utilisation
  CHECK(parse_json(run({"profile", "get", p1, "dataload_pct", "--json"}).out)["dataload_pct"].get<double>() ==
        doctest::Approx(100 * pj["dataload_frac"].get<double>()));
  auto bad = run({"profile", "get", p1, "speed"});
  CHECK(bad.code == 2);
  CHECK(has(bad.err, "unknown metric 'speed'; allowed: step_ms, "));
  // what-if removals need a kernel trace (a CUDA run); a bad category lists the allowed ones
  auto cv = run({"profile", "convs", p1});  // the convolutions by algorithm: from the kernel trace
  CHECK(cv.code == 2);
  CHECK(has(cv.err, "needs a kernel trace"));
  auto rm = run({"profile", "what-if", p1, "--remove-launches"});
  CHECK(rm.code == 2);
  CHECK(has(rm.err, "needs a kernel trace"));
  auto rc = run({"profile", "what-if", p1, "--remove-category", "gemm"});
  CHECK(rc.code == 2);
  CHECK(has(rc.err, "allowed: gemm/conv, elementwise, reduction/norm, layout/copy, other"));
}

TEST_CASE("cli: profile infer on CPU: stage percentiles in order, throughput, eager only with one line for --cuda-graph") {
  auto& w = Work::get();
  const auto best = (w.detect_run() / "weights" / "best.ckpt").string();
  auto r = run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--batch", "2", "--repeat", "9", "--warmup", "1",
                "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.all());
  const auto d = parse_json(r.out);
  CHECK(d["schema"] == "libreyolo.profile.infer/v1");
  CHECK(d["model"] == "yolo9t");
  CHECK(d["task"] == "detect");
  CHECK(d["batch"] == 2);
  CHECK(d["imgsz"] == 64);
  CHECK(d["device"] == "cpu");
  CHECK(d["host_timings_only"] == true);
  CHECK(d["trace_collected"] == false);
  CHECK_FALSE(has(r.out, "gpu_util"));  // no GPU figure without a GPU trace
  CHECK(d["cuda_graph"]["requested"] == false);
  REQUIRE(d["modes"].size() == 1);
  const auto& m = d["modes"][0];
  CHECK(m["mode"] == "eager");
  auto ordered = [](const nlohmann::json& s) {
    CHECK(s["n"] == 9);
    CHECK(s["min_ms"].get<double>() >= 0);
    CHECK(s["min_ms"].get<double>() <= s["p50_ms"].get<double>());
    CHECK(s["p50_ms"].get<double>() <= s["p90_ms"].get<double>());
    CHECK(s["p90_ms"].get<double>() <= s["p99_ms"].get<double>());
    CHECK(s["p99_ms"].get<double>() <= s["max_ms"].get<double>());
    CHECK(s["mean_ms"].get<double>() >= s["min_ms"].get<double>());
    CHECK(s["mean_ms"].get<double>() <= s["max_ms"].get<double>());
  };
  for (const char* stage : {"preprocess", "forward", "postprocess"}) {
    CAPTURE(stage);
    ordered(m["stages_ms"][stage]);
  }
  ordered(m["latency_ms"]);
  CHECK(m["latency_ms"]["mean_ms"].get<double>() > 0);
  // the latency is the sum of the stages, so its mean is the sum of their means
  CHECK(m["latency_ms"]["mean_ms"].get<double>() ==
        doctest::Approx(m["stages_ms"]["preprocess"]["mean_ms"].get<double>() + m["stages_ms"]["forward"]["mean_ms"].get<double>() +
                        m["stages_ms"]["postprocess"]["mean_ms"].get<double>()));
  CHECK(m["img_per_s"].get<double>() == doctest::Approx(2 * 1000.0 / m["latency_ms"]["mean_ms"].get<double>()));

  // --cuda-graph on a CPU: one line says graphs need CUDA; eager only
  auto g = run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "3", "--warmup", "0", "--cuda-graph"});
  REQUIRE_MESSAGE(g.code == 0, g.all());
  CHECK(count_of(g.all(), "graphs need CUDA") == 1);
  CHECK(count_of(g.out, "eager       latency") == 1);
  CHECK_FALSE(has(g.out, "cuda_graph  "));
  CHECK(has(g.out, "host timings only"));
  auto gj = parse_json(run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "3", "--cuda-graph", "--json"}).out);
  CHECK(gj["cuda_graph"]["requested"] == true);
  CHECK(gj["cuda_graph"]["measured"] == false);
  CHECK(gj["modes"].size() == 1);
  // a bare model name: random weights, said so
  auto bare = parse_json(run({"profile", "infer", "yolo9t", "--device", "cpu", "--imgsz", "64", "--repeat", "2", "--json"}).out);
  CHECK(bare["weights"] == false);
  CHECK(bare["half"] == false);
  CHECK(run({"profile", "infer", best, "--batch", "0"}).code == 2);
  // channels-last weights and inputs run on the CPU too, and the document says so
  auto nhwc = parse_json(run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "2", "--channels-last",
                              "--json"}).out);
  CHECK(nhwc["channels_last"] == true);
  CHECK(nhwc["modes"].size() == 1);
  // --half needs CUDA: a usage error that says so, not a silently fp32 run
  auto h = run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "2", "--half"});
  CHECK(h.code == 2);
  CHECK_MESSAGE(h.all().find("--half needs a CUDA device") != std::string::npos, h.all());
  // --trace and --cudnn-benchmark need CUDA too (a CPU build has no kernel tracer): usage errors, not silent no-ops
  auto tr = run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "2", "--trace", "3"});
  CHECK(tr.code == 2);
  CHECK_MESSAGE(tr.all().find("--trace needs a CUDA") != std::string::npos, tr.all());
  auto cb = run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "2", "--cudnn-benchmark"});
  CHECK(cb.code == 2);
  CHECK_MESSAGE(cb.all().find("--cudnn-benchmark needs a CUDA device") != std::string::npos, cb.all());
  CHECK(run({"profile", "infer", best, "--trace", "-1"}).code == 2);
  // --trace 0 (the default) is no trace: the timings alone
  auto t0 = parse_json(run({"profile", "infer", best, "--device", "cpu", "--imgsz", "64", "--repeat", "2", "--trace", "0", "--json"}).out);
  CHECK(t0["trace_collected"] == false);
  CHECK_FALSE(t0["modes"][0].contains("kernels"));
}

TEST_CASE("cli: predict and val cuda_graph=true on CPU: one fallback line, the eager output") {
  auto& w = Work::get();
  const auto best = (w.detect_run() / "weights" / "best.ckpt").string();
  const auto val_dir = (w.detect_data().parent_path() / "images" / "val").string();
  const std::vector<std::string> base{"predict", "model=" + best, "source=" + val_dir, "conf=0.01", "device=cpu",
                                      "project=" + (w / "pred_graph").string()};
  auto eager_args = base, graph_args = base;
  eager_args.push_back("name=eager");
  graph_args.insert(graph_args.end(), {"name=graph", "cuda_graph=true"});
  auto e = run(eager_args);
  REQUIRE_MESSAGE(e.code == 0, e.all());
  auto g = run(graph_args);
  REQUIRE_MESSAGE(g.code == 0, g.all());
  CHECK(count_of(g.all(), "cuda_graph needs CUDA; running eager") == 1);
  CHECK(count_of(e.all(), "cuda_graph") == 0);
  const auto je = parse_json(slurp(w / "pred_graph" / "eager" / "predictions.json"));
  const auto jg = parse_json(slurp(w / "pred_graph" / "graph" / "predictions.json"));
  REQUIRE(je.size() > 1);
  CHECK(je == jg);
  auto ve = run({"val", "model=" + best, "device=cpu", "workers=0"});
  auto vg = run({"val", "model=" + best, "device=cpu", "workers=0", "cuda_graph=true"});
  REQUIRE_MESSAGE(vg.code == 0, vg.all());
  CHECK(count_of(vg.all(), "cuda_graph needs CUDA; running eager") == 1);
  CHECK(ve.out == vg.out);
}
