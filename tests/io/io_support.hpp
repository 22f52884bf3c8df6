#pragma once
// Shared by the io tests: a python3 that can import torch, for checks against Python's torch.load.
#include <cstdlib>
#include <string>

namespace lry_test {

// "python3" or Debian's /usr/bin/python3 (the PATH one may be a pyenv Python without torch); "" = none.
inline std::string python_with_torch() {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(py) + " -c \"import torch\" > /dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

}  // namespace lry_test
