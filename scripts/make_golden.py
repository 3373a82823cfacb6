#!/usr/bin/env python3
"""Generate golden reference fixtures (tests/fixtures/golden/) from HF transformers.

Developers run this by hand when the fixtures need regenerating. CI never runs it: the C++ tests
only read the committed outputs.

Tiny dense models with random weights (Qwen3, Qwen2, Llama; f32 and bf16) are built, saved with
`save_pretrained(dir, safe_serialization=True)`, and run on CPU with HF transformers to record
prefill logits and a 16-step greedy KV-cache decode. See tests/fixtures/golden/README.md (written by
this script) for the models and the meaning of every tensor.

Environment (the versions are pinned and checked at start so regenerating is reproducible):

    python3 -m venv ~/.cache/blockspec/venv-golden
    ~/.cache/blockspec/venv-golden/bin/pip install torch==2.15.0 transformers==5.23.0 \
        tokenizers==0.23.3 safetensors==0.8.0 numpy
    ~/.cache/blockspec/venv-golden/bin/python scripts/make_golden.py

Options: --out DIR (default: <repo>/tests/fixtures/golden), --only NAME[,NAME...].
Everything is seeded; CPU, one thread, torch.use_deterministic_algorithms(True), eager attention.
Running the script twice produces byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

PINNED = {
    "torch": "2.15.0",
    "transformers": "5.23.0",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
}


def check_versions() -> dict[str, str]:
    import safetensors
    import tokenizers
    import torch
    import transformers

    found = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
    }
    bad = []
    for name, want in PINNED.items():
        have = found[name].split("+")[0]  # torch reports e.g. 2.15.0+cu132; the local tag doesn't matter on CPU
        if have != want:
            bad.append(f"{name}: need {want}, found {found[name]}")
    if bad:
        sys.exit("make_golden.py: wrong package versions (see the docstring for the venv):\n  " + "\n  ".join(bad))
    return {k: v.split("+")[0] for k, v in found.items()}


VERSIONS = check_versions()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402
from tokenizers import processors, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config  # noqa: E402
from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent.parent / "data" / "text" / "tinyshakespeare.txt"

# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------

# The pre-tokenizer regex of Qwen2/Qwen2.5/Qwen3 tokenizer.json.
QWEN_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
N_REGULAR = 509  # 256 byte tokens + 253 merges (vocab 512 keeps the logits fixtures small)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # appended after the regular vocab: ids 1021, 1022, 1023


def build_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=N_REGULAR,
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train([str(CORPUS)], trainer)
    assert tok.get_vocab_size(with_added_tokens=False) == N_REGULAR, tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    assert [tok.token_to_id(s) for s in SPECIALS] == [N_REGULAR, N_REGULAR + 1, N_REGULAR + 2]
    # Round-trip smoke test.
    text = "ROMEO:\nWhat's in a name?  That which we call a rose 123 \u00e9t\u00e9<|im_end|>"
    enc = tok.encode(text)
    assert tok.decode(enc.ids, skip_special_tokens=False) == text, tok.decode(enc.ids, skip_special_tokens=False)
    return tok


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

EOT, IM_START, IM_END = (N_REGULAR, N_REGULAR + 1, N_REGULAR + 2)
VOCAB = N_REGULAR + len(SPECIALS)

# (name, family, dtype, hidden, layers, q heads, kv heads, head_dim, intermediate, tied, rms eps,
#  rope_parameters, eos form, seed)
SPECS = [
    dict(name="qwen3-tiny-f32", family="qwen3", dtype="float32", hidden=64, layers=3, heads=4, kv_heads=2,
         head_dim=32, inter=160, tie=True, eps=1e-6,
         rope={"rope_type": "default", "rope_theta": 1000000.0}, eos="list"),
    dict(name="qwen3-tiny-bf16", family="qwen3", dtype="bfloat16", hidden=64, layers=3, heads=4, kv_heads=2,
         head_dim=32, inter=160, tie=False, eps=1e-6,
         rope={"rope_type": "default", "rope_theta": 1000000.0}, eos="int"),
    dict(name="qwen2-tiny-f32", family="qwen2", dtype="float32", hidden=64, layers=2, heads=4, kv_heads=2,
         head_dim=16, inter=128, tie=False, eps=1e-6,
         rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128},
         eos="int"),
    dict(name="qwen2-tiny-bf16", family="qwen2", dtype="bfloat16", hidden=64, layers=2, heads=4, kv_heads=2,
         head_dim=16, inter=128, tie=True, eps=1e-6,
         rope={"rope_type": "default", "rope_theta": 1000000.0}, eos="list"),
    dict(name="llama-tiny-f32", family="llama", dtype="float32", hidden=64, layers=2, heads=8, kv_heads=2,
         head_dim=8, inter=128, tie=False, eps=1e-5,
         # theta 1000 (not Llama 3's 500000) so that with head_dim 8 the wavelengths 2*pi*theta^(k/4) =
         # 6.3, 35, 199, 1117 hit all three llama3 branches: kept (< 64/4), smoothed (16..64), scaled (> 64).
         rope={"rope_type": "llama3", "rope_theta": 1000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
         eos="int"),
    dict(name="llama-tiny-linear-f32", family="llama", dtype="float32", hidden=64, layers=2, heads=4, kv_heads=4,
         head_dim=16, inter=128, tie=True, eps=1e-5,
         rope={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, eos="int"),
    dict(name="llama-tiny-bf16", family="llama", dtype="bfloat16", hidden=64, layers=2, heads=4, kv_heads=1,
         head_dim=16, inter=128, tie=False, eps=1e-5,
         rope={"rope_type": "default", "rope_theta": 10000.0}, eos="int"),
]
MAX_POS = 512
PROMPT_LENS = [1, 7, 19, 40]
N_DECODE = 16
BASE_SEED = 20240611

# Init scales: large enough that logits are far from flat (logit std ~ 2.4) and greedy decode varies.
STD_LINEAR = 0.2  # lets the layers dominate the residual stream (tied models otherwise just repeat the input token)
STD_BIAS = 0.1
STD_EMBED = 0.3  # embed_tokens and lm_head
NORM_LO, NORM_HI = 0.8, 1.2  # RMSNorm weights ~ U(0.8, 1.2), including q_norm/k_norm
# Prompts are resampled until every greedy choice (prefill argmax and all 16 decode argmaxes) wins
# by at least this logit margin over the runner-up, so a correct engine with small numeric
# differences reproduces the same token sequence.
MIN_MARGIN = {"float32": 0.02, "bfloat16": 0.15}
MIN_UNIQUE = 6  # ... and until the 16 greedy tokens contain at least this many distinct ids
MAX_TRIES = 2000


def make_config(spec: dict):
    dtype = spec["dtype"]
    eos = [IM_END, EOT] if spec["eos"] == "list" else EOT
    common = dict(
        vocab_size=VOCAB,
        hidden_size=spec["hidden"],
        intermediate_size=spec["inter"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        hidden_act="silu",
        max_position_embeddings=MAX_POS,
        rms_norm_eps=spec["eps"],
        tie_word_embeddings=spec["tie"],
        rope_parameters=dict(spec["rope"]),
        bos_token_id=EOT,
        eos_token_id=eos,
        dtype=dtype,
    )
    fam = spec["family"]
    if fam == "qwen3":
        cfg = Qwen3Config(head_dim=spec["head_dim"], attention_bias=False, **common)
        cls = Qwen3ForCausalLM
    elif fam == "qwen2":
        assert spec["head_dim"] == spec["hidden"] // spec["heads"]  # Qwen2 has no head_dim field
        cfg = Qwen2Config(**common)
        cls = Qwen2ForCausalLM
    elif fam == "llama":
        cfg = LlamaConfig(head_dim=spec["head_dim"], attention_bias=False, mlp_bias=False, **common)
        cls = LlamaForCausalLM
    else:
        raise ValueError(fam)
    cfg._attn_implementation = "eager"
    return cfg, cls


@torch.no_grad()
def init_weights(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():  # tied lm_head is not listed separately
        if "norm" in name:
            p.copy_(NORM_LO + (NORM_HI - NORM_LO) * torch.rand(p.shape, generator=g))
        elif name.endswith(".bias"):
            p.copy_(STD_BIAS * torch.randn(p.shape, generator=g))
        elif "embed_tokens" in name or "lm_head" in name:
            p.copy_(STD_EMBED * torch.randn(p.shape, generator=g))
        else:
            assert p.dim() == 2, name
            p.copy_(STD_LINEAR * torch.randn(p.shape, generator=g))


def build_model(spec: dict, seed: int):
    cfg, cls = make_config(spec)
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32)
    init_weights(model, seed)
    model = model.to(getattr(torch, spec["dtype"]))
    model.eval()
    if spec["tie"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    else:
        assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    return model


@torch.no_grad()
def reference(model, ids: list[int]) -> dict[str, torch.Tensor]:
    """Prefill over the whole prompt, then decode N_DECODE tokens one at a time with HF's KV cache."""
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=True)
    prefill = out.logits[0].to(torch.float32).clone()
    cache = out.past_key_values
    nxt = int(prefill[-1].argmax())
    dec_ids, dec_logits = [], []
    for _ in range(N_DECODE):
        dec_ids.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]], dtype=torch.long), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[0, -1].to(torch.float32).clone()
        dec_logits.append(logits)
        nxt = int(logits.argmax())
    assert cache.get_seq_length() == len(ids) + N_DECODE
    return {
        "prefill_logits": prefill,
        "decode_ids": torch.tensor(dec_ids, dtype=torch.int32),
        "decode_logits": torch.stack(dec_logits),
    }


def top2_margin(rows: torch.Tensor) -> float:
    top = rows.topk(2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


def greedy_margin(ref: dict[str, torch.Tensor]) -> float:
    return min(top2_margin(ref["prefill_logits"][-1:]), top2_margin(ref["decode_logits"]))


def f32_twin(model):
    """The bf16 checkpoint upcast to f32 (exactly: bf16 -> f32 is lossless) and run in f32: the reference
    for an engine that keeps bf16 weights but computes activations in f32."""
    import copy
    m = copy.deepcopy(model).to(torch.float32)
    m.eval()
    return m


def make_goldens(model, spec: dict, seed: int):
    rng = np.random.Generator(np.random.PCG64(seed))
    tensors, stats = {}, []
    twin = f32_twin(model) if spec["dtype"] == "bfloat16" else None
    for i, n in enumerate(PROMPT_LENS):
        for attempt in range(MAX_TRIES):
            ids = [int(x) for x in rng.integers(0, VOCAB, size=n)]
            ref = reference(model, ids)
            m = greedy_margin(ref)
            ref32 = reference(twin, ids) if twin is not None else None
            if ref32 is not None and greedy_margin(ref32) < MIN_MARGIN["float32"]:
                continue
            if m >= MIN_MARGIN[spec["dtype"]] and len(set(ref["decode_ids"].tolist())) >= MIN_UNIQUE:
                break
        else:
            raise RuntimeError(f"{spec['name']}: no acceptable prompt of length {n} in {MAX_TRIES} tries")
        tensors[f"p{i}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
        for k, v in ref.items():
            tensors[f"p{i}.{k}"] = v.contiguous()
        if ref32 is not None:
            for k, v in ref32.items():
                tensors[f"p{i}.f32ref_{k}"] = v.contiguous()
        stats.append(dict(len=n, tries=attempt + 1, margin=m, unique=len(set(ref["decode_ids"].tolist())),
                          decode=ref["decode_ids"].tolist()))
    return tensors, stats


def sort_safetensors_metadata(path: Path) -> None:
    """save_file writes __metadata__ in (random) Rust HashMap order; rewrite it sorted, same byte length,
    so that regenerating gives byte-identical files."""
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header_text = raw[8 : 8 + n].decode("utf-8")
    header = json.loads(header_text)
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    # The tensor entries are already sorted by name; keep their order and put __metadata__ first as save_file does.
    new_text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    stripped = header_text.rstrip(" ")
    assert len(new_text) == len(stripped) and json.loads(new_text) == json.loads(stripped), "unexpected header format"
    raw[8 : 8 + len(new_text)] = new_text.encode("utf-8")
    path.write_bytes(bytes(raw))


def check_golden_file(path: Path, spec: dict) -> dict[str, torch.Tensor]:
    g = load_file(str(path))
    per_prompt = 7 if spec["dtype"] == "bfloat16" else 4  # bf16 adds p{i}.f32ref_{prefill_logits,decode_ids,decode_logits}
    assert len(g) == per_prompt * len(PROMPT_LENS), sorted(g)
    for i, n in enumerate(PROMPT_LENS):
        ids, pl = g[f"p{i}.input_ids"], g[f"p{i}.prefill_logits"]
        di, dl = g[f"p{i}.decode_ids"], g[f"p{i}.decode_logits"]
        assert ids.dtype == torch.int32 and ids.shape == (n,)
        assert pl.dtype == torch.float32 and pl.shape == (n, VOCAB)
        assert di.dtype == torch.int32 and di.shape == (N_DECODE,)
        assert dl.dtype == torch.float32 and dl.shape == (N_DECODE, VOCAB)
        assert int(di[0]) == int(pl[-1].argmax())
        for j in range(N_DECODE - 1):
            assert int(di[j + 1]) == int(dl[j].argmax())
        if spec["dtype"] == "bfloat16":  # logits were computed in bf16: converting back is exact
            assert torch.equal(pl, pl.to(torch.bfloat16).float()) and torch.equal(dl, dl.to(torch.bfloat16).float())
    return g


def load_aligned(model_dir: Path, spec: dict):
    """from_pretrained, as a user of the checkpoint would load it (f32 RoPE buffers even for bf16)."""
    dtype = getattr(torch, spec["dtype"])
    m = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, attn_implementation="eager")
    m.eval()
    # from_pretrained leaves the weights in the mmapped file, where they are only 8-byte aligned
    # (safetensors data starts at 8 + header length); CPU BLAS then takes different code paths and the
    # logits differ in the last bits from run to run of the script. Copy them into fresh (aligned) memory.
    with torch.no_grad():
        for p in m.parameters():
            p.data = p.data.clone()
    if spec["tie"]:
        m.tie_weights()
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    assert m.config.tie_word_embeddings == spec["tie"]
    for name, p in m.named_parameters():
        assert p.dtype == dtype, name
    for name, b in m.named_buffers():
        assert b.dtype == torch.float32, name
    return m


@torch.no_grad()
def self_check(model_dir: Path, spec: dict, mem_model) -> None:
    """Reload from disk a second time and require bit-identical weights and logits."""
    g = check_golden_file(model_dir / "golden.safetensors", spec)
    loaded = load_aligned(model_dir, spec)
    assert type(loaded) is type(mem_model), type(loaded)
    sd_mem, sd_disk = mem_model.state_dict(), loaded.state_dict()
    assert sorted(sd_mem) == sorted(sd_disk)
    for k in sd_mem:
        assert sd_mem[k].dtype == sd_disk[k].dtype and torch.equal(sd_mem[k], sd_disk[k]), k
    for i in range(len(PROMPT_LENS)):
        ref = reference(loaded, g[f"p{i}.input_ids"].tolist())
        for k, v in ref.items():
            assert torch.equal(v, g[f"p{i}.{k}"]), f"{spec['name']} p{i}.{k} differs after reload"
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB == loaded.config.vocab_size


# ---------------------------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------------------------

def rope_desc(r: dict) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("rope_type", "rope_theta"))
    return f"{r['rope_type']} theta={r['rope_theta']:g}" + (f" ({extra})" if extra else "")


def write_readme(out: Path, rows: list[dict], sample_config: str) -> None:
    lines = [
        "# Golden fixtures (HF transformers reference outputs)",
        "",
        "Generated by `scripts/make_golden.py` (developers run it by hand; CI only reads these files).",
        f"Versions: torch {VERSIONS['torch']}, transformers {VERSIONS['transformers']}, "
        f"tokenizers {VERSIONS['tokenizers']}, safetensors {VERSIONS['safetensors']}. "
        "CPU, one thread, deterministic algorithms, `attn_implementation=\"eager\"`.",
        "Do not edit by hand; regenerate instead (the output is byte-for-byte reproducible).",
        "",
        "## Models",
        "",
        f"All models: hidden 64, vocab {VOCAB}, max_position_embeddings {MAX_POS}, SiLU gated MLP, RMSNorm, "
        f"bos_token_id {EOT}. Random weights: linears N(0, {STD_LINEAR}), biases N(0, {STD_BIAS}), "
        f"embed_tokens/lm_head N(0, {STD_EMBED}), every RMSNorm weight (incl. Qwen3 q_norm/k_norm) "
        f"U({NORM_LO}, {NORM_HI}).",
        "",
        "| dir | class | dtype | layers | q/kv heads | head_dim | intermediate | tied | qkv bias | qk-norm | rms eps | rope | eos_token_id | params |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["spec"]
        lines.append(
            f"| {s['name']} | {r['cls']} | {s['dtype']} | {s['layers']} | {s['heads']}/{s['kv_heads']} | "
            f"{s['head_dim']} | {s['inter']} | {'yes' if s['tie'] else 'no'} | "
            f"{'yes' if s['family'] == 'qwen2' else 'no'} | {'yes' if s['family'] == 'qwen3' else 'no'} | "
            f"{s['eps']:g} | {rope_desc(s['rope'])} | {r['eos']} | {r['params']} |"
        )
    lines += [
        "",
        "Notes: `qwen3-tiny-*` has head_dim 32 != hidden/heads (16), so q_proj is 64->128 and o_proj 128->64.",
        "`qwen2-*` has bias on q/k/v (not o). `llama-tiny-f32` is GQA 4:1, `llama-tiny-linear-f32` is MHA, "
        "`llama-tiny-bf16` is MQA (1 kv head). Tied models have no `lm_head.weight` in model.safetensors.",
        "`llama-tiny-f32` uses rope_theta 1000 so that its 4 frequencies (head_dim 8) cover all three llama3 "
        "branches: wavelength 6.3 kept, 35 smoothed, 199 and 1117 divided by the factor. "
        "`qwen2-tiny-f32` yarn (beta_fast 32, beta_slow 1 defaults, truncate) ramps over dims 0..3 of its 8 "
        "frequencies and multiplies cos and sin by attention_factor 0.1*ln(4)+1 = 1.1386.",
        "",
        "Each directory holds `config.json`, `generation_config.json` and `model.safetensors` exactly as "
        "`model.save_pretrained(dir, safe_serialization=True)` writes them, the shared `tokenizer.json` "
        "and `golden.safetensors`.",
        "",
        "## config.json as transformers 5.23 writes it",
        "",
        "- RoPE is written as a single `rope_parameters` object: `{\"rope_theta\": ..., \"rope_type\": ...,"
        " <scaling keys>}`. There is **no** top-level `rope_theta` and **no** `rope_scaling` key. "
        "`rope_type` is `default` for unscaled RoPE; `factor`, `original_max_position_embeddings`, "
        "`low_freq_factor`, `high_freq_factor` live inside `rope_parameters`.",
        "- The dtype is written as `\"dtype\"` (not `torch_dtype`).",
        "- `eos_token_id` is an int in most models and a list `[im_end, endoftext]` in "
        + ", ".join(f"`{r['spec']['name']}`" for r in rows if r["spec"]["eos"] == "list")
        + ". Older checkpoints in the wild use `rope_theta` + `rope_scaling` (with `type` or `rope_type`) "
        "and `torch_dtype`; a parser should accept both forms.",
        "",
        "Example (`qwen2-tiny-f32/config.json`, yarn):",
        "",
        "```json",
        sample_config.rstrip(),
        "```",
        "",
        "## Tokenizer",
        "",
        f"Byte-level BPE trained with HF `tokenizers` on tinyshakespeare: {N_REGULAR} regular tokens "
        f"(256 byte tokens + {N_REGULAR - 256} merges, min_frequency 2) then the specials "
        f"`<|endoftext|>`={EOT}, `<|im_start|>`={IM_START}, `<|im_end|>`={IM_END} (special, not normalized). "
        "Normalizer NFC; pre-tokenizer Sequence[Split(Qwen2 regex, Isolated), ByteLevel(add_prefix_space=false, "
        "use_regex=false)]; ByteLevel post-processor and decoder - the same pipeline as Qwen2/Qwen3 "
        "tokenizer.json. The golden prompts are random ids and do not go through the tokenizer.",
        "",
        "## golden.safetensors",
        "",
        f"`__metadata__`: `n_prompts` (\"{len(PROMPT_LENS)}\"), `transformers`, `torch`, `dtype` "
        "(\"float32\" or \"bfloat16\").",
        "",
        f"For each prompt i in 0..{len(PROMPT_LENS) - 1} (lengths T_i = {', '.join(map(str, PROMPT_LENS))}), "
        f"with V = {VOCAB}:",
        "",
        "| tensor | dtype | shape | meaning |",
        "|---|---|---|---|",
        "| `p{i}.input_ids` | I32 | [T_i] | prompt token ids, uniform random over the whole vocab (specials included) |",
        "| `p{i}.prefill_logits` | F32 | [T_i, V] | logits of one HF forward over the whole prompt, every position (positions 0..T_i-1) |",
        f"| `p{{i}}.decode_ids` | I32 | [{N_DECODE}] | greedy tokens: `decode_ids[0] = argmax(prefill_logits[-1])`, "
        "`decode_ids[j+1] = argmax(decode_logits[j])` |",
        f"| `p{{i}}.decode_logits` | F32 | [{N_DECODE}, V] | `decode_logits[j]` = logits from feeding the single token "
        "`decode_ids[j]` at position T_i + j with HF's KV cache (filled by the prefill and the previous steps) |",
        "",
        "The decode loop is manual: `model(input_ids=[[tok]], past_key_values=cache, use_cache=True)` one token "
        "at a time, never `generate()`. EOS is ignored (always 16 steps). No attention mask/padding; batch 1. "
        "The last `decode_logits[15]` is recorded but its argmax is not a decode id.",
        "",
        "bf16 models: weights stored in bf16 and the forward runs in bf16 (eager attention does its softmax in "
        "f32 and casts back, as HF does); logits are HF's bf16 values converted exactly to F32. "
        "Note that for bf16 `decode_logits[j]` and the prefill logits of the same position are not equal, "
        "because bf16 rounding depends on the computation shape.",
        "",
        "bf16 models also carry `p{i}.f32ref_prefill_logits`, `p{i}.f32ref_decode_ids` and "
        "`p{i}.f32ref_decode_logits`: the same prompts run by the same checkpoint upcast to f32 (bf16 -> f32 is "
        "exact) with the forward in f32, i.e. the reference for an engine that keeps bf16 weights and f32 "
        "activations. Its greedy path is its own (it may differ from the bf16 one); same semantics as above.",
        "",
        "Prompts were resampled until every greedy choice (the prefill argmax and all 16 decode argmaxes) beats "
        f"the runner-up logit by at least {MIN_MARGIN['float32']} (f32) / {MIN_MARGIN['bfloat16']} (bf16), "
        "so a correct engine with small numeric differences reproduces decode_ids exactly.",
        "",
        "Sizes: each golden.safetensors holds (67 + 64) x 1024 F32 logits = 0.54 MB; all fixtures together are "
        "about 8.2 MiB (see the bytes column).",
        "",
        "| dir | min top-2 margin per prompt | distinct decode ids per prompt | bytes |",
        "|---|---|---|---|",
    ]
    for r in rows:
        margins = ", ".join("%.3f" % st["margin"] for st in r["stats"])
        uniques = ", ".join(str(st["unique"]) for st in r["stats"])
        lines.append(f"| {r['spec']['name']} | {margins} | {uniques} | {r['bytes']} |")
    lines.append("")
    (out / "README.md").write_text("\n".join(lines))


# ---------------------------------------------------------------------------------------------


def dir_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.iterdir() if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "golden")
    ap.add_argument("--only", default="", help="comma-separated model names (README is then not rewritten)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    unknown = only - {s["name"] for s in SPECS}
    if unknown:
        sys.exit(f"unknown model(s): {sorted(unknown)}")

    tok = build_tokenizer()
    tok_dict = json.loads(tok.to_str())
    # decoders.ByteLevel() ignores its arguments and serializes the pre-tokenizer defaults (true, true, true);
    # write the fields as Qwen2's tokenizer.json has them (the ByteLevel decoder does not use them).
    assert tok_dict["decoder"]["type"] == "ByteLevel"
    tok_dict["decoder"].update(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok_json = json.dumps(tok_dict, indent=2, ensure_ascii=False) + "\n"
    assert Tokenizer.from_str(tok_json).encode("To be, or not").ids == tok.encode("To be, or not").ids

    rows = []
    for idx, spec in enumerate(SPECS):
        if only and spec["name"] not in only:
            continue
        seed = BASE_SEED + 1000 * idx
        d = out / spec["name"]
        if d.exists():
            shutil.rmtree(d)
        model = build_model(spec, seed)
        model.save_pretrained(str(d), safe_serialization=True)
        (d / "tokenizer.json").write_text(tok_json, encoding="utf-8")
        # The goldens come from the checkpoint as from_pretrained loads it, not from the in-memory model
        # (which e.g. has its RoPE inv_freq buffer in bf16 after .to(bfloat16)).
        tensors, stats = make_goldens(load_aligned(d, spec), spec, seed + 1)
        meta = {"n_prompts": str(len(PROMPT_LENS)), "transformers": VERSIONS["transformers"],
                "torch": VERSIONS["torch"], "dtype": spec["dtype"]}
        save_file(tensors, str(d / "golden.safetensors"), metadata=meta)
        sort_safetensors_metadata(d / "golden.safetensors")
        self_check(d, spec, model)
        params = sum(p.numel() for p in model.parameters())
        eos = json.loads((d / "config.json").read_text())["eos_token_id"]
        rows.append(dict(spec=spec, cls=type(model).__name__, stats=stats, params=params, eos=eos,
                         bytes=dir_bytes(d)))
        print(f"{spec['name']:24s} params={params:7d} bytes={dir_bytes(d):8d} files={sorted(p.name for p in d.iterdir())}")
        for st in stats:
            print(f"    T={st['len']:3d} tries={st['tries']:4d} margin={st['margin']:.4f} unique={st['unique']:2d} "
                  f"decode={st['decode']}")

    if not only:
        write_readme(out, rows, (out / "qwen2-tiny-f32" / "config.json").read_text())
    total = sum(r["bytes"] for r in rows)
    print(f"total {total} bytes ({total / 2**20:.2f} MiB); self-check passed")


if __name__ == "__main__":
    main()
