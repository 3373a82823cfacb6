// `blockspec quantize`: an HF safetensors directory (Qwen3 / Qwen2 / Llama
// target, or a DFlash / DFlash2 drafter) or a GGUF file in, an HF directory
// with a GPTQ or compressed-tensors checkpoint out (quantize/writer.h).
//
// Module rules: every "*_proj" linear is quantized; a drafter's "fc" follows
// fc_bits (0: the scheme's, 16: dense); norms, RoPE buffers, DFlash2 conv
// kernels (base_kernel, kernel_projection), selector codebooks and
// hidden_projection, embeddings and lm_head (unless quantize_lm_head) stay
// dense, as do modules matching an `ignore` pattern ("re:<regex>" matched at
// the start like compressed-tensors, else a glob on the module name). Every
// tensor not quantized is copied byte for byte (same dtype). config.json keeps
// every field and gains quantization_config (linears left dense listed in
// "ignore").
//
// Methods: RTN, or GPTQ (quantize/gptq.h) with Hessians from blockspec's own
// layer-by-layer forward over calibration token windows (quantize/
// calibration.h); a drafter's Hessians come from its real inputs: the target
// (`target`) runs the windows, the drafter runs blocks on its taps as
// speculative decoding does (quantize/drafter_calibration.h).
//
// Overrides and SmoothQuant: `overrides` (HF tensor name -> f32 values, the
// original's shape) replace tensors of IN for everything quantize does --
// calibration runs the model with them (model/weight_overlay.h), quantized
// modules are quantized from them, and a replaced tensor that is not
// quantized is written from them in the original tensor's dtype (the only
// tensors not copied byte for byte). `smooth` > 0 first runs SmoothQuant
// (quantize/smooth.h) on IN (with the overrides) over the calibration windows
// and adds its rescaled norms and q/k/v/gate/up weights to the overrides.
// `smooth_attention` > 0 then runs SmoothAttention (quantize/smooth_attention.h) on
// that result and its rescaled q/k rows (or q/k norms) join the overrides too.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quantize/quantizer.h"
#include "quantize/smooth.h"
#include "quantize/writer.h"

namespace blockspec {

struct QuantizeOptions {
  std::string in, out;
  QScheme scheme = QScheme::kW4A16;
  QFormat format = QFormat::kCompressedTensors;
  bool gptq = false;
  int64_t group = 128;               // int schemes: 128 or -1 (per channel)
  bool asym = false;                 // int weight-only schemes
  bool act_order = false;            // GPTQ: columns by descending diag(H), static groups
  bool act_target = true;            // W8A8 GPTQ: solve for the asymmetric target of gptq.h (x vs int8-rounded x)
  std::string fp8_strategy = "channel";  // "tensor" | "channel"
  int fc_bits = 0;                   // drafter fc: 0 = as the scheme, 4, 8, 16 = dense
  bool quantize_lm_head = false;
  std::vector<std::string> ignore;   // patterns of modules kept dense
  std::vector<int32_t> calib_ids;    // calibration tokens (GPTQ); cut into windows
  int64_t calib_window = 512;
  std::string target;                // drafter input: the target model (required for GPTQ calibration)
  int64_t anchor_stride = 1;         // drafter calibration: every n-th window position is a block anchor
  double damp = 0.01;
  bool kv_fp8 = false;               // write FP8 KV cache scales (compressed-tensors kv_cache_scheme)
  double smooth = 0;                 // SmoothQuant alpha in (0, 1] (needs calib_ids; dense targets); 0 = off
  SmoothMappings smooth_mappings = SmoothMappings::kSmoothQuant;  // --smooth-mappings norms | all
  double smooth_attention = 0;       // SmoothAttention alpha in (0, 1] (quantize/smooth_attention.h); 0 = off
  std::map<std::string, std::vector<float>> overrides;  // HF tensor name -> f32 values replacing IN's
  // Modules whose codes and scales are decided elsewhere (ptqr's trained student): written exactly as given
  // instead of RTN / GPTQ; each must have the spec quant_spec_for gives the module.
  std::map<std::string, QuantWeight> fixed;
  int n_threads = 0;
  bool progress = true;              // progress bar on stderr (TTY only)
};

// The spec of a module of stored dtype wdt under scheme sch: scale dtype (GPTQ: f16; compressed-tensors: the
// weight's own float dtype), bits, group and symmetry from the options.
QuantSpec quant_spec_for(const QuantizeOptions& o, QScheme sch, DType wdt);

struct LayerReport {
  std::string module;
  std::string how;      // "int4 sym g128 gptq"
  double rel_err = 0;   // ||W x - Wq x|| / ||W x|| over calibration inputs (or random inputs)
  bool on_calib = false;
  int64_t calib_rows = 0;  // input rows in its Hessian (0: no calibration)
};

struct QuantizeReport {
  std::vector<LayerReport> layers;
  std::vector<std::string> dense_linears;  // linear modules kept dense (config "ignore")
  int64_t n_copied = 0;                    // tensors copied byte for byte
  int64_t calib_tokens = 0;
  int64_t calib_blocks = 0;                // drafter: blocks the drafter ran during calibration
  double calib_seconds = 0, total_seconds = 0;
  uint64_t out_bytes = 0;
  std::vector<std::string> replaced;       // tensors taken from overrides / SmoothQuant instead of IN, sorted
  std::vector<std::string> notes;          // e.g. "drafter: RTN"
  std::vector<float> kv_k_scale, kv_v_scale;  // per layer, when kv_fp8
};

QuantizeReport quantize_model(const QuantizeOptions& opts);

// true when `module` matches one of the --ignore patterns.
bool matches_ignore(const std::vector<std::string>& patterns, const std::string& module);

}  // namespace blockspec
