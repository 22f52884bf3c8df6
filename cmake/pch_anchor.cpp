// Anchor translation unit for the shared precompiled header (torch/torch.h, nlohmann/json.hpp).
