// Calls the run-time facade exactly as a user who picks the model at run time would, through the installed
// compiled components (CMakeLists.txt): a synthetic classification set, `Model("resnet18").train(cfg)` for
// one epoch on the CPU; prints one line the test reads.
#include <libreyolo/data/synth.hpp>
#include <libreyolo/model.hpp>

#ifndef LIBREYOLO_COMPILED_FAMILIES
#error "linked with libreyolo::families, LIBREYOLO_COMPILED_FAMILIES is defined (the facade's trainers are extern)"
#endif

#include <filesystem>
#include <iostream>

int main(int argc, char** argv) {
  namespace ly = libreyolo;
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::cerr << "usage: facade_consumer WORK_DIR\n";
    return 2;
  }
  const fs::path work = argv[1];
  ly::data::SynthOptions so;
  so.task = "classify";
  so.out = work / "data";
  so.images = 40;
  so.imgsz = 32;
  so.classes = 4;
  ly::data::synth(so);
  auto cfg = ly::parse_args({"data=" + so.out.string(), "epochs=1", "imgsz=32", "batch=8", "device=cpu",
                             "workers=0", "plots=false", "project=" + (work / "runs").string(), "name=exp"});
  const ly::Model model("resnet18");
  const auto r = model.train(cfg);
  const auto best = r.run_dir / "weights" / "best.ckpt";
  std::cout << "facade ok model=" << model.name() << " epochs=" << r.epochs_done
            << " best=" << (fs::exists(best) ? "written" : "missing") << "\n";
  return r.epochs_done == 1 && fs::exists(best) ? 0 : 1;
}
