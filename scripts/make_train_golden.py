#!/usr/bin/env python3
"""Gradient goldens of the DFlash and DFlash2 drafter training steps (issue 15, training.md §11, llm.c test_gpt2.c
style).

Writes tests/fixtures/train/draft_grad.safetensors (DFlash), draft2_grad.safetensors (DFlash2: the grouped dynamic
convolutions around both sublayers and the candidate-selector loss, training.md §6, dflash.md §5.1) and
tests/fixtures/train/README.md. Developers run this by hand;
CI only reads the committed fixture (tests/train/draft_grad_golden_test.cc).

The reference is written here from the definitions (training.md §2-§3, dflash.md §2, src/train/draft_step.h and
src/train/blocks.h), not from the C++: a tiny 2-layer DFlash drafter in float64 PyTorch, its gradients by autograd,
and 10 steps of torch.optim.AdamW. Every input is rounded to f32 before the f64 forward, so the stored f32 inputs are
exactly the ones the reference saw; outputs are stored f32 (losses f64).

Venv (outside the repository; the PyPI torch 2.15.0 wheel is a CUDA build that runs on a CPU when its CUDA
libraries load, training.md §9.3):

    python3 -m venv /work/venv-torch           # any path
    /work/venv-torch/bin/pip install torch==2.15.0 numpy==2.4.6 safetensors==0.8.0
    /work/venv-torch/bin/python scripts/make_train_golden.py

The plain `pip install torch==2.15.0` pulls the whole CUDA 13 stack (several GB of wheels). The slim install
(~1.1 GB) that worked on the project's 2-core dev machine, whose /usr/local/cuda-13.0/lib (in ld.so.conf) already
supplies cuBLAS / cuDNN 13 but an older NCCL and no cuFile / cuSPARSELt / NVSHMEM:

    pip download --no-deps -d /tmp/w torch==2.15.0 && pip install --no-deps /tmp/w/torch-2.15.0-*.whl
    pip install filelock typing-extensions sympy networkx jinja2 fsspec numpy==2.4.6 safetensors==0.8.0
    pip install --no-deps nvidia-cuda-runtime==13.2.86 nvidia-cuda-cupti==13.2.86 nvidia-cufile==1.17.1.22 \
        nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7

(`import torch` names the next missing library if one is absent.) CPU, one thread, deterministic algorithms, fixed
seed: running the script twice writes byte-identical files.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import sys
from pathlib import Path

PINNED = {"torch": "2.15.0", "numpy": "2.4.6", "safetensors": "0.8.0"}


def check_versions():
    found = {}
    for name in PINNED:
        try:
            found[name] = importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            found[name] = "(not installed)"
    bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k] != v]
    if bad:
        sys.exit("make_train_golden.py: wrong package versions (see the docstring for the venv):\n  "
                 + "\n  ".join(bad))
    return found


VERSIONS = check_versions()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
f64 = torch.float64

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests/fixtures/train"

# ---- the tiny drafter and its row ----
H, N_HEADS, N_KV, HEAD_DIM, F, V, N_LAYERS = 64, 4, 2, 16, 128, 256, 2
TARGET_H, N_TAPS = 32, 3
TAP_W = N_TAPS * TARGET_H  # 96
B, S = 4, 32
THETA, EPS = 10000.0, 1e-6
MASK_ID = 250
DOC = [0] * 20 + [1] * 12  # two documents; position ids restart at 0 in each
LOSS_MASK = [0 if i in (0, 1, 2, 8) else 1 for i in range(S)]  # 8: a masked slot inside a block
ANCHORS = [6, 18, 27]  # 18: slots 2 and 3 fall in the next document and do not count
LAYER_CAUSAL = [True, False]  # layer 0: causal inside the block, full context
LAYER_WINDOW = [0, 3]  # layer 1: bidirectional block, sliding window of 3 (cuts context and block keys)
GAMMA = 4.0  # fixed loss decay w(k) = exp(-(k - 1) / gamma), w(0) = 0
SEED = 15
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
# DFlash2: conv taps, channels per dynamic-kernel group, selector rank, top-k candidates, selector loss weight.
KT, GS, RANK, TOPK, ALPHA = 2, 16, 8, 6, 0.7
G = H // GS
DPACE_ALPHA = 0.5  # draft_dpace_grad: D-PACE position weights (training.md §3) instead of the exp decay
N_STEPS = 10
N_A, NQ = len(ANCHORS), len(ANCHORS) * B


def f32(t):
    """Round to f32 and back: the reference sees exactly the stored values."""
    return t.to(torch.float32).to(f64)


BF16 = False  # set by make(bf16=True): every linear product as `train-drafter --matmul bf16` computes it


def r16(t):
    """f32_to_bf16 of the C++'s f32 value: round to f32, then to bf16 (nearest even), back to f64."""
    return t.to(torch.float32).to(torch.bfloat16).to(f64)


class Bf16Linear(torch.autograd.Function):
    """a @ w.T with both operands rounded to bf16, and each backward product (g @ w, g.T @ a) likewise: PyTorch's
    bf16 autocast products, summed here in f64."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.save_for_backward(a, w)
        return r16(a) @ r16(w).T

    @staticmethod
    def backward(ctx, g):
        a, w = ctx.saved_tensors
        return r16(g) @ r16(w), r16(g).T @ r16(a)


def lin(a, w):
    """The linear product a @ w.T (a [M, K], w [N, K]): f64, or bf16 operands under BF16."""
    return Bf16Linear.apply(a, w) if BF16 else a @ w.T


def param_shapes(d2=False):
    """DraftParams::each order and names, [out, in] matrices."""
    nq, nk = N_HEADS * HEAD_DIM, N_KV * HEAD_DIM
    shapes = [("fc.weight", (H, TAP_W)), ("hidden_norm.weight", (H,))]
    for i in range(N_LAYERS):
        p = f"layers.{i}."
        shapes += [(p + "input_layernorm.weight", (H,)), (p + "self_attn.q_proj.weight", (nq, H)),
                   (p + "self_attn.k_proj.weight", (nk, H)), (p + "self_attn.v_proj.weight", (nk, H)),
                   (p + "self_attn.o_proj.weight", (H, nq)), (p + "self_attn.q_norm.weight", (HEAD_DIM,)),
                   (p + "self_attn.k_norm.weight", (HEAD_DIM,)), (p + "post_attention_layernorm.weight", (H,)),
                   (p + "mlp.gate_up_proj.weight", (2 * F, H)), (p + "mlp.down_proj.weight", (H, F))]
        if d2:
            for c in ("attention_conv", "mlp_conv"):
                shapes += [(p + c + ".base_kernel", (2, KT, H)), (p + c + ".kernel_projection.weight", (2 * KT * G, H))]
    shapes += [("norm.weight", (H,))]
    if d2:
        shapes += [("candidate_selector.hidden_projection.weight", (RANK, H)),
                   ("candidate_selector.predecessor_codebook", (V, RANK)),
                   ("candidate_selector.successor_codebook", (V, RANK))]
    return shapes


def make_inputs(g, d2=False):
    taps = f32(torch.randn(S, TAP_W, generator=g, dtype=f64))
    tokens = torch.randint(0, MASK_ID, (S,), generator=g)
    params = {}
    for name, shape in param_shapes(d2):
        if name.endswith("base_kernel"):  # near the identity init (tap 0 = 1, tap 1 = 0), not at it
            params[name] = f32(torch.cat([1 + 0.1 * torch.randn(2, 1, H, generator=g, dtype=f64),
                                          0.3 * torch.randn(2, KT - 1, H, generator=g, dtype=f64)], dim=1))
        elif name.endswith("codebook"):
            params[name] = f32(0.7 * torch.randn(shape, generator=g, dtype=f64))
        elif len(shape) == 1:  # norms: around 1, not 1, so their gradients matter
            params[name] = f32(1 + 0.1 * torch.randn(shape, generator=g, dtype=f64))
        else:
            params[name] = f32(torch.randn(shape, generator=g, dtype=f64) / math.sqrt(shape[1]))
    embed = f32(0.5 * torch.randn(V, H, generator=g, dtype=f64))
    lm_head = f32(0.3 * torch.randn(V, H, generator=g, dtype=f64))
    labels_all = torch.randint(0, V, (NQ,), generator=g)
    return taps, tokens, params, embed, lm_head, labels_all


def positions():
    pos, prev = [], None
    for d in DOC:
        pos.append(0 if d != prev else pos[-1] + 1)
        prev = d
    return pos


def slot_targets(labels_all):
    """training.md §2.6 / §3: slot k of block j at row index i = a_j + k counts iff k >= 1, i < S, loss_mask[i] and
    i lies in the anchor's document; weight = count * exp(-(k - 1) / gamma); label 0 where it does not count."""
    labels, weight, count = [], [], 0
    for j, a in enumerate(ANCHORS):
        for k in range(B):
            i = a + k
            ok = k >= 1 and i < S and LOSS_MASK[i] == 1 and DOC[i] == DOC[a]
            labels.append(int(labels_all[j * B + k]) if ok else 0)
            weight.append(math.exp(-(k - 1) / GAMMA) if ok else 0.0)
            count += ok
    return labels, f32(torch.tensor(weight, dtype=f64)), float(count)


def visibility(causal, window):
    """training.md §2.4: keys [S context | NQ block]; query (j, k) at row index p = a_j + k sees context key q iff
    q is in a_j's document, q < a_j, and p - q < W when windowed; block key (j, l) iff l <= k when causal and
    |k - l| < W when windowed; nothing else. [NQ, S + NQ] bool"""
    m = torch.zeros(NQ, S + NQ, dtype=torch.bool)
    for j, a in enumerate(ANCHORS):
        for k in range(B):
            r, p = j * B + k, a + k
            for q in range(S):
                m[r, q] = DOC[q] == DOC[a] and q < a and (window == 0 or p - q < window)
            for l in range(B):
                m[r, S + j * B + l] = (not causal or l <= k) and (window == 0 or abs(k - l) < window)
    return m


def spans_of(m):
    """The visible keys of each query as two ranges [lo0, hi0) (context) and [lo1, hi1) (block), the layout
    masked_attention takes; an empty context range is written [a_j, a_j). [NQ, 4] int32"""
    out = []
    for r in range(NQ):
        ranges = []
        for lo_key, hi_key in ((0, S), (S, S + NQ)):
            idx = [q for q in range(lo_key, hi_key) if m[r, q]]
            if idx:
                assert idx == list(range(idx[0], idx[-1] + 1)), f"query {r}: keys not contiguous"
                ranges += [idx[0], idx[-1] + 1]
            else:
                a = ANCHORS[r // B]
                ranges += [a, a]
        out.append(ranges)
    return np.array(out, dtype=np.int32)


# ---- the forward, from the definitions ----

def rmsnorm(x, w):
    """Qwen3 RMSNorm with a plain weight: x / sqrt(mean(x^2) + eps) * w over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos):
    """NeoX RoPE of x [n, heads, hd] at positions pos [n]: each pair (i, i + hd/2) rotated by pos * theta^(-2i/hd)."""
    half = HEAD_DIM // 2
    inv_freq = THETA ** (-torch.arange(0, half, dtype=f64) * 2 / HEAD_DIM)
    ang = pos.to(f64)[:, None] * inv_freq[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(q, k, v, visible):
    """q [NQ, heads, hd], k v [NK, kv_heads, hd], GQA (head h reads kv head h // (heads / kv_heads)),
    softmax(q k^T / sqrt(hd)) over the visible keys only. -> [NQ, heads * hd]"""
    rep = N_HEADS // N_KV
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # [NK, heads, hd]
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(~visible[None], float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
    return out.reshape(q.shape[0], N_HEADS * HEAD_DIM)


def conv(u, base, dyn, side):
    """dflash.md §5.1a over each anchor's B block rows: out[t, c] = sum_{j < KT, j <= t} (base[side, j, c] +
    dyn[t, side, j, c // GS]) u[t - j, c], t the slot inside its block (taps never cross a block).
    u [NQ, H], base [2, KT, H], dyn [NQ, 2 * KT * G] -> [NQ, H]"""
    d = dyn.view(NQ, 2, KT, G).repeat_interleave(GS, dim=3)  # [NQ, 2, KT, H]: each group's value on its channels
    out = []
    for r in range(NQ):
        t = r % B
        out.append(sum((base[side, j] + d[r, side, j]) * u[r - j] for j in range(min(KT, t + 1))))
    return torch.stack(out)


def sandwich(u, P, name, sublayer):
    """DFlash2: conv(u) side 0 -> sublayer -> conv side 1, both with kernels predicted from u."""
    base, dyn = P[name + ".base_kernel"], lin(u, P[name + ".kernel_projection.weight"])
    return conv(sublayer(conv(u, base, dyn, 0)), base, dyn, 1)


def selector_loss(P, h, logits, inp):
    """training.md §6 (speculators PR #1006): per weighted slot, the top-TOPK of its draft logits (the label replaces
    the K-th when absent), scored z[c] + sum_r pred[prev, r] g[r] succ[c, r] with g = hidden_projection h and prev the
    data token before the slot; ALPHA * sum weight * CE(label) / denom. Candidates are chosen on the values, the
    gradient flows through z[c] (unary not detached)."""
    g = lin(h, P["candidate_selector.hidden_projection.weight"])  # [NQ, RANK]
    pred, succ = P["candidate_selector.predecessor_codebook"], P["candidate_selector.successor_codebook"]
    total = torch.zeros((), dtype=f64)
    for r in range(NQ):
        w = inp["weight"][r]
        if w == 0:
            continue
        cand = torch.topk(logits[r].detach(), TOPK).indices.tolist()
        y = int(inp["labels"][r])
        if y not in cand:
            cand[-1] = y
        c = torch.tensor(cand)
        s = logits[r, c] + (pred[inp["prev_ids"][r]] * g[r]) @ succ[c].T
        total = total + w * (torch.logsumexp(s, 0) - s[cand.index(y)])
    return ALPHA * total / inp["denom"]


def forward(P, inp, d2=False):
    """Draft logits [NQ, V] and the loss of one row (DFlash2: unary + selector, and the two parts)."""
    c = rmsnorm(lin(inp["taps"], P["fc.weight"]), P["hidden_norm.weight"])  # [S, H] context features
    x = inp["embed"][inp["block_ids"]]  # [NQ, H] frozen target embedding of [anchor, MASK x (B-1)]
    for i in range(N_LAYERS):
        w = lambda n: P[f"layers.{i}.{n}.weight"]  # noqa: E731
        u = rmsnorm(x, w("input_layernorm"))  # block rows only; the context gets no input norm

        def attn(a, i=i, w=w):
            return attention_sublayer(a, c, w, inp, i)
        x = x + (sandwich(u, P, f"layers.{i}.attention_conv", attn) if d2 else attn(u))

        def mlp(m, w=w):
            gu = lin(m, w("mlp.gate_up_proj"))  # [NQ, 2F]: gate | up
            return lin(torch.nn.functional.silu(gu[:, :F]) * gu[:, F:], w("mlp.down_proj"))
        m = rmsnorm(x, w("post_attention_layernorm"))
        x = x + (sandwich(m, P, f"layers.{i}.mlp_conv", mlp) if d2 else mlp(m))
    h = rmsnorm(x, P["norm.weight"])
    logits = lin(h, inp["lm_head"])  # frozen target head
    nll = torch.logsumexp(logits, -1) - logits.gather(1, inp["labels"][:, None])[:, 0]
    weight = dpace(nll.detach(), inp["weight"]) if inp.get("dpace") else inp["weight"]
    unary = (weight * nll).sum() / inp["denom"]
    if not d2:
        return logits, unary
    sel = selector_loss(P, h, logits, inp)
    return logits, unary + sel, unary, sel


def dpace(nll, mask):
    """training.md §3, D-PACE (arXiv 2605.18810), written from the definition: per block, q_k = exp(-l_k) of the
    detached slot loss, q~_k = (1 - alpha) q_k + alpha on counted slots and 1 elsewhere, P_m = prod_{k <= m} q~_k,
    w_j = mask_j * sum_{m >= j} P_m mask_m. No gradient flows through the weights. [NQ]"""
    w = torch.zeros(NQ, dtype=f64)
    for j in range(N_A):
        P, prod = [], 1.0
        for k in range(B):
            r = j * B + k
            prod = prod * (((1 - DPACE_ALPHA) * math.exp(-nll[r].item()) + DPACE_ALPHA) if mask[r] > 0 else 1.0)
            P.append(prod)
        for k in range(B):
            r = j * B + k
            w[r] = float(mask[r]) * sum(P[m] * float(mask[j * B + m]) for m in range(k, B))
    return w


def attention_sublayer(a, c, w, inp, i):
    """Layer i's attention from its (normed, DFlash2: convolved) block input a [NQ, H] and the context c: the
    output projection of the masked attention [NQ, H]."""
    q = lin(a, w("self_attn.q_proj")).view(NQ, N_HEADS, HEAD_DIM)
    kb = lin(a, w("self_attn.k_proj")).view(NQ, N_KV, HEAD_DIM)
    vb = lin(a, w("self_attn.v_proj")).view(NQ, N_KV, HEAD_DIM)
    kc = lin(c, w("self_attn.k_proj")).view(S, N_KV, HEAD_DIM)
    vc = lin(c, w("self_attn.v_proj")).view(S, N_KV, HEAD_DIM)
    q = rope(rmsnorm(q, w("self_attn.q_norm")), inp["pos_block"])
    kb = rope(rmsnorm(kb, w("self_attn.k_norm")), inp["pos_block"])
    kc = rope(rmsnorm(kc, w("self_attn.k_norm")), inp["pos"])
    att = attention(q, torch.cat([kc, kb]), torch.cat([vc, vb]), inp["visible"][i])
    return lin(att, w("self_attn.o_proj"))


def make(d2, dp=False, bf16=False):
    """One fixture: DFlash (d2 False) or DFlash2; dp: DFlash with D-PACE weights; bf16: DFlash with bf16 products.
    Returns its metadata."""
    global BF16
    BF16 = bf16
    g = torch.Generator().manual_seed(SEED)
    taps, tokens, params, embed, lm_head, labels_all = make_inputs(g, d2)
    pos = positions()
    labels, weight, denom = slot_targets(labels_all)
    if dp:  # the stored weight is the mask; the loss weighs each slot by D-PACE from its own losses
        weight = (weight > 0).to(f64)
    block_ids = [int(tokens[a]) if k == 0 else MASK_ID for a in ANCHORS for k in range(B)]
    # DFlash2's selector predecessor of slot k: the data token at a + k - 1 (the anchor's for k = 1).
    prev_ids = [int(tokens[a + k - 1]) if k >= 1 and a + k - 1 < S else 0 for a in ANCHORS for k in range(B)]
    visible = [visibility(c, w) for c, w in zip(LAYER_CAUSAL, LAYER_WINDOW)]
    inp = dict(taps=taps, embed=embed, lm_head=lm_head, block_ids=torch.tensor(block_ids),
               pos=torch.tensor(pos), pos_block=torch.tensor([pos[a] + k for a in ANCHORS for k in range(B)]),
               visible=visible, labels=torch.tensor(labels), weight=weight, denom=denom,
               prev_ids=torch.tensor(prev_ids), dpace=dp)
    if d2:  # every other counted slot's label inside its top-k (the third candidate), the rest random (injected)
        with torch.no_grad():
            z0 = forward(params, inp, d2)[0]
        counted = [r for r in range(NQ) if weight[r] > 0]
        for n, r in enumerate(counted):
            if n % 2 == 0:
                labels[r] = int(torch.topk(z0[r], 3).indices[2])
        inp["labels"] = torch.tensor(labels)

    # One forward + backward.
    P = {n: t.clone().requires_grad_(True) for n, t in params.items()}
    out_f = forward(P, inp, d2)
    logits, loss = out_f[0], out_f[1]
    loss.backward()
    grads = {n: t.grad.clone() for n, t in P.items()}

    # 10 AdamW steps at a constant lr, loss recorded before each step.
    P = {n: t.clone().requires_grad_(True) for n, t in params.items()}
    opt = torch.optim.AdamW(list(P.values()), foreach=False, **ADAMW)
    losses, step1 = [], None
    for step in range(N_STEPS):
        opt.zero_grad()
        l = forward(P, inp, d2)[1]
        l.backward()
        if step == 0:
            assert l.item() == loss.item() and all(torch.equal(P[n].grad, grads[n]) for n in P)
        losses.append(l.item())
        opt.step()
        if step == 0:
            step1 = {n: t.detach().clone() for n, t in P.items()}

    def a32(t):
        return np.ascontiguousarray(t.detach().to(torch.float32).numpy())

    def i32(v):
        return np.ascontiguousarray(np.array(v, dtype=np.int32))

    used = sorted(set(block_ids))
    out = {
        "taps": a32(taps), "pos": i32(pos), "doc": i32(DOC), "loss_mask": i32(LOSS_MASK), "anchors": i32(ANCHORS),
        "block_ids": i32(block_ids), "labels": i32(labels), "weight": a32(weight),
        "denom": np.array([denom], dtype=np.float64),
        "target.embed_ids": i32(used), "target.embed_rows": a32(embed[used]), "target.lm_head": a32(lm_head),
        "logits": a32(logits), "loss": np.array([loss.item()], dtype=np.float64),
        "adamw.losses": np.array(losses, dtype=np.float64),
    }
    if d2:
        out["prev_ids"] = i32(prev_ids)
        out["loss.unary"] = np.array([out_f[2].item()], dtype=np.float64)
        out["loss.selector"] = np.array([out_f[3].item()], dtype=np.float64)
    for i, m in enumerate(visible):
        out[f"spans.{i}"] = spans_of(m)
    for n in params:
        out[n] = a32(params[n])
        out["grad." + n] = a32(grads[n])
        out["step1." + n] = a32(step1[n])
    meta = {
        "made_by": "scripts/make_train_golden.py",
        "versions": " ".join(f"{k}=={v}" for k, v in VERSIONS.items()),
        "H": H, "n_heads": N_HEADS, "n_kv_heads": N_KV, "head_dim": HEAD_DIM, "F": F, "V": V, "n_layers": N_LAYERS,
        "tap_width": TAP_W, "block_size": B, "S": S, "rope_theta": THETA, "eps": EPS, "mask_token_id": MASK_ID,
        "layer_causal": LAYER_CAUSAL, "layer_window": LAYER_WINDOW, "loss_decay_gamma": GAMMA,
        "adamw": "lr={lr} beta1={b[0]} beta2={b[1]} eps={eps} weight_decay={weight_decay}".format(b=ADAMW["betas"],
                                                                                              **ADAMW),
        "adamw_steps": N_STEPS,
    }
    if dp:
        meta.update({"position_weights": "dpace", "dpace_alpha": DPACE_ALPHA})
    if bf16:
        meta.update({"products": "bf16"})
    if d2:
        meta.update({"method": "dflash2", "conv_kernel_size": KT, "conv_group_size": GS, "selector_rank": RANK,
                     "selector_top_k": TOPK, "selector_loss_alpha": ALPHA})
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / ("draft2_grad.safetensors" if d2 else "draft_dpace_grad.safetensors" if dp
                  else "draft_bf16_grad.safetensors" if bf16 else "draft_grad.safetensors")
    # One metadata key: safetensors writes its metadata map in hash order, so several keys would not give the same
    # bytes twice.
    save_file(out, str(path), metadata={"config": json.dumps(meta, sort_keys=True)})
    path.chmod(0o644)
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes): loss {loss.item():.9f}, "
          f"AdamW losses {losses[0]:.6f} .. {losses[-1]:.6f}")
    return meta


def main():
    meta = make(False)
    make(True)
    make(False, dp=True)
    make(False, bf16=True)
    (OUT / "README.md").write_text(readme(meta))


def readme(meta):
    names = "\n".join(f"| `{n}` | {list(s)} |" for n, s in param_shapes())
    names2 = "\n".join(f"| `{n}` | {list(s)} |" for n, s in param_shapes(True) if "conv" in n or "selector" in n)
    return f"""# Training fixtures (issue 15, training.md §11)

Made by `scripts/make_train_golden.py` ({meta["versions"]}; how to make the venv is in the script's
docstring), run from the repository root:

    <venv>/bin/python scripts/make_train_golden.py

Read by `tests/train/draft_grad_golden_test.cc` (target `train_golden_tests`). Running the script again writes the
same bytes.

## draft_grad.safetensors

The DFlash drafter training step (`train/draft_step`) in float64 PyTorch with autograd, written from the
definitions (training.md §2-§3), not from the C++, and 10 steps of `torch.optim.AdamW`. Inputs are rounded to f32
before the f64 forward, so the stored inputs are exactly what the reference saw; results are stored f32 (losses f64).

Drafter: {N_LAYERS} layers, H {H}, {N_HEADS} query / {N_KV} KV heads x head_dim {HEAD_DIM}, F {F}, V {V},
RMSNorm eps {EPS} (plain weight), NeoX RoPE theta {THETA:g} over the whole head, {N_TAPS} taps of a target hidden
size {TARGET_H} (tap_width {TAP_W}). Layer 0: block keys causal, all of the context; layer 1: block keys
bidirectional, sliding window 3 (a query at row index p sees context keys q with p - q < 3 and block slots l with
|k - l| < 3). Row: S {S} context tokens in two documents (rows 0-19 and 20-31, position ids restarting at 0),
block size B {B}, anchors {ANCHORS}, mask token {MASK_ID}, loss weights exp(-(k - 1) / {GAMMA:g}). The
safetensors metadata key `config` (a JSON object) repeats these numbers.

| tensor | shape, dtype | meaning |
|---|---|---|
| `taps` | [{S}, {TAP_W}] f32 | the target's tap features of the context rows |
| `pos` | [{S}] i32 | position ids (restart per document) |
| `doc` | [{S}] i32 | document id of each row |
| `loss_mask` | [{S}] i32 | 1 on trained tokens (0 at rows 0, 1, 2, 8) |
| `anchors` | [{N_A}] i32 | anchor row indices |
| `block_ids` | [{NQ}] i32 | per block: the anchor's token, then {B - 1} x mask token |
| `spans.0`, `spans.1` | [{NQ}, 4] i32 | per layer, the keys each block query sees: [lo0, hi0) context rows, [lo1, hi1) block rows laid out after the {S} context keys (an empty context range is [a, a)); from the visibility rule of training.md §2.4 |
| `labels` | [{NQ}] i32 | label of each block slot (0 where it does not count) |
| `weight` | [{NQ}] f32 | mask x exp(-(k - 1) / {GAMMA:g}); 0 on slot 0, masked rows and rows past the document |
| `denom` | [1] f64 | the loss denominator: the number of counted slots |
| `target.embed_ids`, `target.embed_rows` | [n] i32, [n, {H}] f32 | the frozen target embedding rows of the ids in `block_ids` |
| `target.lm_head` | [{V}, {H}] f32 | the frozen target lm_head |
| *param* | below | the initial parameters, named and ordered as `DraftParams::each` |
| `logits` | [{NQ}, {V}] f32 | draft logits of every block slot |
| `loss` | [1] f64 | sum_i weight_i (logsumexp(z_i) - z_i[label_i]) / denom |
| `grad.`*param* | as *param* | d loss / d param |
| `adamw.losses` | [{N_STEPS}] f64 | the loss before each of {N_STEPS} `torch.optim.AdamW` steps ({meta["adamw"]}, constant) |
| `step1.`*param* | as *param* | the parameters after the first AdamW step |

Parameters (`mlp.gate_up_proj.weight` is gate_proj rows then up_proj rows):

| param | shape |
|---|---|
{names}

## draft2_grad.safetensors

The same row, drafter and AdamW run as a DFlash2 drafter (training.md §6, dflash.md §5.1): every layer's attention
and MLP sit between two grouped dynamic depthwise convolutions over each block's {B} slots (kernel size {KT},
{GS} channels per dynamic-kernel group, kernels predicted from the sublayer's normed input; base kernels near, not
at, the identity init), and the loss adds {ALPHA} x the candidate-selector CE: per weighted slot, the top-{TOPK}
candidates of its draft logits, scored z[c] + sum_r pred[prev, r] g[r] succ[c, r] (g = hidden_projection of the
final-normed hidden, rank {RANK}; prev = the data token before the slot, `prev_ids`), the label replacing the
{TOPK}-th candidate when absent. Every other counted slot is labelled with the third candidate of the initial
logits (inside the top-{TOPK}); the rest keep random labels (injected). Tensors as above, plus `prev_ids` [{NQ}] i32,
`loss.unary` and `loss.selector` [1] f64 (loss = their sum), and the DFlash2 parameters:

| param | shape |
|---|---|
{names2}

## draft_dpace_grad.safetensors

The DFlash row, drafter and AdamW run of draft_grad with D-PACE position weights (training.md §3, alpha
{DPACE_ALPHA}) instead of the exp decay: `weight` is the mask alone (1 on counted slots), and the loss is
sum_i w_i (logsumexp(z_i) - z_i[label_i]) / denom with, per block, q~_k = (1 - alpha) exp(-l_k) + alpha on counted
slots (1 elsewhere) from the detached slot losses l, P_m = prod_(k <= m) q~_k and w_j = mask_j sum_(m >= j) P_m
mask_m; the weights take no gradient and are made again from the current losses before each AdamW step. Tensors and
parameters as in draft_grad.

## draft_bf16_grad.safetensors

The DFlash row, drafter and AdamW run of draft_grad with every linear product (fc, q / k / v / o, gate_up, down,
the frozen lm_head) as `blockspec train-drafter --matmul bf16` computes it, PyTorch's bf16 autocast: y = bf16(a)
bf16(w)^T in the forward, and in the backward d a = bf16(g) bf16(w), d w = bf16(g)^T bf16(a) (bf16(t): t rounded to
f32, then to bf16 nearest even), summed here in f64 (a custom autograd Function). The attention's own products,
the norms and the loss stay f64. Metadata `products`: `bf16`. Tensors and parameters as in draft_grad.
"""


if __name__ == "__main__":
    main()
