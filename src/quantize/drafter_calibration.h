// GPTQ calibration of a DFlash / DFlash2 drafter from its real inputs: the
// target runs each calibration window once (prefill with the drafter's tap
// layers, as speculative decoding does), then the drafter runs blocks exactly
// as runtime/dflash_proposer.cc feeds it: for anchors a = 1, 1 + stride, ...
// of the window, the context = the taps of the tokens 0..a-1 not yet in the
// draft cache (through fc + hidden_norm into the cached context K/V), the
// block = [token a, MASK x (block_size - 1)] at positions a..a+block_size-1.
// A DraftObserver (model/dflash.h) hands over the input rows of every linear;
// H = sum x x^T per input (modules reading the same rows share it).
//
// All Hessians come from the original (dense) drafter in one pass: a
// drafter is a few layers deep, and its context K/V path and block path
// share every layer, so quantized-prefix replay (the target path's
// layer-by-layer order) is not done here.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "quantize/calibration.h"

namespace blockspec {

struct DrafterCalibOptions {
  int64_t anchor_stride = 1;  // every stride-th position of a window is an anchor
  int n_threads = 0;          // 0: all cores
  bool progress = false;      // one line per window on stderr
};

struct DrafterCalibration {
  std::map<std::string, Hessian> hessians;  // module ("layers.0.mlp.down_proj", "fc") -> H [K, K]
  std::map<std::string, int64_t> rows;      // module -> calibration rows in its H
  int64_t n_blocks = 0;                     // drafter forwards (one block each)
};

// Fails (one line) unless `drafter_dir` is a drafter consistent with the
// target at `target_path` (HF directory or GGUF): the checks of
// `blockspec check DRAFTER --target TARGET` (model/dflash_check.h).
void check_drafter_against_target(const std::string& drafter_dir, const std::string& target_path);

// windows: token ids of the target's vocabulary; each window is one fresh
// sequence. needs(module): whether a module wants its Hessian.
DrafterCalibration calibrate_drafter(const std::string& drafter_dir, const std::string& target_path,
                                     const std::vector<std::vector<int32_t>>& windows,
                                     const std::function<bool(const std::string&)>& needs,
                                     const DrafterCalibOptions& opts);

}  // namespace blockspec
