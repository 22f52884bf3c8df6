#pragma once
// libreyolo — header-only, policy-based training library on LibTorch. Umbrella header.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/device.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/traits.hpp>

#include <libreyolo/capture/eager.hpp>
#include <libreyolo/precision/amp.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/precision/fp32.hpp>
#include <libreyolo/profile/window.hpp>

#include <libreyolo/data/classify.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/synth.hpp>

#include <libreyolo/families/registry.hpp>
#include <libreyolo/train/trainer.hpp>

#include <libreyolo/model.hpp>
