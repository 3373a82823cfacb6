#!/usr/bin/env python3
"""Straight-through gradient goldens of PTQR's student layer (issue 18, training.md §10.3).

Writes tests/fixtures/ptqr/ptqr_grad.safetensors, read by tests/ptqr/ptqr_grad_golden_test.cc. Developers run
this by hand; CI only reads the committed fixture.

The reference is written here from the definitions (training.md §10.3, quant_formats.md §3.2 / §3.7,
docs/kv_cache.md), not from the C++: one dense decoder layer (pre-norm attention with GQA, NeoX RoPE, SwiGLU MLP)
over one causal window of T tokens, every rounding the W8A8 serving kernels make applied as fake quantization with
a straight-through estimator, x + (round(x) - x).detach():
  - weights: per row and group of 128 inputs, scale s = max|w| / 127.5 (the compressed-tensors symmetric rule,
    range 255 / 2; a zero scale becomes f32 eps), codes round_half_even(clamp(w / s, -128, 127)), value code * s;
    int4 (the W4A16 case): s = max|w| / 7.5, codes in [-8, 7];
  - activations (each linear's input; W8A8 only, the W4A16 case keeps them f32), per token: amax = max|x|, code = round_half_even(x * (127 / amax)) clamped to
    [-128, 127], value code * (amax / 127);
  - K (after RoPE) and V, per token and KV head, per 128 channels (int8_block_g128): s = amax / 127,
    code = round_half_even(x / s) clamped to [-127, 127], value code * s (or no rounding for an f32 cache).
Loss: (1/T) sum_t ||y_t - target_t||^2 / ||target_t||^2. Gradients by autograd, with respect to the latent
weights (equal to those with respect to the dequantized ones under the straight-through estimator), the q/k/v
biases and the two layer norms (ptqr --train-vectors).

Arithmetic is float32, as the engine's kernels run it (the rounding decisions then agree with the C++ except for
values within an ulp of a rounding boundary); CPU, one thread, deterministic.

Venv: see scripts/make_train_golden.py (torch==2.15.0 numpy==2.4.6 safetensors==0.8.0):

    /work/venv-torch/bin/python scripts/make_ptqr_golden.py
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

PINNED = {"torch": "2.15.0", "numpy": "2.4.6", "safetensors": "0.8.0"}
found = {}
for name in PINNED:
    try:
        found[name] = importlib.metadata.version(name).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        found[name] = "(not installed)"
bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k] != v]
if bad:
    sys.exit("make_ptqr_golden.py: wrong package versions (see the docstring):\n  " + "\n  ".join(bad))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
f32 = torch.float32
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests/fixtures/ptqr"

H, NH, NKV, HD, I, T = 128, 2, 1, 64, 256, 16
EPS, THETA = 1e-6, 10000.0
CASES = {
    # Qwen2: q/k/v biases, no q/k norms, int8_block_g128 KV cache
    "qwen2": dict(bias=True, qk_norm=False, kv="int8_block_g128", seed=18),
    # Qwen3: q/k norms, no biases, f32 KV cache
    "qwen3": dict(bias=False, qk_norm=True, kv="f32", seed=19),
    # W4A16 (ptqr --scheme w4a16): int4 weights on the G128 grid, f32 activations, int8_block_g128 KV cache
    "qwen2_w4a16": dict(bias=True, qk_norm=False, kv="int8_block_g128", bits=4, acts=False, seed=20),
}


def ste(x, xq):
    return x + (xq - x).detach()


def fq_weight(w, bits=8):
    n, k = w.shape
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    parts = []
    for g0 in range(0, k, 128):
        blk = w[:, g0:g0 + 128]
        mx = torch.clamp(blk.max(dim=1).values, min=0.0)
        mn = torch.clamp(blk.min(dim=1).values, max=0.0)
        s = torch.maximum(-mn, mx) / ((qmax - qmin) / 2.0)
        s = torch.where(s == 0, torch.full_like(s, float(np.finfo(np.float32).eps)), s)
        q = torch.round(torch.clamp(blk / s[:, None], float(qmin), float(qmax)))
        parts.append(q * s[:, None])
    return ste(w, torch.cat(parts, dim=1))


def fq_acts(x):
    amax = x.abs().max(dim=-1).values
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    c = torch.clamp(torch.round(x * inv[:, None]), -128.0, 127.0)
    return ste(x, c * (amax / 127.0)[:, None])


def fq_kv(x, kind):  # x [T, nkv, hd]
    if kind == "f32":
        return x
    amax = x.abs().max(dim=-1).values
    s = amax / 127.0
    r = torch.where(s[..., None] > 0, torch.round(x / s[..., None]), torch.zeros_like(x))
    return ste(x, torch.clamp(r, -127.0, 127.0) * s[..., None])


def rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + EPS) * w


def rope(x, cos, sin):  # x [T, heads, hd], NeoX halves
    h = HD // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def layer_forward(x, lin, norms, qk_norm, kv, cos, sin, fake_quant=True):
    """One W8A8 decoder layer over a causal window, every serving rounding as fake quantization (fake_quant False:
    none, the float layer); lin(a, module) is the module's linear (a @ deq.T + bias)."""
    fq_acts_ = fq_acts if fake_quant else (lambda a: a)
    t = x.shape[0]
    wq = NH * HD
    a1 = fq_acts_(rmsnorm(x, norms["input_layernorm"]))
    q = lin(a1, "q_proj").view(t, NH, HD)
    k = lin(a1, "k_proj").view(t, NKV, HD)
    v = lin(a1, "v_proj").view(t, NKV, HD)
    if qk_norm:
        q, k = rmsnorm(q, norms["q_norm"]), rmsnorm(k, norms["k_norm"])
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    k, v = fq_kv(k, kv), fq_kv(v, kv)
    rep = NH // NKV
    kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = torch.einsum("thd,shd->hts", q, kk) / (HD ** 0.5)
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    p = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    att = torch.einsum("hts,shd->thd", p, vv).reshape(t, wq)
    x2 = x + lin(fq_acts_(att), "o_proj")
    a3 = fq_acts_(rmsnorm(x2, norms["post_attention_layernorm"]))
    gate, up = lin(a3, "gate_proj"), lin(a3, "up_proj")
    h = torch.nn.functional.silu(gate) * up
    return x2 + lin(fq_acts_(h), "down_proj")


def run_case(name, cfg, out):
    g = torch.Generator().manual_seed(cfg["seed"])
    rnd = lambda *shape, scale=1.0: (torch.randn(*shape, generator=g, dtype=f32) * scale)
    wq, wk = NH * HD, NKV * HD
    W = {
        "q_proj": rnd(wq, H, scale=0.08), "k_proj": rnd(wk, H, scale=0.08), "v_proj": rnd(wk, H, scale=0.08),
        "o_proj": rnd(H, wq, scale=0.08), "gate_proj": rnd(I, H, scale=0.08), "up_proj": rnd(I, H, scale=0.08),
        "down_proj": rnd(H, I, scale=0.06),
    }
    W["down_proj"][:, 7] *= 6.0  # an outlier input column
    B = {m: rnd(W[m].shape[0], scale=0.1) for m in ("q_proj", "k_proj", "v_proj")} if cfg["bias"] else {}
    norms = {"input_layernorm": 1.0 + rnd(H, scale=0.1), "post_attention_layernorm": 1.0 + rnd(H, scale=0.1)}
    if cfg["qk_norm"]:
        norms["q_norm"] = 1.0 + rnd(HD, scale=0.1)
        norms["k_norm"] = 1.0 + rnd(HD, scale=0.1)
    x = rnd(T, H)
    x[:, 3] *= 8.0  # an outlier channel of the residual stream
    target = x + rnd(T, H, scale=0.5)
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.int64).to(f32) / HD))
    pos = torch.arange(T, dtype=f32)
    ang = pos[:, None] * inv_freq[None, :]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]

    params = {m: w.clone().requires_grad_(True) for m, w in W.items()}
    B = {m: b.clone().requires_grad_(True) for m, b in B.items()}
    for m in ("input_layernorm", "post_attention_layernorm"):
        norms[m] = norms[m].clone().requires_grad_(True)
    deq = {m: fq_weight(p, cfg.get("bits", 8)) for m, p in params.items()}
    lin = lambda a, m: a @ deq[m].T + (B[m] if m in B else 0.0)
    y = layer_forward(x, lin, norms, cfg["qk_norm"], cfg["kv"], cos, sin, fake_quant=cfg.get("acts", True))
    loss = (((y - target) ** 2).sum(dim=-1) / (target ** 2).sum(dim=-1)).mean()
    loss.backward()

    n = lambda t: np.ascontiguousarray(t.detach().numpy())
    out[f"{name}.x"] = n(x)
    out[f"{name}.target"] = n(target)
    out[f"{name}.inv_freq"] = n(inv_freq)
    for m, w in W.items():
        out[f"{name}.{m}.weight"] = n(w)
        out[f"{name}.{m}.grad"] = n(params[m].grad)
    for m, b in B.items():
        out[f"{name}.{m}.bias"] = n(b)
        out[f"{name}.{m}.bias_grad"] = n(b.grad)
    for m, w in norms.items():
        out[f"{name}.{m}"] = n(w)
        if w.grad is not None:
            out[f"{name}.{m}.grad"] = n(w.grad)
    out[f"{name}.y"] = n(y)
    out[f"{name}.loss"] = np.array([loss.item()], dtype=np.float64)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, cfg in CASES.items():
        run_case(name, cfg, out)
    meta = {"config": json.dumps({"H": H, "n_heads": NH, "n_kv_heads": NKV, "head_dim": HD, "intermediate": I, "T": T,
                                  "rms_norm_eps": EPS, "rope_theta": THETA,
                                  "cases": {k: {kk: vv for kk, vv in v.items() if kk != "seed"} for k, v in CASES.items()}},
                                 sort_keys=True),
            "versions": json.dumps(found, sort_keys=True)}
    save_file(out, str(OUT / "ptqr_grad.safetensors"), metadata=meta)
    print(f"wrote {OUT / 'ptqr_grad.safetensors'}: " + ", ".join(f"{c} loss {out[c + '.loss'][0]:.6f}" for c in CASES))


if __name__ == "__main__":
    main()
