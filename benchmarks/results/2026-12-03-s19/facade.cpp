// A program that picks the model at run time: Model::train through the facade.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>
int main(int argc, char** argv) {
  auto cfg = libreyolo::parse_args({"epochs=1"});
  return libreyolo::Model(argc > 1 ? argv[1] : "resnet18").train(cfg).epochs_done == 1 ? 0 : 1;
}
