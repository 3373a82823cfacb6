// What `blockspec train-drafter` writes (issue 15): the drafter as a z-lab
// DFlash / DFlash2 checkpoint (config.json with dflash_config + model.safetensors,
// gate/up split as the reference stores them) that DraftModel, `check`,
// `quantize` and the dflash reference package load; and the trainer's own
// state (f32 master weights, AdamW moments, step) it resumes from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "train/draft_step.h"
#include "train/optim.h"

namespace blockspec {

// config.json fields beyond the shapes of DraftShape.
struct DraftArch {
  int64_t block_size = 8;
  int32_t mask_token_id = 0;
  std::vector<int64_t> target_layer_ids;
  int64_t num_target_layers = 0;
  int64_t target_vocab_size = 0;
  double rope_theta = 1e6;
  int64_t max_position_embeddings = 32768;
  std::string target_model_type;  // recorded for the user; the drafter is Qwen3-shaped
  // Reduced draft vocabulary (training.md §5): target ids, ascending; empty:
  // the target's full head. Written as draft_vocab_size + lm_head.weight
  // (the target's rows, `head`) + d2t offsets + t2d mask.
  std::vector<int32_t> draft_vocab;
  const float* head = nullptr;  // [draft_vocab.size(), H] f32
  // DFlash2 (DraftShape::dflash2()): every layer sliding_attention with this
  // window, bidirectional in the block, as both published DFlash2 configs
  // (dflash.md §5.1).
  int64_t sliding_window = 2048;
  // DFlash: causal attention inside the block (slot k sees the anchor and slots 1..k-1, not the masks after it), so
  // slots 1..K come out the same whatever block length [anchor, MASK x K] serving runs; written as is_causal and
  // dflash_config.causal. false: bidirectional in the block (the z-lab full_attention drafters).
  bool causal = false;
};

// DIR/config.json + DIR/model.safetensors; dtype kBF16 (the usual release)
// or kF32. Creates DIR.
void write_draft_checkpoint(const std::string& dir, const DraftShape& s, DraftParams& p, const DraftArch& a,
                            DType dtype);

// The parameters of a drafter checkpoint (any float dtype) into p, whose
// shapes must match: the trainer starting from a drafter (--init).
void read_draft_params(const std::string& dir, const DraftShape& s, DraftParams& p);

// Training state: masters, moments (one AdamW per tensor, each()'s order),
// the number of optimizer steps taken. Written atomically (temp + rename).
void save_train_state(const std::string& path, DraftParams& p, std::vector<AdamW>& opt, int64_t step);
// Returns the step; p and opt must have the shapes of the saved run.
int64_t load_train_state(const std::string& path, DraftParams& p, std::vector<AdamW>& opt);

}  // namespace blockspec
