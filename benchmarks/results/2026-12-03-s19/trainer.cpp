// A program that composes its trainer at compile time: the umbrella and one family.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/families/resnet/family.hpp>
int main() {
  libreyolo::EagerTrainer<libreyolo::ResNetFamily, libreyolo::precision::Fp32> t(libreyolo::parse_args({"epochs=1"}));
  return t.fit().epochs_done == 1 ? 0 : 1;
}
