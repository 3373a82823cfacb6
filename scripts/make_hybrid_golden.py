#!/usr/bin/env python3
"""Golden fixtures for hybrid Gated-DeltaNet targets (issue 16, ../shared/docs/hybrid.md §8).

Developers run this by hand; CI only reads the committed outputs in tests/fixtures/hybrid/.

1. Tiny random `qwen3_5` checkpoints, saved with `save_pretrained` exactly as transformers writes them,
   that differ in every shape that can differ (value heads != key heads, GDN head dims != attention
   head_dim, d_k != d_v, partial rotary, a layer count that is not a multiple of the full-attention
   interval, tied and untied embeddings, the text-only and the multimodal layout). For each, HF
   transformers (eager attention, the saved f32 weights run in float64) gives:
     prompt      [T] int32    the prompt (T = 70: HF's chunked prefill spans two 64-token chunks)
     prefill     [T, V] f32   logits of the full-prompt forward (HF: the chunked delta-rule form), run in f64
                              (HF's own f32 run is 1.2e-4 off it, as far as our tolerance)
     tokens      [32] int32   greedy continuation (HF generate with its cache: the recurrent form)
     decode      [32, V] f32  the logits that chose each greedy token (row 0 = last prompt row)
2. Quantized hybrids made by compressed-tensors itself (its calculate_qparams and compressors, through the
   helpers of scripts/make_quant_golden.py; compressed-tensors 0.20.1): `qwen35-ct-w4g128` (pack-quantized int4
   group 128, weight-only) and `qwen35-ct-w8a8g128` (int-quantized int8 group 128 with dynamic per-token int8
   inputs), on a hybrid base whose every K is 128 or 256; in_proj_a / in_proj_b, conv1d, A_log, dt_bias and the
   norms stay dense (bf16), as Qwen3.5 releases keep them. golden.safetensors: prompt, logits (HF on the
   dequantized weights, f64), logits_a8 (W8A8: the engine's per-token int8 input quantization simulated before
   each W8A8 linear), ref.<module>.weight (the library's dequantization of layer 0's in_proj_qkv and of layer 3's
   q_proj, f32).
3. `qwen35-text-a.gguf`: qwen35-text-a written as llama.cpp's converter writes a Qwen3.5 GGUF (architecture
   `qwen35`, convert_hf_to_gguf.py Qwen3NextModel + _LinearAttentionVReorderBase + _Qwen35MRopeMixin, read for
   the rules): `A_log` -> `ssm_a = -exp(A_log)`; `dt_bias` -> `ssm_dt.bias`; `conv1d` squeezed to [conv_dim, K];
   every `norm.weight` except the gated `linear_attn.norm` stored as `1 + w`; value heads reordered from HF's
   grouped order (h = g r + j) to llama.cpp's tiled order (j n_k + g) in in_proj_qkv's V rows, in_proj_z,
   in_proj_a / in_proj_b, A_log / dt_bias, conv1d's V channels and out_proj's columns; `ssm.*`,
   `full_attention_interval`, `rope.dimension_count` / `dimension_sections` metadata; F32 tensors, written with
   the `gguf` package (0.19.0). Its logits are the same model's: the test compares them with `prefill` above.
4. `gdn_kernel.safetensors`: the delta-rule recurrence alone on random inputs (already l2-normalised q, k;
   q scaled; heads expanded), from two oracles nobody here wrote: FLA's `naive_recurrent_gated_delta_rule`
   and `naive_chunk_gated_delta_rule` (fla-core, loaded from its file: it needs only torch + einops) and
   transformers' `torch_recurrent_gated_delta_rule` / `torch_chunk_gated_delta_rule`.

Environment (pinned, checked at start):

    python3 -m venv /work/venv-torch
    /work/venv-torch/bin/pip install torch==2.15.0 transformers==5.23.0 safetensors==0.8.0 numpy einops
    /work/venv-torch/bin/pip download --no-deps fla-core==0.6.0 -d /tmp/fla   # the oracle file only
    /work/venv-torch/bin/python scripts/make_hybrid_golden.py --fla-wheel /tmp/fla/fla_core-0.6.0-py3-none-any.whl

Everything is seeded; CPU, one thread, deterministic algorithms. Rerunning writes the same bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import zipfile
from pathlib import Path

PINNED = {"torch": "2.15.0", "transformers": "5.23.0", "safetensors": "0.8.0"}  # + gguf 0.19.0 for the GGUF


def check_versions() -> None:
    import safetensors
    import torch
    import transformers

    found = {"torch": torch.__version__, "transformers": transformers.__version__, "safetensors": safetensors.__version__}
    bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k].split("+")[0] != v]
    if bad:
        sys.exit("make_hybrid_golden.py: wrong package versions:\n  " + "\n  ".join(bad))


check_versions()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq  # noqa: E402
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config, Qwen3_5TextConfig  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
T_PROMPT, N_GEN = 70, 32


def text_fields(**kw):
    base = dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, rms_norm_eps=1e-6, max_position_embeddings=512,
        hidden_act="silu", attention_bias=False, bos_token_id=None, eos_token_id=255, pad_token_id=None,
    )
    base.update(kw)
    return base


CASES = {
    # 5 layers L L L F L: not a multiple of the interval; n_v = 2 n_k; d_k 16 != d_v 24 != head_dim 32;
    # rotary 0.25 of head_dim (8 of 32 dims); untied.
    "qwen35-text-a": dict(
        wrapper=False,
        text=text_fields(
            num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=24, linear_num_key_heads=2,
            linear_num_value_heads=4, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        ),
    ),
    # 6 layers with an explicit layer_types (L F L L F L); n_v = 3 n_k (one key head); conv kernel 3;
    # head_dim 16 with rotary 0.5; tied embeddings.
    "qwen35-text-tied": dict(
        wrapper=False,
        text=text_fields(
            num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                         "full_attention", "linear_attention"],
            linear_conv_kernel_dim=3, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=1,
            linear_num_value_heads=3, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
        ),
    ),
    # The multimodal wrapper Qwen3_5ForConditionalGeneration (text under model.language_model., a tiny
    # vision tower under model.visual. that a text engine skips); 4 layers L L L F; n_v = n_k.
    "qwen35-vl": dict(
        wrapper=True,
        text=text_fields(
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
            linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=2, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                             "mrope_section": [1, 1, 2], "mrope_interleaved": True},
        ),
    ),
    # For the server tests: vocabulary 512 so that the golden dense fixtures' tokenizer.json (byte-level BPE,
    # 512 ids, eos 511) serves it; copied next to it.
    "qwen35-serve": dict(
        wrapper=False,
        tokenizer="tests/fixtures/golden/qwen3-tiny-f32/tokenizer.json",
        text=text_fields(
            vocab_size=512, eos_token_id=511, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
        ),
    ),
}


def randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Every weight random, in ranges that keep the oracle strong (hybrid.md §8.1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 1.5, generator=gen))
            elif name.endswith("linear_attn.norm.weight"):  # gated norm: plain w
                p.copy_(torch.empty(p.shape).uniform_(0.8, 1.2, generator=gen))
            elif "norm" in name and p.dim() == 1:  # (1 + w) norms: w around 0
                p.copy_(torch.empty(p.shape).uniform_(-0.2, 0.2, generator=gen))
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            elif p.dim() >= 2:  # 0.15: at 0.2 HF's own f32 run of qwen35-text-a is 1.2e-4 off its f64 run
                p.copy_(torch.randn(p.shape, generator=gen) * 0.15)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def make_model(case: dict, seed: int):
    torch.manual_seed(seed)
    tc = Qwen3_5TextConfig(**case["text"])
    if case["wrapper"]:
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      patch_size=4, temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
                      num_position_embeddings=16)
        cfg = Qwen3_5Config(text_config=tc.to_dict(), vision_config=vision, tie_word_embeddings=False)
        model = mq.Qwen3_5ForConditionalGeneration(cfg)
    else:
        model = mq.Qwen3_5ForCausalLM(tc)
    model.config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(seed)
    randomise(model, gen)
    if getattr(model.config, "tie_word_embeddings", False) or tc.tie_word_embeddings:
        model.tie_weights()
    return model.eval().to(torch.float32)


def run_case(name: str, case: dict, out: Path, seed: int) -> None:
    d = out / name
    if d.exists():
        shutil.rmtree(d)
    model = make_model(case, seed)
    model.save_pretrained(d, safe_serialization=True)
    V = case["text"]["vocab_size"]
    gen = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(0, V - 1, (1, T_PROMPT), generator=gen)
    # The oracle runs in float64: HF's own f32 forward of these tiny random models is off its f64 result by
    # up to 1.2e-4 relative (the chunked form's triangular solves), as much as the tolerance we test at.
    model = model.double()
    with torch.no_grad():
        full = model(input_ids=prompt, use_cache=False).logits[0].float()
        # An explicit all-ones mask and a pad id the prompt never holds (V - 1): generate would otherwise
        # mask prompt tokens equal to the pad id.
        res = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=N_GEN,
                             do_sample=False, output_logits=True, return_dict_in_generate=True, eos_token_id=None,
                             pad_token_id=V - 1)
    tokens = res.sequences[0, T_PROMPT:].to(torch.int32)
    decode = torch.stack([l[0].float() for l in res.logits])
    assert tokens.numel() == N_GEN
    assert torch.equal(decode.argmax(-1).to(torch.int32), tokens)
    if "tokenizer" in case:
        shutil.copyfile(REPO / case["tokenizer"], d / "tokenizer.json")
    save_file({"prompt": prompt[0].to(torch.int32).contiguous(), "prefill": full.contiguous(),
               "tokens": tokens.contiguous(), "decode": decode.contiguous()}, str(d / "golden.safetensors"))
    # Prefill (chunked form) against decode (recurrent form) on the prompt's last row: the two HF forms agree.
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params, "
          f"|prefill[-1] - decode[0]| max {float((full[-1] - decode[0]).abs().max()):.2e}, "
          f"tokens {tokens[:8].tolist()}...")


def load_fla_naive(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        src = z.read("fla/ops/gated_delta_rule/naive.py").decode()
    spec = importlib.util.spec_from_loader("fla_naive", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, "fla/ops/gated_delta_rule/naive.py", "exec"), mod.__dict__)
    return mod


def kernel_fixture(out: Path, fla_wheel: Path) -> None:
    """The recurrence on its own, f32: [B=1, T, n_v, d] inputs, l2-normalised q and k, q not yet scaled
    (hybrid.md §3 step 6). FLA multiplies q by d_k^-1/2, HF divides by d_k^1/2: equal up to rounding."""
    fla = load_fla_naive(fla_wheel)
    gen = torch.Generator().manual_seed(7)
    tensors = {}
    for tag, (T, nv, dk, dv) in {"a": (150, 4, 16, 24), "b": (65, 3, 32, 16), "c": (1, 2, 16, 16)}.items():
        q = torch.nn.functional.normalize(torch.randn(1, T, nv, dk, generator=gen), dim=-1)
        k = torch.nn.functional.normalize(torch.randn(1, T, nv, dk, generator=gen), dim=-1)
        v = torch.randn(1, T, nv, dv, generator=gen)
        beta = torch.sigmoid(torch.randn(1, T, nv, generator=gen))
        g = -torch.exp(torch.empty(nv).uniform_(0.0, 2.7, generator=gen)) * \
            torch.nn.functional.softplus(torch.randn(1, T, nv, generator=gen))
        s0 = torch.randn(1, nv, dk, dv, generator=gen) * 0.3
        o_rec, s_rec = fla.naive_recurrent_gated_delta_rule(q, k, v, beta, g, initial_state=s0.clone(),
                                                            output_final_state=True)
        o_chk, s_chk = fla.naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, initial_state=s0.clone(),
                                                        output_final_state=True)
        o_hf, s_hf = mq.torch_recurrent_gated_delta_rule.__wrapped__(
            q, k, v, g, beta, initial_state=s0.clone(), output_final_state=True, use_qk_l2norm_in_kernel=False)
        for key, x in {"q": q, "k": k, "v": v, "beta": beta, "g": g, "s0": s0,
                       "o_fla_rec": o_rec, "s_fla_rec": s_rec, "o_fla_chunk": o_chk, "s_fla_chunk": s_chk,
                       "o_hf_rec": o_hf, "s_hf_rec": s_hf}.items():
            tensors[f"{tag}.{key}"] = x.float().contiguous()
        print(f"kernel {tag}: T={T} nv={nv} dk={dk} dv={dv}: |fla_rec - hf_rec| "
              f"{float((o_rec - o_hf).abs().max()):.2e}, |fla_chunk - hf_rec| {float((o_chk - o_hf).abs().max()):.2e}")
    save_file(tensors, str(out / "gdn_kernel.safetensors"))


def ct_hybrid_fixtures(out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import make_quant_golden as mqg  # noqa: E402  (its pinned versions are checked on import)

    text = text_fields(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=64, linear_conv_kernel_dim=4,
                       linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=1,
                       linear_num_value_heads=2, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25})
    specs = {
        "qwen35-ct-w4g128": (mqg.ct_args(4, "group"), "pack-quantized", None, mqg.PackedQuantizationCompressor),
        "qwen35-ct-w8a8g128": (mqg.ct_args(8, "group"), "int-quantized",
                               mqg.QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token",
                                                    dynamic=True, observer=None),
                               mqg.IntQuantizationCompressor),
    }
    for name, (args, fmt, ia, comp) in specs.items():
        model = make_model(dict(wrapper=False, text=text), 4242)
        with torch.no_grad():  # dense parts stored bf16; quantization starts from the bf16-rounded weights
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
        sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
        mods = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
        dense = [m for m in mods if m.endswith("in_proj_a") or m.endswith("in_proj_b")]
        refs = {}
        for mod in mods:
            if mod in dense:
                continue
            w = model.get_submodule(mod).weight.detach().clone()
            del sd[mod + ".weight"]
            tensors, ref = mqg.ct_quantize(w, args, comp, ia)
            for k, v in tensors.items():
                sd[f"{mod}.{k}"] = v.contiguous()
            refs[mod] = ref
            with torch.no_grad():
                model.get_submodule(mod).weight.copy_(ref)
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        cfg = model.config.to_dict()
        cfg["architectures"] = ["Qwen3_5ForCausalLM"]
        cfg["quantization_config"] = mqg.ct_config({"group_0": (["Linear"], args, fmt, ia)}, fmt, ["lm_head"] + dense)
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
        gen = torch.Generator().manual_seed(77)
        prompt = torch.randint(0, 255, (1, 40), generator=gen)
        golden = {"prompt": prompt[0].to(torch.int32).contiguous()}
        with torch.no_grad():
            if ia is not None:  # the engine's dynamic per-token int8 inputs, simulated before every W8A8 linear
                # In f32 and token by token (HF's recurrent form, with its cache), as the engine computes them:
                # a code that lands on the other side of a rounding boundary (an f64 run, or HF's chunked
                # prefill form) changes the recurrent state for every later token.
                hooks = [model.get_submodule(m).register_forward_pre_hook(mqg.fake_quant_acts) for m in refs]
                rows, pkv = [], None
                for t in range(prompt.shape[1]):
                    o = model(input_ids=prompt[:, t:t + 1], past_key_values=pkv, use_cache=True)
                    pkv = o.past_key_values
                    rows.append(o.logits[0, -1].float())
                golden["logits_a8"] = torch.stack(rows).contiguous()
                for h in hooks:
                    h.remove()
            model = model.double()
            golden["logits"] = model(input_ids=prompt, use_cache=False).logits[0].float().contiguous()
        for m in ("model.layers.0.linear_attn.in_proj_qkv", "model.layers.3.self_attn.q_proj"):
            golden[f"ref.{m}.weight"] = refs[m].float().contiguous()
        save_file(golden, str(d / "golden.safetensors"))
        print(f"{name}: {len(refs)} quantized modules, {len(dense)} dense linears besides lm_head")


def gguf_fixture(out: Path) -> None:
    import gguf
    import numpy as np
    from safetensors.torch import load_file

    src = out / "qwen35-text-a"
    cfg = json.loads((src / "config.json").read_text())
    sd = {k: v.float() for k, v in load_file(str(src / "model.safetensors")).items()}
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], nv // nk

    def tiled(t, dim, head):  # grouped (g, j) -> tiled (j, g) along dim, heads of `head` entries
        shape = list(t.shape)
        t = t.reshape(shape[:dim] + [nk, r, head] + shape[dim + 1:])
        perm = list(range(t.dim()))
        perm[dim], perm[dim + 1] = perm[dim + 1], perm[dim]
        return t.permute(*perm).contiguous().reshape(shape)

    w = gguf.GGUFWriter(str(out / "qwen35-text-a.gguf"), "qwen35")
    L, H = cfg["num_hidden_layers"], cfg["hidden_size"]
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    rp = cfg["rope_parameters"]
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_rope_dimension_count(int(cfg["head_dim"] * rp["partial_rotary_factor"]))
    w.add_rope_dimension_sections(rp.get("mrope_section", [11, 11, 10]) + [0])
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(dv * nv)
    w.add_full_attention_interval(4)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
                 "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
                 "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
                 "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
                 "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
                 "mlp.down_proj.weight": "ffn_down.weight", "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
                 "linear_attn.in_proj_z.weight": "attn_gate.weight", "linear_attn.in_proj_b.weight": "ssm_beta.weight",
                 "linear_attn.in_proj_a.weight": "ssm_alpha.weight", "linear_attn.conv1d.weight": "ssm_conv1d.weight",
                 "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a", "linear_attn.norm.weight": "ssm_norm.weight",
                 "linear_attn.out_proj.weight": "ssm_out.weight"}
    for name in sorted(sd):
        t = sd[name]
        if name.startswith("model.layers."):
            i, rest = name[len("model.layers."):].split(".", 1)
            gname = f"blk.{i}.{per_layer[rest]}"
        else:
            rest, gname = name, names[name]
        if rest.endswith("norm.weight") and not rest.endswith("linear_attn.norm.weight"):
            t = t + 1
        if rest.endswith("A_log"):
            t = -torch.exp(t)
        if "conv1d" in rest:
            t = t.squeeze()
        if r > 1 and "linear_attn." in rest:
            if "in_proj_qkv" in rest:
                t = torch.cat([t[:2 * nk * dk], tiled(t[2 * nk * dk:], 0, dv)], 0)
            elif "in_proj_z" in rest:
                t = tiled(t, 0, dv)
            elif "in_proj_a" in rest or "in_proj_b" in rest:
                t = tiled(t, 0, 1)
            elif rest.endswith("A_log") or rest.endswith("dt_bias"):
                t = tiled(t.unsqueeze(-1), 0, 1).squeeze(-1)
            elif "conv1d" in rest:
                t = torch.cat([t[:2 * nk * dk], tiled(t[2 * nk * dk:], 0, dv)], 0)
            elif "out_proj" in rest:
                t = tiled(t, 1, dv)
        w.add_tensor(gname, t.numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"qwen35-text-a.gguf: {len(sd)} tensors")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "hybrid"))
    ap.add_argument("--fla-wheel", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    for i, (name, case) in enumerate(CASES.items()):
        if only is None or name in only:
            run_case(name, case, out, 1000 + i)
    if only is None or "kernel" in only:
        kernel_fixture(out, Path(a.fla_wheel))
    if only is None or "ct" in only:
        ct_hybrid_fixtures(out)
    if only is None or "gguf" in only:
        gguf_fixture(out)
    (out / "VERSIONS.json").write_text(json.dumps(PINNED | {"fla-core": "0.6.0"}, indent=2) + "\n")


if __name__ == "__main__":
    main()
