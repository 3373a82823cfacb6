#!/usr/bin/env python3
"""Golden outputs of HF transformers for the real GGUF models (SmolLM2-135M-Instruct,
Qwen2.5-Coder-1.5B-Instruct), for blockspec's e2e tests. Developers run it; CI never does.

venv (same one as make_golden.py, plus gguf):
  python3 -m venv ~/.cache/blockspec/venv-golden
  ~/.cache/blockspec/venv-golden/bin/pip install torch==2.15.0 transformers==5.23.0 tokenizers==0.23.3 \
      safetensors==0.8.0 numpy gguf==0.19.0 accelerate==1.15.0
  scripts/fetch_models.sh all
  ~/.cache/blockspec/venv-golden/bin/python scripts/make_real_golden.py [--only smollm2]

HF loads the GGUF by dequantizing every tensor to f32 (transformers' integrations/ggml.py, through
the gguf package); `dtype=bfloat16` then rounds those f32 values to bf16 (round-to-nearest-even), which
is exactly what `blockspec --weights bf16` does with the same GGUF. For each prompt we record three runs:

  f32      f32 weights, f32 compute                              (blockspec --weights f32)
  bf16w    bf16 weight matrices upcast exactly to f32, f32 norms and biases, f32 compute
                                                                 (blockspec --weights bf16)
  bf16     every parameter in bf16, bf16 compute, eager attention (blockspec --weights bf16 with
                                                                 emulate_bf16_activations)

each as the final-prompt-position logits on a fixed id subset (the 256 largest HF logits plus 768 ids
drawn at random: full rows of a 152k vocabulary would make MB-sized fixtures) and 32 greedy tokens
(HF KV cache, one token at a time). Prompts whose greedy path has a near tie (top-2 logit gap below
MIN_MARGIN at any of the 32 steps) are reported, since fp noise could then legitimately flip a token.

Output: tests/fixtures/real/<model>.golden.safetensors with, per prompt i:
  p{i}.input_ids I32 [T]       p{i}.ids I32 [1024]         the logit subset's token ids
  p{i}.<run>.logits F32 [1024] p{i}.<run>.greedy I32 [32]  p{i}.<run>.margin F32 [32] top-2 gap per step
__metadata__: versions, model file sha256, the prompts' text.
"""
import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

PINNED = {"torch": "2.15.0", "transformers": "5.23.0", "gguf": "0.19.0", "accelerate": "1.15.0"}
REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BLOCKSPEC_CACHE", Path.home() / ".cache" / "blockspec")) / "models"
MODELS = {
    "smollm2": "smollm2.gguf",
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b.gguf",
}
PROMPTS = [
    "<|im_start|>user\nWrite a Python function that returns the n-th Fibonacci number.<|im_end|>\n<|im_start|>assistant\n",
    "The capital of France is",
    "def quicksort(arr):\n    \"\"\"Sort a list of numbers.\"\"\"\n",
]
N_GREEDY = 32
N_TOP, N_RANDOM = 256, 768
MIN_MARGIN = 0.02


def check_versions():
    import gguf  # noqa: F401
    import torch
    import transformers
    from importlib.metadata import version
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "gguf": version("gguf"), "accelerate": version("accelerate")}
    if got != PINNED:
        sys.exit(f"version mismatch: want {PINNED}, have {got}")
    return got


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def greedy(model, ids, torch):
    """Prefill, then N_GREEDY steps with the KV cache. Returns final-prompt logits, tokens, margins."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        first = out.logits[0, -1].float().clone()
        cache, logits = out.past_key_values, first
        toks, margins = [], []
        for _ in range(N_GREEDY):
            top = logits.topk(2).values
            margins.append(float(top[0] - top[1]))
            nxt = int(logits.argmax())
            toks.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[0, -1].float()
    return first, toks, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    versions = check_versions()
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(2)
    torch.manual_seed(0)
    out_dir = REPO / "tests" / "fixtures" / "real"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, fname in MODELS.items():
        if args.only and name not in args.only.split(","):
            continue
        path = CACHE / fname
        if not path.exists():
            sys.exit(f"{path}: missing; run scripts/fetch_models.sh first")
        tok = AutoTokenizer.from_pretrained(str(CACHE), gguf_file=fname)
        m32 = AutoModelForCausalLM.from_pretrained(str(CACHE), gguf_file=fname, dtype=torch.float32,
                                                   attn_implementation="eager").eval()
        m16 = AutoModelForCausalLM.from_pretrained(str(CACHE), gguf_file=fname, dtype=torch.bfloat16,
                                                   attn_implementation="eager").eval()
        # bf16 weight matrices, everything else as stored: blockspec --weights bf16 rounds the matrices
        # (embedding, linears, lm_head) and keeps norm vectors and biases in f32, so the twin is the bf16
        # model upcast exactly to f32 with its 1-D parameters restored from the f32 model.
        twin = AutoModelForCausalLM.from_pretrained(str(CACHE), gguf_file=fname, dtype=torch.bfloat16,
                                                    attn_implementation="eager").to(torch.float32).eval()
        with torch.no_grad():
            exact = dict(m32.named_parameters())
            for pname, p in twin.named_parameters():
                if p.ndim == 1:
                    p.data = exact[pname].data.float().clone()
        rng = np.random.Generator(np.random.PCG64(1234))
        tensors, report = {}, []
        for i, text in enumerate(PROMPTS):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            tensors[f"p{i}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
            runs = {"f32": greedy(m32, ids, torch), "bf16w": greedy(twin, ids, torch),
                    "bf16": greedy(m16, ids, torch)}
            ref = runs["f32"][0]
            V = ref.shape[0]
            top = ref.topk(N_TOP).indices.numpy()
            rest = np.setdiff1d(np.arange(V), top)
            subset = np.concatenate([top, rng.choice(rest, N_RANDOM, replace=False)]).astype(np.int32)
            tensors[f"p{i}.ids"] = torch.from_numpy(subset)
            idx = torch.from_numpy(subset.astype(np.int64))
            for run, (logits, toks, margins) in runs.items():
                tensors[f"p{i}.{run}.logits"] = logits[idx].contiguous()
                tensors[f"p{i}.{run}.greedy"] = torch.tensor(toks, dtype=torch.int32)
                tensors[f"p{i}.{run}.margin"] = torch.tensor(margins, dtype=torch.float32)
                report.append(f"  p{i} {run:5s} min margin {min(margins):.4f} text {tok.decode(toks)!r}")
        meta = {"n_prompts": str(len(PROMPTS)), "model_sha256": sha256(path), "prompts": json.dumps(PROMPTS),
                **{k: v for k, v in versions.items()}}
        dst = out_dir / f"{name}.golden.safetensors"
        save_file(tensors, str(dst), metadata=meta)
        print(f"{dst}: {dst.stat().st_size} bytes")
        print("\n".join(report))


if __name__ == "__main__":
    main()
