#!/usr/bin/env python3
"""The drafters `blockspec train-drafter` ships, run by the z-lab reference package (issue 15, item 3).

Writes tests/fixtures/train/trained_drafters.safetensors (described in trained_drafters.md beside it) for
tests/train/trained_drafter_e2e_test.cc. Developers run this by hand; CI reads only the fixture.

For each shipped SmolLM2-135M drafter (drafters/smollm2-135m-dflash: DFlash, 8192-token draft vocabulary;
drafters/smollm2-135m-dflash-b16: the same with block size 16; drafters/smollm2-135m-dflash2: DFlash2) and two
prompts:
  - the target is SmolLM2-135M-Instruct from the GGUF blockspec fetches (scripts/fetch_models.sh smollm2), loaded by
    transformers' GGUF reader (dequantized to f32: the weights blockspec's --weights f32 serves);
  - the drafter is loaded by the reference's own `DFlashDraftModel` / `DFlash2DraftModel.from_pretrained` (in f32
    from the bf16 file) and must load with nothing missing; the DFlash drafter's speculators-layout extras
    (lm_head.weight, d2t, t2d) are the only unexpected keys;
  - one drafting step exactly as `dflash.model.dflash_generate` runs it: the target prefill's tap features
    (extract_context_feature), the anchor = the target's greedy token, the block [anchor, MASK x (B - 1)] embedded with the
    target table, the drafter forward with a fresh cache; DFlash: logits with the target head; with a reduced draft
    vocabulary, the hidden states times the drafter's stored `lm_head.weight` (the target's rows t2d, bf16) over
    the draft vocabulary and -inf elsewhere (training.md §5, the speculators layout; the reference package has no
    reduced vocabulary, so this one product is written here), the draft their argmax; DFlash2: `propose` (the
    selector's greedy walk);
  - DFlash2 (full vocabulary, so the reference runs it end to end): `dflash_generate(..., max_new_tokens=32,
    temperature=0)`, its output and acceptance lengths.

Venv: /work/venv-torch of scripts/make_train_golden.py plus

    pip install transformers==5.23.0 gguf==0.19.0 accelerate==1.15.0
    pip install --no-deps dflash==0.1.0
    <venv>/bin/python scripts/make_trained_drafter_golden.py [--gguf ~/.cache/blockspec/models/smollm2.gguf]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

PINNED = {"torch": "2.15.0", "numpy": "2.4.6", "safetensors": "0.8.0", "transformers": "5.23.0", "gguf": "0.19.0",
          "accelerate": "1.15.0", "dflash": "0.1.0"}


def check_versions():
    found = {}
    for name in PINNED:
        try:
            found[name] = importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            found[name] = "(not installed)"
    bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k] != v]
    if bad:
        sys.exit("make_trained_drafter_golden.py: wrong package versions (see the docstring):\n  " + "\n  ".join(bad))
    return found


VERSIONS = check_versions()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

import dflash.model as ref  # noqa: E402
from dflash.model import (DFlash2DraftModel, DFlashDraftModel, _make_cache, _output_head,  # noqa: E402
                          _raw_input_embeddings, dflash_generate, extract_context_feature)

# dflash_generate(return_stats=True) times itself with torch.cuda.synchronize(), which raises without a GPU; timing
# is not part of the fixture (the only patch of the reference, as scripts/make_dflash_golden.py).
ref._cuda_time = __import__("time").perf_counter
torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests/fixtures/train"
DRAFTERS = {"dflash": REPO / "drafters/smollm2-135m-dflash", "dflash2": REPO / "drafters/smollm2-135m-dflash2",
            "dflash_b16": REPO / "drafters/smollm2-135m-dflash-b16"}
# Token ids of SmolLM2's chat template around two gsm8k_test-style questions (not training prompts).
QUESTIONS = ["A baker makes 24 muffins and sells 3 boxes of 6. How many muffins are left?",
             "Sam reads 12 pages a day for 5 days, then 20 pages on the sixth day. How many pages did he read?"]
N_NEW = 32


def load_target(gguf: Path):
    t = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    t.eval()
    return t, tok


def load_drafter(kind):
    cls = DFlash2DraftModel if kind == "dflash2" else DFlashDraftModel
    m, info = cls.from_pretrained(str(DRAFTERS[kind]), dtype=torch.float32, output_loading_info=True)
    extras = {"lm_head.weight", "d2t", "t2d"} if kind != "dflash2" else set()
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert set(info["unexpected_keys"]) == extras, info["unexpected_keys"]
    m.eval()
    return m


@torch.inference_mode()
def one_step(drafter, target, ids, draft_vocab, draft_head):
    """dflash_generate's first drafting step, spelled out: features, anchor, block forward, the draft."""
    P = len(ids)
    out = target(torch.tensor([ids]), output_hidden_states=True)
    feats = extract_context_feature(out.hidden_states, drafter.target_layer_ids)  # [1, P, T * H]
    anchor = int(out.logits[0, -1].argmax())
    B = drafter.block_size
    block = torch.full((1, B), int(drafter.mask_token_id))
    block[0, 0] = anchor
    emb = _raw_input_embeddings(target, block, 1.0)
    hidden = drafter(target_hidden=feats, noise_embedding=emb, position_ids=torch.arange(P + B)[None],
                     past_key_values=_make_cache(drafter.config), use_cache=True)[:, 1 - B:, :]  # slots 1..B-1
    if draft_head is None:
        logits = drafter.compute_logits(hidden, _output_head(target))[0]  # [B-1, V]
    else:  # the drafter's own head: the target's rows of the draft vocabulary, as stored (bf16)
        logits = torch.full((B - 1, target.config.vocab_size), float("-inf"))
        logits[:, draft_vocab] = hidden[0] @ draft_head.T
    if isinstance(drafter, DFlash2DraftModel):
        tokens = drafter.propose(hidden, block[:, 0], _output_head(target), 0.0)[0][0]
    else:
        tokens = logits.argmax(-1)  # with a reduced vocabulary, other ids have probability 0
    top = torch.topk(logits if draft_vocab is None else logits[:, draft_vocab], 8, dim=-1)
    top_ids = top.indices if draft_vocab is None else draft_vocab[top.indices]
    return feats[0], anchor, hidden[0], top_ids, top.values, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, default=Path.home() / ".cache/blockspec/models/smollm2.gguf")
    args = ap.parse_args()
    target, tok = load_target(args.gguf)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
               for q in QUESTIONS]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
    out, meta = {}, {"made_by": "scripts/make_trained_drafter_golden.py",
                     "versions": " ".join(f"{k}=={v}" for k, v in VERSIONS.items()),
                     "target": args.gguf.name, "drafters": {}}
    for kind in DRAFTERS:
        d = load_drafter(kind)
        dv = head = None
        if kind != "dflash2":  # DFlash drafters with a reduced draft vocabulary
            with safe_open(str(DRAFTERS[kind] / "model.safetensors"), "pt") as f:
                d2t = f.get_tensor("d2t")  # int64 offsets: target id = i + d2t[i]
                head = f.get_tensor("lm_head.weight").float()  # [Vd, H]
            dv = torch.arange(len(d2t)) + d2t
        meta["drafters"][kind] = {"dir": str(DRAFTERS[kind].relative_to(REPO)), "taps": list(d.target_layer_ids),
                                  "block_size": d.block_size}
        for i, ids in enumerate(prompts):
            feats, anchor, hidden, top_ids, top_vals, tokens = one_step(d, target, ids, dv, head)
            p = f"{kind}.p{i}."
            out[f"p{i}.input_ids"] = np.array(ids, dtype=np.int32)
            out[p + "feats"] = feats.float().numpy()
            out[p + "anchor"] = np.array([anchor], dtype=np.int32)
            out[p + "hidden"] = hidden.float().numpy()
            out[p + "top_ids"] = top_ids.to(torch.int32).numpy()
            out[p + "top_logits"] = top_vals.float().numpy()
            out[p + "tokens"] = tokens.to(torch.int32).numpy()
            line = f"{kind} p{i}: P {len(ids)}, anchor {anchor}, drafted {tokens.tolist()}"
            if kind == "dflash2":
                ids_t = torch.tensor([ids])
                gen = dflash_generate(d, target=target, input_ids=ids_t, max_new_tokens=N_NEW, stop_token_ids=None,
                                      temperature=0.0, return_stats=True)
                greedy = target.generate(ids_t, max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False,
                                         eos_token_id=None, pad_token_id=0)
                n = min(gen.output_ids.shape[1], greedy.shape[1])
                assert torch.equal(gen.output_ids[0, :n], greedy[0, :n]), "reference DFlash2 is not lossless"
                out[p + "spec_output"] = gen.output_ids[0].to(torch.int32).numpy()
                out[p + "acceptance_lengths"] = np.array(gen.acceptance_lengths, dtype=np.int32)
                line += f"; dflash_generate acceptance {list(gen.acceptance_lengths)}"
            print(line)
    out = {k: np.ascontiguousarray(v) for k, v in out.items()}
    path = OUT / "trained_drafters.safetensors"
    save_file(out, str(path), metadata={"config": json.dumps(meta, sort_keys=True)})
    path.chmod(0o644)
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
