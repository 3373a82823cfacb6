#!/usr/bin/env python3
"""Generate DFlash / DFlash2 drafter fixtures (tests/fixtures/dflash/) from the z-lab reference implementation.

Developers run this by hand; CI only reads the committed outputs. Same venv as scripts/make_golden.py and
scripts/make_quant_golden.py, plus the reference package `dflash` 0.1.0 (z-lab, includes DFlash2) installed
WITHOUT its dependencies (they would replace the pinned torch / transformers):

    ~/.cache/blockspec/venv-golden/bin/pip install compressed-tensors==0.20.1
    ~/.cache/blockspec/venv-golden/bin/pip install --no-deps dflash==0.1.0     # or the wheel file:
    ~/.cache/blockspec/venv-golden/bin/pip install --no-deps dflash-0.1.0-py3-none-any.whl
    ~/.cache/blockspec/venv-golden/bin/python scripts/make_dflash_golden.py

The reference code is imported, never copied: the drafters are `dflash.model.DFlashDraftModel` /
`DFlash2DraftModel` loaded with `from_pretrained` from the fixture directories written here, the context features
come from `extract_context_feature`, the logits from `compute_logits`, the DFlash2 walk from `propose`, the
end-to-end outputs from `dflash_generate`. What this script does by hand is only what `dflash_generate` does not
expose (all 8 block slots, a second block after a forced acceptance of 3), written as the same calls in the same
order as `dflash_generate`. See tests/fixtures/dflash/README.md (written by this script) for every tensor.

CPU, one thread, torch.use_deterministic_algorithms(True), everything seeded: running the script twice produces
byte-identical files.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import sys
import time
from pathlib import Path

PINNED = {"torch": "2.15.0", "transformers": "5.23.0", "safetensors": "0.8.0", "compressed-tensors": "0.20.1",
          "dflash": "0.1.0"}


def check_versions():
    found = {}
    for name in PINNED:
        try:
            found[name] = importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            found[name] = "(not installed)"
    bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k] != v]
    if bad:
        sys.exit("make_dflash_golden.py: wrong package versions (see the docstring for the venv):\n  " + "\n  ".join(bad))
    return found


VERSIONS = check_versions()

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import CompressedTensorsConfig, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

import dflash.model as ref  # noqa: E402
from dflash.model import DFlash2DraftModel, DFlashDraftModel, extract_context_feature  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_quant_golden import ct_args, ct_config, ct_quantize  # noqa: E402
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

# dflash_generate(return_stats=True) times itself with torch.cuda.synchronize(), which raises on a machine without a
# GPU. Timing is not part of the fixtures: replace the timer (the only monkeypatch of the reference).
ref._cuda_time = time.perf_counter

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests/fixtures/dflash"
VOCAB, HIDDEN, N_TARGET = 256, 64, 6
BLOCK = 8
MAX_NEW = 24
PROMPTS = [
    [17, 203, 5, 88, 140, 61, 9, 230, 112, 47, 3, 199, 76, 158, 24, 91, 215, 130, 66, 8],
    [42, 7, 180, 99, 3, 244, 120, 15, 67, 201, 33, 150, 11],
]
# Random init (standard deviations): target embeddings / lm_head / linears; drafter linears / fc / attention biases;
# DFlash2 codebooks / selector hidden_projection / kernel_projection and the conv base-kernel noise around identity.
# Chosen so that the drafted tokens are not one repeated token and the DFlash2 selector and conv change results.
STD = dict(EMBED=0.3, HEAD=0.3, TLIN=0.15, DLIN=0.1, FC=0.06, BIAS=0.05, CODEBOOK=0.2, HPROJ=0.3, KPROJ=0.15, BASE=0.3)
ACCEPT2 = 3  # forced acceptance length of the first block for the ".step2" tensors

# ---------------------------------------------------------------------------------------------
# Target
# ---------------------------------------------------------------------------------------------


def make_target(d: Path):
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=N_TARGET,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
                      max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_bias=False,
                      use_sliding_window=False, bos_token_id=1, eos_token_id=2, dtype="float32",
                      architectures=["Qwen3ForCausalLM"])
    torch.manual_seed(1000)
    model = Qwen3ForCausalLM(cfg).to(torch.float32)
    g = torch.Generator().manual_seed(1000)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(STD["EMBED"] * torch.randn(p.shape, generator=g))
            elif "lm_head" in name:
                p.copy_(STD["HEAD"] * torch.randn(p.shape, generator=g))
            else:
                p.copy_(STD["TLIN"] * torch.randn(p.shape, generator=g))
    model.save_pretrained(str(d), safe_serialization=True)
    target = Qwen3ForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager")
    target.eval()
    for k, v in target.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k
    return target


# ---------------------------------------------------------------------------------------------
# Drafters: config.json written by hand (published drafters are not save_pretrained output of this class)
# ---------------------------------------------------------------------------------------------

DFLASH_CFG = {  # DFlash1, transformers-4 layout: top-level rope_theta and block_size, no target_layer_ids
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "attention_bias": True,
    "attention_dropout": 0.0,
    "block_size": BLOCK,
    "dflash_config": {"mask_token_id": 250},
    "head_dim": 24,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": 96,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "max_position_embeddings": 256,
    "max_window_layers": 0,
    "num_attention_heads": 4,
    "num_hidden_layers": 3,
    "num_key_value_heads": 1,
    "num_target_layers": N_TARGET,
    "rms_norm_eps": 1e-6,
    "rope_scaling": None,
    "rope_theta": 50000.0,
    "sliding_window": 6,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "use_sliding_window": True,
    "vocab_size": VOCAB,
}

DFLASH2_CFG = {  # DFlash2, transformers-5 layout: rope_parameters only, everything DFlash in dflash_config
    "architectures": ["DFlash2DraftModel"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "dflash_config": {
        "block_size": BLOCK,
        "target_layer_ids": [0, 2, 5],
        "mask_token_id": 251,
        "conv_kernel_size": 2,
        "conv_group_size": 16,
        "selector_rank": 8,
        "selector_top_k": 4,
        "output_multiplier": 0.8,
        "final_logit_softcapping": 3.0,
        "input_embedding_scale": 1.25,
    },
    "dtype": "bfloat16",
    "head_dim": 32,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": 96,
    "is_causal": False,
    "layer_types": ["sliding_attention", "sliding_attention"],
    "max_position_embeddings": 256,
    "max_window_layers": 0,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    # The reference evaluates build_target_layer_ids(config.num_target_layers, ...) eagerly even when
    # dflash_config.target_layer_ids is given: without this key DFlashDraftModel.__init__ raises AttributeError.
    "num_target_layers": N_TARGET,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0},
    "sliding_window": 6,
    "tie_word_embeddings": False,
    "transformers_version": VERSIONS["transformers"],
    "use_cache": True,
    "use_sliding_window": True,
    "vocab_size": VOCAB,
}


def drafter_tensors(cfg, seed):
    """Random weights with the names of dflash.md §1.2 (no "model." prefix), f32."""
    dc = cfg["dflash_config"]
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, nkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    T = len(dc.get("target_layer_ids", [1, 2, 3]))
    g = torch.Generator().manual_seed(seed)

    def lin(*shape, std=None):
        return (STD["DLIN"] if std is None else std) * torch.randn(shape, generator=g)

    def norm(n):
        return 0.8 + 0.4 * torch.rand(n, generator=g)

    t = {"fc.weight": lin(H, T * H, std=STD["FC"]), "hidden_norm.weight": norm(H), "norm.weight": norm(H)}
    dflash2 = "conv_kernel_size" in dc
    for i in range(L):
        p = f"layers.{i}."
        t[p + "input_layernorm.weight"] = norm(H)
        t[p + "post_attention_layernorm.weight"] = norm(H)
        t[p + "self_attn.q_proj.weight"] = lin(nh * d, H)
        t[p + "self_attn.k_proj.weight"] = lin(nkv * d, H)
        t[p + "self_attn.v_proj.weight"] = lin(nkv * d, H)
        t[p + "self_attn.o_proj.weight"] = lin(H, nh * d)
        if cfg["attention_bias"]:
            t[p + "self_attn.q_proj.bias"] = lin(nh * d, std=STD["BIAS"])
            t[p + "self_attn.k_proj.bias"] = lin(nkv * d, std=STD["BIAS"])
            t[p + "self_attn.v_proj.bias"] = lin(nkv * d, std=STD["BIAS"])
            t[p + "self_attn.o_proj.bias"] = lin(H, std=STD["BIAS"])
        t[p + "self_attn.q_norm.weight"] = norm(d)
        t[p + "self_attn.k_norm.weight"] = norm(d)
        t[p + "mlp.gate_proj.weight"] = lin(F, H)
        t[p + "mlp.up_proj.weight"] = lin(F, H)
        t[p + "mlp.down_proj.weight"] = lin(H, F)
        if dflash2:
            kt, G = dc["conv_kernel_size"], H // dc["conv_group_size"]
            for conv in ("attention_conv", "mlp_conv"):
                # Identity is base[:, 0] = 1, base[:, 1:] = 0, projection 0; move well away from it.
                base = STD["BASE"] * torch.randn(2, kt, H, generator=g)
                base[:, 0] += 1.0
                t[p + conv + ".base_kernel"] = base
                t[p + conv + ".kernel_projection.weight"] = lin(2 * kt * G, H, std=STD["KPROJ"])
    if dflash2:
        r = dc["selector_rank"]
        t["candidate_selector.predecessor_codebook"] = STD["CODEBOOK"] * torch.randn(cfg["vocab_size"], r, generator=g)
        t["candidate_selector.successor_codebook"] = STD["CODEBOOK"] * torch.randn(cfg["vocab_size"], r, generator=g)
        t["candidate_selector.hidden_projection.weight"] = lin(r, H, std=STD["HPROJ"])
    return {k: v.contiguous() for k, v in t.items()}


def write_drafter(d: Path, cfg, tensors):
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})


def load_drafter(cls, d: Path, expect):
    """from_pretrained (the reference's loader, incl. DFlash2's key_mapping for the bare codebook names), then check
    that every parameter came from the file with the expected f32 value."""
    model, info = cls.from_pretrained(str(d), dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    sd = model.state_dict()
    mapped = {k + ".weight" if k.endswith("_codebook") else k: v for k, v in expect.items()}
    assert set(sd) == set(mapped), (set(sd) ^ set(mapped))
    for k, v in mapped.items():
        assert sd[k].dtype == torch.float32 and torch.equal(sd[k], v.float()), k
    model.eval()
    return model


# ---------------------------------------------------------------------------------------------
# Reference runs
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def target_greedy(target, ids, n):
    out = target.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                          pad_token_id=0, eos_token_id=None)
    return out[0, len(ids):].tolist()


def scale_of(model):
    return float(ref._draft_value(model.config, "input_embedding_scale", 1.0))


@torch.inference_mode()
def draft_block(model, target, target_hidden, anchor, start, position_ids, cache, D, g, prefix):
    """One drafter call exactly as in dflash_generate (block of BLOCK at `start`), but keeping all slots."""
    block_ids = torch.full((1, BLOCK), model.mask_token_id, dtype=torch.long)
    block_ids[0, 0] = anchor
    noise = ref._raw_input_embeddings(target, block_ids, scale_of(model))
    hidden_all = model(target_hidden=target_hidden, noise_embedding=noise,
                       position_ids=position_ids[:, start - target_hidden.shape[1]: start + BLOCK],
                       past_key_values=cache, use_cache=True)
    ref._crop_to(cache, start)
    assert cache.get_seq_length() == start
    draft_hidden = hidden_all[:, 1 - BLOCK:, :]
    head = ref._output_head(target)
    logits = model.compute_logits(draft_hidden, head)
    g[prefix + ".hidden"] = hidden_all[0].float().contiguous()
    g[prefix + ".logits"] = logits[0].float().contiguous()
    if isinstance(model, DFlash2DraftModel):
        tokens, cands, _ = model.propose(draft_hidden, block_ids[:, 0], head, 0.0)
        # Sorted candidate sets and the walk's selector scores, recomputed as CandidateSelector.select does.
        sel = model.candidate_selector
        unary, cand = torch.topk(logits, sel.top_k, dim=-1, sorted=False)
        assert torch.equal(cand, cands)
        proj = sel.hidden_projection(draft_hidden)
        prev = block_ids[:, 0]
        cs, ss = [], []
        for pos in range(BLOCK - 1):
            scores = unary[:, pos] + torch.einsum("br,bkr->bk", sel.predecessor_codebook(prev) * proj[:, pos],
                                                  sel.successor_codebook(cand[:, pos]))
            idx = torch.argmax(scores, dim=-1)
            nxt = cand[:, pos].gather(-1, idx[:, None])[:, 0]
            assert nxt.item() == tokens[0, pos].item()
            c, u, s = cand[0, pos].tolist(), unary[0, pos].tolist(), scores[0].tolist()
            order = sorted(range(len(c)), key=lambda j: (-u[j], c[j]))
            cs.append([c[j] for j in order])
            ss.append([s[j] for j in order])
            prev = nxt
        g[prefix + ".cand_sorted"] = torch.tensor(cs, dtype=torch.int32)
        g[prefix + ".scores_sorted"] = torch.tensor(ss, dtype=torch.float32)
        # The walk visibly departs from plain argmax on at least some slots of some run (checked in main()).
        D["walk_differs"] = D.get("walk_differs", 0) + int((tokens[0] != logits[0].argmax(-1)).sum())
    else:
        tokens = torch.argmax(logits, dim=-1)
    g[prefix + ".tokens"] = tokens[0].to(torch.int32).contiguous()
    return tokens[0]


@torch.inference_mode()
def run_drafter(name, model, target, g, stats):
    for i, ids in enumerate(PROMPTS):
        P = len(ids)
        p = f"{name}.p{i}"
        input_ids = torch.tensor([ids])
        position_ids = torch.arange(P + MAX_NEW + 1).unsqueeze(0)
        cache_t = ref._make_cache(target.config)
        cache_d = ref._make_cache(model.config)
        # Prefill exactly as dflash_generate.
        out = target(input_ids, position_ids=position_ids[:, :P], past_key_values=cache_t, use_cache=True,
                     logits_to_keep=1, output_hidden_states=True)
        anchor = int(ref.sample(out.logits, 0.0)[0, -1])
        feats = extract_context_feature(out.hidden_states, model.target_layer_ids)
        ref._crop_to(cache_t, P)
        g[p + ".feats"] = feats[0].float().contiguous()
        g[p + ".anchor"] = torch.tensor([anchor], dtype=torch.int32)
        greedy = g[f"target.p{i}.greedy"].tolist()
        assert anchor == greedy[0]
        drafted = draft_block(model, target, feats, anchor, P, position_ids, cache_d, stats, g, p)

        # Second step: the target verifies [anchor, greedy1..3, drafted4..7]; greedy acceptance is then exactly 3.
        verify = [anchor] + greedy[1:1 + ACCEPT2] + drafted[ACCEPT2:].tolist()
        if verify[ACCEPT2 + 1] == greedy[ACCEPT2 + 1]:
            verify[ACCEPT2 + 1] = (verify[ACCEPT2 + 1] + 1) % VOCAB
        vids = torch.tensor([verify])
        out = target(vids, position_ids=position_ids[:, P:P + BLOCK], past_key_values=cache_t, use_cache=True,
                     output_hidden_states=True)
        posterior = torch.argmax(out.logits, dim=-1)
        acc = (vids[:, 1:] == posterior[:, :-1]).cumprod(dim=1).sum(dim=1)[0].item()
        assert acc == ACCEPT2, acc
        bonus = int(posterior[0, acc])
        assert bonus == greedy[ACCEPT2 + 1]
        start = P + acc + 1
        ref._crop_to(cache_t, start)
        feats2 = extract_context_feature(out.hidden_states, model.target_layer_ids)[:, :acc + 1, :]
        g[p + ".step2.verify_ids"] = torch.tensor(verify, dtype=torch.int32)
        g[p + ".step2.feats"] = feats2[0].float().contiguous()
        g[p + ".step2.anchor"] = torch.tensor([bonus], dtype=torch.int32)
        draft_block(model, target, feats2, bonus, start, position_ids, cache_d, stats, g, p + ".step2")

        # End to end with the reference loop; record the drafter's outputs to tie step 1 to it.
        calls = []
        h = model.register_forward_hook(lambda _m, _a, o: calls.append(o.detach().clone()))
        res = ref.dflash_generate(model, target, input_ids, max_new_tokens=MAX_NEW, stop_token_ids=None,
                                  temperature=0.0, return_stats=True)
        h.remove()
        assert torch.equal(calls[0][0], g[p + ".hidden"]), "manual step 1 != dflash_generate's first drafter call"
        spec = res.output_ids[0]
        assert spec.shape[0] == P + MAX_NEW and spec[:P].tolist() == ids
        assert spec[P:].tolist() == greedy, "speculative output differs from target greedy"
        g[p + ".spec_output"] = spec.to(torch.int32).contiguous()
        g[p + ".acceptance_lengths"] = torch.tensor(res.acceptance_lengths, dtype=torch.int32)
        stats[p] = res.acceptance_lengths


def quantize_w8(tensors):
    """fc and every *_proj: compressed-tensors pack-quantized int8 symmetric per channel (W8A16, scales bf16), from
    the bf16-rounded weights. Returns (stored tensors, reference tensors with the exact f32 dequantization)."""
    args = ct_args(8, "channel")
    stored, refw = {}, {}
    for k, v in tensors.items():
        mod = k[:-len(".weight")]
        if k.endswith(".weight") and (mod == "fc" or mod.endswith("_proj")):
            sd, deq = ct_quantize(v, args, PackedQuantizationCompressor)
            for s, t in sd.items():
                stored[f"{mod}.{s}"] = t.contiguous()
            refw[k] = deq.contiguous()
        else:
            stored[k] = v
            refw[k] = v
    qcfg = ct_config({"group_0": (["Linear"], args, None, None)}, "pack-quantized", [])
    return stored, refw, qcfg


README = """# DFlash / DFlash2 drafter fixtures

Generated by `scripts/make_dflash_golden.py` from the z-lab reference package `dflash` 0.1.0 (imported, not copied;
install it with `pip install --no-deps`, see the script). Developers run it by hand; CI only reads these files;
regenerating is byte-for-byte reproducible. Versions: {versions}. CPU, one thread, deterministic algorithms.

## Models

| dir | what |
|---|---|
| `target/` | Qwen3ForCausalLM, `save_pretrained` (transformers-5 config layout), f32: vocab 256, hidden 64, intermediate 128, 6 layers, 4 heads / 2 KV heads, head_dim 16, untied lm_head, rms_norm_eps 1e-6, rope_theta 10000. Eager attention. Random (std): embeddings {s[EMBED]}, lm_head {s[HEAD]}, linears {s[TLIN]}; norms U(0.8, 1.2). |
| `dflash/` | DFlash1 `DFlashDraftModel`, f32, names of dflash.md §1.2 (no `model.` prefix, no embed/lm_head). Hand-written transformers-4 style config: top-level `rope_theta` 50000 (no `rope_parameters`), top-level `block_size` 8, `num_target_layers` 6 and **no** `target_layer_ids` (default rule → [1, 2, 3]), `dflash_config {{mask_token_id: 250}}`, 3 layers, hidden 64, intermediate 96, 4 heads / 1 KV head, head_dim 24, attention_bias true, layer_types [sliding, full, sliding], sliding_window 6, no `is_causal` (sliding layers causal, the full layer bidirectional). |
| `dflash2/` | DFlash2 `DFlash2DraftModel`, **bf16** safetensors, transformers-5 config (`rope_parameters` θ 20000 only): 2 layers, hidden 64, intermediate 96, 2 heads / 2 KV heads, head_dim 32, no bias, both layers sliding (W 6), `is_causal: false`, `dflash_config {{block_size 8, target_layer_ids [0, 2, 5], mask_token_id 251, conv_kernel_size 2, conv_group_size 16, selector_rank 8, selector_top_k 4, output_multiplier 0.8, final_logit_softcapping 3.0, input_embedding_scale 1.25}}`. Codebooks stored under the bare names `candidate_selector.{{predecessor,successor}}_codebook` (no `.weight`); the reference's `DFlash2DraftModel.from_pretrained` key_mapping loads them (checked: nothing missing/unexpected, values equal). Random (std): conv base kernels = identity + {s[BASE]}, kernel projections {s[KPROJ]}, codebooks {s[CODEBOOK]}, hidden_projection {s[HPROJ]}. The reference runs in f32 on the bf16 values (from_pretrained dtype=float32). |
| `dflash-w8/` | the `dflash/` weights with `fc` and every `*_proj` as compressed-tensors **pack-quantized int8 symmetric per channel** (W8A16: `weight_packed` I32 [N, K/4], `weight_shape` I64 [2], `weight_scale` bf16 [N, 1]; quantized from the bf16-rounded weights with compressed_tensors' calculate_qparams + PackedQuantizationCompressor, as scripts/make_quant_golden.py). `quantization_config` targets the class `"Linear"`, ignore []. Norms and the four attention biases stay f32 and dense. Reference = the `dflash/` model with the exact f32 dequantization (code × scale) of those weights. Cross-checked: transformers' own loading of this directory (`CompressedTensorsConfig(dequantize=True)`) gives exactly that reference rounded to bf16 (the library decompresses to bf16); the goldens use the unrounded f32 product, which is what blockspec's quantized loader serves. `fc` is an `nn.Linear`, so the `"Linear"` class target quantizes it in compressed-tensors/transformers (22 modules). |

Drafter random init (std): linears {s[DLIN]}, fc {s[FC]}, attention biases {s[BIAS]}; norms U(0.8, 1.2).

## golden.safetensors

Prompts: `p0.input_ids` (I32 [20]) and `p1.input_ids` (I32 [13]). `target.p{{i}}.greedy` (I32 [24]): the target's plain
greedy continuation (HF `generate`, no EOS). For every drafter D in `dflash`, `dflash2`, `dflash-w8` and prompt i
(P = prompt length, T = 3 taps, so feats are [., 192]):

| tensor | dtype, shape | meaning |
|---|---|---|
| `D.p{{i}}.feats` | F32 [P, 192] | `extract_context_feature(hidden_states, target_layer_ids)` of the target prefill (offset 1: tap t = HF hidden_states[t+1]) |
| `D.p{{i}}.anchor` | I32 [1] | target greedy token after the prompt (= `target.p{{i}}.greedy[0]`), block slot 0 |
| `D.p{{i}}.hidden` | F32 [8, 64] | drafter forward output (final-normed) for all 8 block slots `[anchor, MASK×7]` at positions P..P+7, context = feats at 0..P-1, fresh draft DynamicCache (slot 0 included; dflash_generate drops it) |
| `D.p{{i}}.logits` | F32 [7, 256] | `compute_logits(hidden[1:], target.lm_head)` (× output_multiplier, softcap) |
| `D.p{{i}}.tokens` | I32 [7] | drafted tokens: DFlash1 argmax of logits; DFlash2 the selector's greedy walk `propose(..., temperature=0)` |
| `dflash2.p{{i}}.cand_sorted` | I32 [7, 4] | top-4 candidate ids of each slot sorted by descending logit (ties: lower id) |
| `dflash2.p{{i}}.scores_sorted` | F32 [7, 4] | selector score S_t(prev, c) = U_t(c) + Σ_r pred[prev,r]·g_t[r]·succ[c,r] of those candidates, prev = anchor then the walk's previous token |
| `D.p{{i}}.step2.verify_ids` | I32 [8] | second step: the target verifies `[anchor, greedy[1..3], tokens[3..6]]` (if tokens[3] == greedy[4] it is replaced by (tokens[3]+1)%256) → greedy acceptance exactly 3, bonus = greedy[4] |
| `D.p{{i}}.step2.feats` | F32 [4, 192] | features of the first 4 verified rows (positions P..P+3) |
| `D.p{{i}}.step2.anchor` | I32 [1] | the bonus token (position P+4) |
| `D.p{{i}}.step2.hidden` / `.logits` / `.tokens` (/ `.cand_sorted`, `.scores_sorted` for dflash2) | as above | the block at P+4..P+11 with the SAME draft cache as step 1 (context K/V of 0..P-1 kept, block K/V cropped off after step 1, crop to P+4 after this call) |
| `D.p{{i}}.spec_output` | I32 [P+24] | `dflash_generate(model, target, ids, max_new_tokens=24, stop_token_ids=None, temperature=0, return_stats=True).output_ids` (asserted = prompt + target greedy) |
| `D.p{{i}}.acceptance_lengths` | I32 [steps] | its `acceptance_lengths` (bonus-inclusive tokens produced per step) |

Checked by the script: step 1 `hidden` equals (bit for bit) the first drafter call inside `dflash_generate`; the
DFlash2 walk recomputed from the codebooks gives `propose`'s tokens; the spec output equals target greedy.

Acceptance lengths of the random drafters (bonus-inclusive; 1 = nothing accepted): {acc}

Smallest decision margins over all blocks (for test tolerances): {margins}.

## Edge cases worth knowing (reference behaviour)

- **W = 6 < block 8.** The reference masks by `_attention_mask`: sliding layers keep `pq - pk < W`, and for
  non-causal sliding layers ALSO `pk - pq < W`, on block keys too. So in DFlash2 slot 0 does not see slots 6, 7 and
  in the DFlash1 causal sliding layers slots 6 and 7 see no context at all (only block slots ≥ i-5). The window is
  NOT "trivially satisfied" inside the block when W < B.
- **Draft cache for sliding layers** is a transformers `DynamicSlidingWindowLayer` (DynamicCache(config=draft
  config) + `activate_past_recording`); after `crop` it keeps only the last W-1 context K/V. The mask is built on
  positions relative to the returned keys, which are contiguous, so this equals the absolute-position rule.
- **Tap 5 = last target layer (dflash2).** `extract_context_feature` takes HF `hidden_states[6]`, which for
  Qwen3ForCausalLM is the output AFTER the final `model.norm` (HF replaces the last entry with the normed state),
  not the residual after layer 5. The reference feeds that post-norm state to fc; the fixtures keep it.
- The reference computes the default `build_target_layer_ids(config.num_target_layers, L)` eagerly (it is the
  default argument of `_draft_value`), so a config with `dflash_config.target_layer_ids` but no `num_target_layers`
  fails to load with AttributeError; `dflash2/config.json` therefore also has `num_target_layers: 6` (unused).
- The DFlash1 config has only top-level `rope_theta` (transformers 5 converts it to rope_parameters on load; the
  drafter's RoPE uses 50000, not the target's 10000).
- `dflash_generate(return_stats=True)` calls `torch.cuda.synchronize()`; on CPU the script replaces
  `dflash.model._cuda_time` by `time.perf_counter` (the only patch of the reference).
"""


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(OUT), help="output directory (default: %(default)s)")
    OUT = Path(ap.parse_args().out).resolve()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    target = make_target(OUT / "target")
    g = {}
    for i, ids in enumerate(PROMPTS):
        g[f"p{i}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
        greedy = target_greedy(target, ids, MAX_NEW)
        assert len(set(greedy)) > 3, f"target greedy output is degenerate: {greedy}"
        g[f"target.p{i}.greedy"] = torch.tensor(greedy, dtype=torch.int32)

    # Last-layer tap: HF hidden_states[N] is the post-final-norm state.
    with torch.inference_mode():
        seen = []
        h = target.model.layers[-1].register_forward_hook(
            lambda _m, _a, out: seen.append((out[0] if isinstance(out, tuple) else out).clone()))
        o = target(torch.tensor([PROMPTS[0]]), output_hidden_states=True)
        h.remove()
        assert len(o.hidden_states) == N_TARGET + 1
        assert torch.equal(o.hidden_states[-1], target.model.norm(seen[0])), "hidden_states[N] is not post-norm"
        assert not torch.allclose(o.hidden_states[-1], seen[0])

    stats = {}
    # DFlash1
    t1 = drafter_tensors(DFLASH_CFG, seed=2000)
    write_drafter(OUT / "dflash", DFLASH_CFG, t1)
    m1 = load_drafter(DFlashDraftModel, OUT / "dflash", t1)
    assert m1.target_layer_ids == [1, 2, 3] and m1.block_size == BLOCK and m1.mask_token_id == 250
    assert torch.allclose(m1.rotary_emb.inv_freq, 1.0 / 50000.0 ** (torch.arange(0, 24, 2).float() / 24))
    assert [l.self_attn.is_causal for l in m1.layers] == [True, False, True]
    assert [l.self_attn.sliding_window for l in m1.layers] == [6, None, 6]
    run_drafter("dflash", m1, target, g, stats)

    # DFlash2 (bf16 storage, f32 compute)
    # Seed 3024: the best of seeds 3000..3059 for the smallest gap between consecutive top-5 logits (candidate set
    # and order) and between the two best walk scores; the softcap at 3 squeezes the top logits together.
    t2 = {k: v.to(torch.bfloat16).contiguous() for k, v in drafter_tensors(DFLASH2_CFG, seed=3024).items()}
    write_drafter(OUT / "dflash2", DFLASH2_CFG, t2)
    m2 = load_drafter(DFlash2DraftModel, OUT / "dflash2", t2)
    assert m2.target_layer_ids == [0, 2, 5] and m2.block_size == BLOCK and m2.mask_token_id == 251
    assert torch.allclose(m2.rotary_emb.inv_freq, 1.0 / 20000.0 ** (torch.arange(0, 32, 2).float() / 32))
    assert [l.self_attn.is_causal for l in m2.layers] == [False, False]
    run_drafter("dflash2", m2, target, g, stats)
    assert stats["walk_differs"] > 0, "the DFlash2 selector never changed a token vs plain argmax"

    # DFlash1 W8A16
    stored, refw, qcfg = quantize_w8(t1)
    cfg_w8 = dict(DFLASH_CFG, quantization_config=qcfg)
    write_drafter(OUT / "dflash-w8", cfg_w8, stored)
    # Cross-check the stored checkpoint through transformers' own compressed-tensors loading (dequantize=True): it
    # gives the exact reference rounded to bf16 (the library decompresses to bf16), everything else unchanged.
    hf = DFlashDraftModel.from_pretrained(str(OUT / "dflash-w8"), dtype=torch.float32,
                                          quantization_config=CompressedTensorsConfig(dequantize=True)).state_dict()
    assert set(hf) == set(refw)
    for k, v in refw.items():
        assert torch.equal(hf[k], v if k in stored else v.to(torch.bfloat16).float()), k  # k in stored: dense
    m3 = DFlashDraftModel.from_pretrained(str(OUT / "dflash"), dtype=torch.float32)
    m3.load_state_dict(refw, strict=True)
    m3.eval()
    run_drafter("dflash-w8", m3, target, g, stats)

    save_file(g, str(OUT / "golden.safetensors"), metadata={"n_prompts": str(len(PROMPTS))})
    back = load_file(str(OUT / "golden.safetensors"))
    assert set(back) == set(g)
    # Decision margins, for choosing test tolerances: DFlash1 top-1 vs top-2 logit; DFlash2 smallest gap between
    # consecutive logits among the top 5 (candidate set and its order) and top-1 vs top-2 walk score.
    margins = []
    for D in ("dflash", "dflash2", "dflash-w8"):
        lg = torch.stack([g[k] for k in g if k.startswith(D + ".p") and k.endswith(".logits")])
        top = lg.topk(5, -1).values
        if D == "dflash2":
            sc = torch.stack([g[k] for k in g if k.startswith(D + ".p") and k.endswith(".scores_sorted")]).topk(2, -1).values
            margins.append(f"`{D}`: top-5 logit gaps >= {(top[..., :-1] - top[..., 1:]).min():.4g}, "
                           f"walk score top-1 - top-2 >= {(sc[..., 0] - sc[..., 1]).min():.4g}")
        else:
            margins.append(f"`{D}`: logit top-1 - top-2 >= {(top[..., 0] - top[..., 1]).min():.4g}")
    acc = "; ".join(f"`{k}` {v}" for k, v in stats.items() if k != "walk_differs")
    versions = ", ".join(f"{k} {v}" for k, v in VERSIONS.items())
    (OUT / "README.md").write_text(README.format(versions=versions, acc=acc, s=STD, margins="; ".join(margins)))
    total = 0
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            total += f.stat().st_size
            print(f"{f.relative_to(OUT)}: {f.stat().st_size}")
    print(f"total {total} bytes; acceptance {stats}")


if __name__ == "__main__":
    main()
