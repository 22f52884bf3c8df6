#pragma once
// libreyolo — header-only, policy-based training library on LibTorch. Umbrella header: the trainer, its
// policies (precision, capture, profiler), data and configuration, without any family. Include what you use
// besides: a family's header (<libreyolo/families/yolo9/family.hpp>, ...) to compose
// Trainer<Family, Precision, Capture, Profiler> yourself, or <libreyolo/model.hpp> for the run-time facade
// `Model` over every registered family (it includes them all; header-only it compiles every family's
// trainers, linked with libreyolo::families none).
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

#include <libreyolo/train/trainer.hpp>

