#!/usr/bin/env python3
"""Writes a random-weight dense checkpoint (config.json, model.safetensors,
tokenizer.json) for speed measurements at realistic sizes. Weights are
N(0, 0.02) in bf16 (norms 1), so outputs are meaningless; the shapes are real.

  scripts/make_random_model.py OUT_DIR [--preset qwen3-0.6b|tiny] [--seed S]

Needs only numpy. The tokenizer is the real Qwen3 one from the repository's data/.
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

PRESETS = {
    # Qwen3-0.6B's published shapes.
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, tie_word_embeddings=True),
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 vocab_size=151936, tie_word_embeddings=True),
}


def bf16_bytes(a):
    u = a.astype(np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return r.tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--preset", default="qwen3-0.6b", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    p = PRESETS[args.preset]
    rng = np.random.default_rng(args.seed)
    H, I, hd = p["hidden_size"], p["intermediate_size"], p["head_dim"]
    nq, nkv, V = p["num_attention_heads"] * hd, p["num_key_value_heads"] * hd, p["vocab_size"]
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not p["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, H)
    for i in range(p["num_hidden_layers"]):
        q = f"model.layers.{i}."
        shapes.update({
            q + "input_layernorm.weight": (H,), q + "post_attention_layernorm.weight": (H,),
            q + "self_attn.q_proj.weight": (nq, H), q + "self_attn.k_proj.weight": (nkv, H),
            q + "self_attn.v_proj.weight": (nkv, H), q + "self_attn.o_proj.weight": (H, nq),
            q + "self_attn.q_norm.weight": (hd,), q + "self_attn.k_norm.weight": (hd,),
            q + "mlp.gate_proj.weight": (I, H), q + "mlp.up_proj.weight": (I, H),
            q + "mlp.down_proj.weight": (H, I),
        })
    names = sorted(shapes)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n in names:
        nbytes = int(np.prod(shapes[n])) * 2
        header[n] = {"dtype": "BF16", "shape": list(shapes[n]), "data_offsets": [off, off + nbytes]}
        off += nbytes
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for n in names:
            shp = shapes[n]
            a = np.ones(shp, np.float32) if len(shp) == 1 else rng.standard_normal(shp, np.float32) * 0.02
            f.write(bf16_bytes(a))
    cfg = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", max_position_embeddings=40960,
               rms_norm_eps=1e-6, rope_theta=1000000, attention_bias=False, torch_dtype="bfloat16",
               eos_token_id=151645, bos_token_id=151643, **p)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    here = os.path.dirname(os.path.abspath(__file__))
    shutil.copy(os.path.join(here, "..", "data", "tokenizers", "qwen3", "tokenizer.json"),
                os.path.join(args.out, "tokenizer.json"))
    print(f"wrote {args.out}: {off / 1e6:.1f} MB of bf16 weights")


if __name__ == "__main__":
    main()
