#!/usr/bin/env python3
"""Writes a random-weight checkpoint (config.json, model.safetensors,
tokenizer.json) for speed measurements at realistic sizes. Weights are
N(0, 0.02) in bf16 (norms 1), so outputs are meaningless; the shapes are real.

  scripts/make_random_model.py OUT_DIR [--preset NAME] [--seed S]

Presets: dense Qwen3 (qwen3-0.6b, tiny, dense-0.8b-like) and hybrid Qwen3.5
(qwen3.5-0.8b-like, qwen3.5-4b-like: Gated DeltaNet layers 3:1 with gated
full attention, ../shared/docs/hybrid.md §1.3); dense-0.8b-like has the
0.8B-like hybrid's shapes with every layer full attention and a wider MLP (5120)
so that both have ~0.5B parameters outside the embedding, for comparing the
two at one parameter count. Needs only numpy. The tokenizer is the real Qwen3
one (Qwen3.5's for the hybrids) from the repository's data/.
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
    # Hybrid Qwen3.5 shapes: 0.8B-like (H 1024, 24 layers = 18 GDN + 6 attention, 8/2 heads of 256, GDN
    # 16/16 heads of 128) and the published 4B (hybrid.md §1.3: H 2560, 32 layers, 16/4 x 256, F 9216,
    # GDN 16/32 x 128).
    "qwen3.5-0.8b-like": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                              num_attention_heads=8, num_key_value_heads=2, head_dim=256, vocab_size=248320,
                              tie_word_embeddings=True, linear_num_key_heads=16, linear_num_value_heads=16,
                              linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4),
    "qwen3.5-4b-like": dict(hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
                            num_attention_heads=16, num_key_value_heads=4, head_dim=256, vocab_size=248320,
                            tie_word_embeddings=True, linear_num_key_heads=16, linear_num_value_heads=32,
                            linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4),
    "dense-0.8b-like": dict(hidden_size=1024, intermediate_size=5120, num_hidden_layers=24,
                            num_attention_heads=8, num_key_value_heads=2, head_dim=256, vocab_size=248320,
                            tie_word_embeddings=True),
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
    hybrid = "linear_num_value_heads" in p
    special = {}  # name -> generator of non-default values (hybrid parameters)
    for i in range(p["num_hidden_layers"]):
        q = f"model.layers.{i}."
        if hybrid:
            shapes.update({q + "input_layernorm.weight": (H,), q + "post_attention_layernorm.weight": (H,),
                           q + "mlp.gate_proj.weight": (I, H), q + "mlp.up_proj.weight": (I, H),
                           q + "mlp.down_proj.weight": (H, I)})
            if (i + 1) % 4 != 0:  # Gated DeltaNet (HF's layer rule, full_attention_interval 4)
                kd = p["linear_num_key_heads"] * p["linear_key_head_dim"]
                vd = p["linear_num_value_heads"] * p["linear_value_head_dim"]
                nv, C = p["linear_num_value_heads"], 2 * kd + vd
                a = q + "linear_attn."
                shapes.update({a + "in_proj_qkv.weight": (C, H), a + "in_proj_z.weight": (vd, H),
                               a + "in_proj_b.weight": (nv, H), a + "in_proj_a.weight": (nv, H),
                               a + "conv1d.weight": (C, 1, p["linear_conv_kernel_dim"]), a + "A_log": (nv,),
                               a + "dt_bias": (nv,), a + "norm.weight": (p["linear_value_head_dim"],),
                               a + "out_proj.weight": (H, vd)})
                special[a + "A_log"] = lambda shp: np.log(rng.uniform(1.0, 16.0, shp)).astype(np.float32)
                special[a + "conv1d.weight"] = lambda shp: rng.standard_normal(shp, np.float32) * 0.3
            else:  # gated attention: q_proj holds query and gate per head
                shapes.update({q + "self_attn.q_proj.weight": (2 * nq, H), q + "self_attn.k_proj.weight": (nkv, H),
                               q + "self_attn.v_proj.weight": (nkv, H), q + "self_attn.o_proj.weight": (H, nq),
                               q + "self_attn.q_norm.weight": (hd,), q + "self_attn.k_norm.weight": (hd,)})
            continue
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
            if n in special:
                a = special[n](shp)
            elif len(shp) == 1:  # norms: 1 (hybrid (1 + w) norms: w = 0); dt_bias 1
                a = np.zeros(shp, np.float32) if hybrid and "linear_attn" not in n else np.ones(shp, np.float32)
            else:
                a = rng.standard_normal(shp, np.float32) * 0.02
            f.write(bf16_bytes(a))
    if hybrid:
        cfg = dict(architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", max_position_embeddings=262144,
                   rms_norm_eps=1e-6, attention_bias=False, dtype="bfloat16", eos_token_id=248046,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
                   **p)
    else:
        cfg = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", max_position_embeddings=40960,
                   rms_norm_eps=1e-6, rope_theta=1000000, attention_bias=False, torch_dtype="bfloat16",
                   eos_token_id=151645, bos_token_id=151643, **p)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    here = os.path.dirname(os.path.abspath(__file__))
    tok_dir = "qwen3.5" if p["vocab_size"] == 248320 else "qwen3"
    shutil.copy(os.path.join(here, "..", "data", "tokenizers", tok_dir, "tokenizer.json"),
                os.path.join(args.out, "tokenizer.json"))
    print(f"wrote {args.out}: {off / 1e6:.1f} MB of bf16 weights")


if __name__ == "__main__":
    main()
