#!/usr/bin/env python3
"""Scale gradients of PTQR's end-to-end phase (issue 18, training.md §10.4; src/ptqr/ptqr_e2e.h) by autograd.

Writes tests/fixtures/ptqr/ptqr_e2e_grad.safetensors, read by tests/ptqr/ptqr_e2e_golden_test.cc. Developers run
this by hand; CI only reads the committed fixture.

A student of two dense W8A8 layers (make_ptqr_golden.py's layer_forward: per-token int8 activations and the KV
rounding as fake quantization with a straight-through estimator) whose weights are FIXED int8 codes times a
trainable scale per row and group of 128 inputs (deq = code * scale: no rounding between the scale and the
weight, so the gradient is exact), then the final RMSNorm and a frozen head. Loss: the mean over the T tokens of
KL(softmax(z_teacher) || softmax(z_student)); the teacher's logits are the same two layers' with the float weights
(before rounding), no activation or KV rounding, and the same head, plus N(0, 1) noise. Gradients by autograd
with respect to every scale.

Cases as make_ptqr_golden.py: qwen2 (q/k/v biases, int8_block_g128 KV) and qwen3 (q/k norms, f32 KV). Venv and
pins: make_ptqr_golden.py (torch==2.15.0 numpy==2.4.6 safetensors==0.8.0):

    /work/venv-torch/bin/python scripts/make_ptqr_e2e_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_ptqr_golden as g0  # noqa: E402  (checks the pinned versions on import)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

f32 = torch.float32
H, NH, NKV, HD, I, T, EPS, THETA = g0.H, g0.NH, g0.NKV, g0.HD, g0.I, g0.T, g0.EPS, g0.THETA
V, LAYERS = 96, 2
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CASES = {
    "qwen2": dict(bias=True, qk_norm=False, kv="int8_block_g128", seed=30),
    "qwen3": dict(bias=False, qk_norm=True, kv="f32", seed=29),
}


def rtn(w):
    """Codes and scales of w [N, K] on the writer's grid: s = max|w| / 127.5 per row and group of 128."""
    n, k = w.shape
    blk = w.view(n, k // 128, 128)
    s = torch.maximum(blk.max(dim=2).values.clamp(min=0.0), -blk.min(dim=2).values.clamp(max=0.0)) / 127.5
    s = torch.where(s == 0, torch.full_like(s, float(np.finfo(np.float32).eps)), s)
    q = torch.round(torch.clamp(blk / s[:, :, None], -128.0, 127.0))
    return q.view(n, k), s


def run_case(name, cfg, out):
    g = torch.Generator().manual_seed(cfg["seed"])
    rnd = lambda *shape, scale=1.0: (torch.randn(*shape, generator=g, dtype=f32) * scale)
    wq, wk = NH * HD, NKV * HD
    shapes = {"q_proj": (wq, H), "k_proj": (wk, H), "v_proj": (wk, H), "o_proj": (H, wq), "gate_proj": (I, H),
              "up_proj": (I, H), "down_proj": (H, I)}
    layers = []
    for li in range(LAYERS):
        W = {m: rnd(*shapes[m], scale=0.06 if m == "down_proj" else 0.08) for m in MODULES}
        W["down_proj"][:, 7 + li] *= 6.0  # an outlier input column
        B = {m: rnd(W[m].shape[0], scale=0.1) for m in ("q_proj", "k_proj", "v_proj")} if cfg["bias"] else {}
        norms = {"input_layernorm": 1.0 + rnd(H, scale=0.1), "post_attention_layernorm": 1.0 + rnd(H, scale=0.1)}
        if cfg["qk_norm"]:
            norms["q_norm"] = 1.0 + rnd(HD, scale=0.1)
            norms["k_norm"] = 1.0 + rnd(HD, scale=0.1)
        codes, scales = {}, {}
        for m, w in W.items():
            codes[m], s = rtn(w)
            scales[m] = s.clone().requires_grad_(True)
        layers.append(dict(W=W, B=B, norms=norms, codes=codes, scales=scales))
    final_norm = 1.0 + rnd(H, scale=0.1)
    head = rnd(V, H, scale=0.3)
    x0 = rnd(T, H)
    x0[:, 3] *= 8.0  # an outlier channel of the residual stream
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.int64).to(f32) / HD))
    ang = torch.arange(T, dtype=f32)[:, None] * inv_freq[None, :]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]

    def logits(x):
        return g0.rmsnorm(x, final_norm) @ head.T

    # Teacher: float weights, no activation / KV rounding.
    with torch.no_grad():
        x = x0
        for L in layers:
            lin = lambda a, m, L=L: a @ L["W"][m].T + (L["B"][m] if m in L["B"] else 0.0)
            x = g0.layer_forward(x, lin, L["norms"], cfg["qk_norm"], "f32", cos, sin, fake_quant=False)
        # A teacher this close to the student gives a KL of ~1e-3, whose gradient is the quantization error itself, so
        # one rounding decision that the two f32 sides take differently (a value within an ulp of a boundary) would
        # move it by percents; logit noise keeps the comparison about the chain, not about such flips.
        zt = logits(x) + rnd(T, V, scale=1.0)
    # Student: codes * scales.
    x = x0
    for L in layers:
        L["x_in"] = x
        deq = {m: (L["codes"][m].view(L["codes"][m].shape[0], -1, 128) * L["scales"][m][:, :, None])
               .view(L["codes"][m].shape) for m in MODULES}
        lin = lambda a, m, L=L, deq=deq: a @ deq[m].T + (L["B"][m] if m in L["B"] else 0.0)
        x = g0.layer_forward(x, lin, L["norms"], cfg["qk_norm"], cfg["kv"], cos, sin)
        L["y"] = x
    z = logits(x)
    pt = torch.log_softmax(zt, dim=-1)
    ps = torch.log_softmax(z, dim=-1)
    loss = (pt.exp() * (pt - ps)).sum(dim=-1).mean()
    loss.backward()

    n = lambda t: np.ascontiguousarray(t.detach().numpy())
    out[f"{name}.x0"] = n(x0)
    out[f"{name}.inv_freq"] = n(inv_freq)
    out[f"{name}.final_norm"] = n(final_norm)
    out[f"{name}.head"] = n(head)
    out[f"{name}.teacher_logits"] = n(zt)
    out[f"{name}.loss"] = np.array([loss.item()], dtype=np.float64)
    for li, L in enumerate(layers):
        p = f"{name}.layers.{li}"
        for m in MODULES:
            out[f"{p}.{m}.codes"] = n(L["codes"][m]).astype(np.int8)
            out[f"{p}.{m}.scales"] = n(L["scales"][m])
            out[f"{p}.{m}.scales_grad"] = n(L["scales"][m].grad)
        out[f"{p}.y"] = n(L["y"])
        for m, b in L["B"].items():
            out[f"{p}.{m}.bias"] = n(b)
        for m, w in L["norms"].items():
            out[f"{p}.{m}"] = n(w)


def main():
    g0.OUT.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, cfg in CASES.items():
        run_case(name, cfg, out)
    meta = {"config": json.dumps({"H": H, "n_heads": NH, "n_kv_heads": NKV, "head_dim": HD, "intermediate": I, "T": T,
                                  "V": V, "layers": LAYERS, "rms_norm_eps": EPS, "rope_theta": THETA,
                                  "cases": {k: {kk: vv for kk, vv in v.items() if kk != "seed"} for k, v in CASES.items()}},
                                 sort_keys=True),
            "versions": json.dumps(g0.found, sort_keys=True)}
    path = g0.OUT / "ptqr_e2e_grad.safetensors"
    save_file(out, str(path), metadata=meta)
    print(f"wrote {path}: " + ", ".join(f"{c} KL {out[c + '.loss'][0]:.6f}" for c in CASES))


if __name__ == "__main__":
    main()
