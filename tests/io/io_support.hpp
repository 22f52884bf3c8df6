#pragma once
// Shared by the io tests: a python3 that can import torch, for checks against Python's torch.load
// (lry_test::python_with_torch and Need::python_torch, tests/support_prereq.hpp).
#include "support_prereq.hpp"
