#!/usr/bin/env python3
"""Generate quantized-checkpoint fixtures (tests/fixtures/quant/) for the bit-exact GPTQ / compressed-tensors loader.

Developers run this by hand; CI only reads the committed outputs. Same venv as scripts/make_golden.py plus
compressed-tensors (pinned below):

    ~/.cache/blockspec/venv-golden/bin/pip install compressed-tensors==0.20.1
    ~/.cache/blockspec/venv-golden/bin/python scripts/make_quant_golden.py

Tiny random Qwen3 / Llama models (hidden 128, intermediate 256, so every K is a multiple of 128 and the
groups are real) get their linear weights quantized:
  - compressed-tensors: scales from compressed_tensors' calculate_qparams over per-group / per-channel min/max,
    codes and packing from its own compressors (PackedQuantizationCompressor for pack-quantized,
    IntQuantizationCompressor for int-quantized, NaiveQuantizationCompressor for naive-quantized); reference
    dequantization = its `dequantize` in float32.
  - compressed-tensors asymmetric int4 / int8 (symmetric: false) on the "tiny" base: zero points from
    calculate_qparams, stored by the same compressors (pack-quantized: pack_to_int32(zp, packed_dim=0), I32
    [ceil(N*b/32), ng]; int- / naive-quantized: I8 [N, ng]); reference = `dequantize` in float32 with the
    unpacked zero points, (q - z) * s, checked against the library's own decompress (bf16). Rows 0-1 / 2-3 of
    every module are made all-nonnegative / all-nonpositive so the zero points reach both ends of their range
    (-2^(b-1), and 2^(b-1) - 1 up to the bf16 rounding of min / scale).
  - GPTQ v1 ("gptq", stored zero = z - 1) and v2 ("gptq_v2"): the sym quantizer and bit packing written from
    ../shared/docs/quant_formats.md §2 / §4.1 (GPTQModel / AutoGPTQ are not installed offline), cross-checked:
    qweight.T unpacked by compressed_tensors' unpack_from_int32 must give our codes (the §3.3 equivalence
    weight_packed.T == qweight), and the worked examples of §2.6 are asserted.
  - FP8 (float-quantized, per tensor / channel / block [128, 128]), NVFP4 (nvfp4-pack-quantized, NVFP4A16) and MXFP4
    (mxfp4-pack-quantized, MXFP4A16) on a smaller "tiny" base: scales from calculate_qparams (+ generate_gparam for
    the NVFP4 global scale), codes from FloatQuantizationCompressor / NVFP4PackedCompressor /
    MXFP4PackedCompressor; reference = its `dequantize` in float32 (global scale applied as a divisor), checked
    against the library's own decompress (bf16). These are weight-only: no logits_a8.
Reference dequantization is float(code) * float(scale) in float32 (exact: an f16/bf16 scale times a <= 8-bit
code fits in f32). The HF reference logits come from the same architecture with those dequantized weights,
run in float32 (eager attention, one thread).

golden.safetensors per fixture: p{i}.input_ids (I32 [T]), p{i}.logits (F32 [T, vocab]: HF on the dequantized
model), p{i}.logits_a8 (only with W8A8 modules: the engine's int8 activation quantization simulated before each
W8A8 linear; GPTQ and W4A16 / W8A16 modules run weight-only),
ref.<module>.weight (F32, the reference dequantization of layer 0's k_proj) and ref.<module>.weight.rows16
(F32, the first 16 rows of layer 0's down_proj).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

PINNED = {"torch": "2.15.0", "transformers": "5.23.0", "safetensors": "0.8.0", "compressed-tensors": "0.20.1"}


def check_versions():
    import compressed_tensors
    import safetensors
    import torch
    import transformers

    found = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
             "safetensors": safetensors.__version__, "compressed-tensors": compressed_tensors.__version__.split("+")[0]}
    bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k] != v]
    if bad:
        sys.exit("make_quant_golden.py: wrong package versions:\n  " + "\n  ".join(bad))
    return found


VERSIONS = check_versions()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import IntQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import NaiveQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8  # noqa: E402
from compressed_tensors.compressors.mx_utils import decompress_mx_scale  # noqa: E402
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import dequantize  # noqa: E402
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests/fixtures/quant"
VOCAB = 256
PROMPTS = [[3, 77, 150, 9, 201, 33, 64], [250, 1, 128, 17, 90]]
STD_LINEAR, STD_EMBED = 0.2, 0.3
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

BASES = {
    "qwen3": dict(family="qwen3", layers=2, tie=True, seed=11),
    "llama": dict(family="llama", layers=1, tie=False, seed=12),
    # Smaller base for the FP8 / NVFP4 / MXFP4 fixtures (fixture budget): vocab 128, hidden 64, intermediate 256
    # (so the MLP has two 128-blocks along N or K), 1 layer, tied embeddings.
    "tiny": dict(family="qwen3", layers=1, tie=True, seed=13, vocab=128, hidden=64, inter=256, heads=2, kv=1),
}


def make_model(base):
    common = dict(vocab_size=base.get("vocab", VOCAB), hidden_size=base.get("hidden", 128),
                  intermediate_size=base.get("inter", 256), num_hidden_layers=base["layers"],
                  num_attention_heads=base.get("heads", 4), num_key_value_heads=base.get("kv", 2), head_dim=32, hidden_act="silu",
                  max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=base["tie"],
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=1, eos_token_id=2,
                  attention_bias=False, dtype="bfloat16")
    if base["family"] == "qwen3":
        cfg, cls = Qwen3Config(**common), Qwen3ForCausalLM
    else:
        cfg, cls = LlamaConfig(mlp_bias=False, **common), LlamaForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(base["seed"])
    model = cls(cfg).to(torch.float32)
    g = torch.Generator().manual_seed(base["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(STD_EMBED * torch.randn(p.shape, generator=g))
            else:
                p.copy_(STD_LINEAR * torch.randn(p.shape, generator=g))
    # Dense parts are stored bf16; quantization starts from the bf16-rounded weights. Only the parameters are
    # rounded: the RoPE inv_freq buffer stays f32 (as from_pretrained builds it).
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    for name, b in model.named_buffers():
        assert b.dtype == torch.float32, name
    model.eval()
    return cfg, model


def linear_names(model):
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]


# ---------------------------------------------------------------------------------------------
# compressed-tensors
# ---------------------------------------------------------------------------------------------

def ct_args(bits, strategy, sym=True, group=128):
    kw = dict(num_bits=bits, type="int", symmetric=sym, strategy=strategy, dynamic=False, observer="minmax")
    if strategy == "group":
        kw["group_size"] = group
    return QuantizationArgs(**kw)


def ct_quantize(w, args, compressor, input_acts=None):
    """Returns (compressed state dict, reference dequantized f32 weight [N, K])."""
    N, K = w.shape
    G = args.group_size if args.strategy == "group" else K
    wb = w.to(torch.bfloat16)  # the observed weight dtype: scales come out in bf16
    if args.strategy == "group":
        wg = wb.reshape(N, K // G, G)
        mn, mx = wg.amin(dim=-1), wg.amax(dim=-1)
    else:
        mn, mx = wb.amin(dim=-1, keepdim=True), wb.amax(dim=-1, keepdim=True)
    scale, zp = calculate_qparams(mn, mx, args)
    assert scale.dtype == torch.bfloat16
    scheme = QuantizationScheme(targets=["Linear"], weights=args, input_activations=input_acts)
    sd = compressor.compress({"weight": wb, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    # Reference dequantization in f32 from the stored tensors.
    if "weight_packed" in sd:
        q = unpack_from_int32(sd["weight_packed"], args.num_bits, sd["weight_shape"])
    else:
        q = sd["weight"]
    z = None
    if not args.symmetric:  # the stored zero points, unpacked as PackedQuantizationCompressor.decompress does
        zs, ng, b = sd["weight_zero_point"], K // G, args.num_bits
        if "weight_packed" in sd:
            assert zs.dtype == torch.int32 and tuple(zs.shape) == (-(-N * b // 32), ng), (zs.dtype, zs.shape)
            z = unpack_from_int32(zs, b, torch.Size([N, ng]), packed_dim=0)
        else:
            assert zs.dtype == torch.int8 and tuple(zs.shape) == (N, ng), (zs.dtype, zs.shape)
            z = zs
        assert torch.equal(z, zp), "stored zero points differ from calculate_qparams'"
        lo, hi = -2 ** (b - 1), 2 ** (b - 1) - 1
        # Both ends of the range (the top one up to the bf16 rounding of min / scale in calculate_qparams).
        assert (z == lo).any() and int(z.max()) >= hi - 2, ("zero points must reach both ends", int(z.min()), int(z.max()))
    ref = dequantize(q.to(torch.float32), sd["weight_scale"].to(torch.float32), z, args, dtype=torch.float32)
    if z is None:
        assert torch.equal(ref, q.to(torch.float32) * sd["weight_scale"].float().repeat_interleave(
            128 if args.strategy == "group" else K, dim=1)[:, :K])
    else:
        rep = lambda t: t.float().repeat_interleave(G, dim=1)  # noqa: E731
        assert torch.equal(ref, (q.float() - rep(z)) * rep(sd["weight_scale"]))
        # The library's own decompress (bf16: (q - z) is exact in bf16, one rounding of the product) agrees.
        dec = compressor.decompress(dict(sd), scheme)["weight"]
        assert dec.dtype == torch.bfloat16 and torch.equal(dec, ref.to(dec.dtype)), "decompress disagrees"
    return sd, ref


def fp_args(kind, strategy=None):
    """compressed-tensors 0.20.1 presets, weight-only: FP8 (float-quantized) tensor / channel / block [128, 128],
    NVFP4A16 (tensor_group 16, fp8 scales) and MXFP4A16 (group 32, E8M0 u8 scales)."""
    if kind == "fp8":
        kw = dict(num_bits=8, type="float", symmetric=True, strategy=strategy, dynamic=False, observer="minmax")
        if strategy == "block":
            kw["block_structure"] = [128, 128]
        return QuantizationArgs(**kw)
    if kind == "nvfp4":
        return QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", symmetric=True, dynamic=False,
                                group_size=16, scale_dtype=torch.float8_e4m3fn, zp_dtype=torch.float8_e4m3fn)
    return QuantizationArgs(num_bits=4, type="float", strategy="group", symmetric=True, dynamic=False,
                            group_size=32, scale_dtype=torch.uint8, zp_dtype=torch.uint8)


def fp_quantize(w, args):
    """FP8 / NVFP4 / MXFP4 through compressed_tensors' own qparams and compressors. Returns (compressed state dict,
    reference dequantized f32 weight [N, K]: its `dequantize` in float32 from the stored tensors)."""
    N, K = w.shape
    wb = w.to(torch.bfloat16)
    gs = None
    if args.num_bits == 8:
        if args.strategy == "tensor":
            mn, mx = wb.amin().reshape(1), wb.amax().reshape(1)
        elif args.strategy == "channel":
            mn, mx = wb.amin(dim=-1, keepdim=True), wb.amax(dim=-1, keepdim=True)
        else:
            nr, nc = -(-N // 128), -(-K // 128)
            pad = torch.zeros(nr * 128, nc * 128, dtype=wb.dtype)
            pad[:N, :K] = wb
            blk = pad.reshape(nr, 128, nc, 128).transpose(1, 2).reshape(nr, nc, -1)
            # Padding zeros never change a block's min/max here: 0 is always inside [min, max] (calculate_qparams).
            mn, mx = blk.amin(-1), blk.amax(-1)
        comp = FloatQuantizationCompressor
    else:
        G = args.group_size
        wg = wb.reshape(N, K // G, G)
        mn, mx = wg.amin(dim=-1), wg.amax(dim=-1)
        if args.group_size == 16:
            gs = generate_gparam(wb.amin().reshape(1).float(), wb.amax().reshape(1).float())
            comp = NVFP4PackedCompressor
        else:
            comp = MXFP4PackedCompressor
    scale, zp = calculate_qparams(mn, mx, args, global_scale=gs)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    state = {"weight": wb, "weight_scale": scale, "weight_zero_point": zp}
    if gs is not None:
        state["weight_global_scale"] = gs
    sd = comp.compress(state, scheme)
    if args.num_bits == 8:
        q = sd["weight"]
        assert q.dtype == torch.float8_e4m3fn
        ref = dequantize(q.to(torch.float32), sd["weight_scale"].to(torch.float32), None, args, dtype=torch.float32)
        sf = sd["weight_scale"].float()
        if args.strategy == "block":
            full = sf.repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]
        else:
            full = sf.expand(N, K) if sf.ndim == 2 else sf.reshape(1, 1).expand(N, K)
        assert torch.equal(ref, q.float() * full)
    else:
        assert sd["weight_packed"].dtype == torch.uint8 and sd["weight_packed"].shape == (N, K // 2)
        q = unpack_fp4_from_uint8(sd["weight_packed"], N, K, dtype=torch.float32)
        if gs is not None:
            assert sd["weight_scale"].dtype == torch.float8_e4m3fn and sd["weight_global_scale"].dtype == torch.float32
            sf = sd["weight_scale"].to(torch.float32)
            eff = sf / sd["weight_global_scale"]
        else:
            assert sd["weight_scale"].dtype == torch.uint8
            sf = decompress_mx_scale(sd["weight_scale"]).to(torch.float32)
            eff = sf
        ref = dequantize(q, sf, None, args, dtype=torch.float32, global_scale=sd.get("weight_global_scale"))
        assert torch.equal(ref, q * eff.repeat_interleave(args.group_size, dim=1))
        # The library's own decompressor (bf16 output) agrees with the f32 reference rounded to bf16.
        dec = comp.decompress(dict(sd), scheme)["weight"]
        assert torch.equal(dec, ref.to(dec.dtype)), "decompress disagrees"
    sd.pop("weight_zero_point", None)
    return sd, ref


def ct_config(groups, fmt, ignore):
    cg = {}
    for name, (targets, args, gfmt, ia) in groups.items():
        cg[name] = {"targets": targets, "format": gfmt, "weights": args.model_dump(mode="json"),
                    "input_activations": ia.model_dump(mode="json") if ia is not None else None,
                    "output_activations": None}
    return {"quant_method": "compressed-tensors", "version": VERSIONS["compressed-tensors"], "format": fmt,
            "quantization_status": "compressed", "global_compression_ratio": None, "ignore": ignore,
            "kv_cache_scheme": None, "sparsity_config": {}, "transform_config": {}, "config_groups": cg}


# ---------------------------------------------------------------------------------------------
# GPTQ (quant_formats.md §2, §4.1), written from the formulas
# ---------------------------------------------------------------------------------------------

def pack_along(codes: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Element i of `axis` goes to word i // pf, bits [b*(i % pf), b*(i % pf)+b) (§2.2)."""
    pf = 32 // bits
    c = np.moveaxis(codes.astype(np.uint32), axis, 0)
    assert c.shape[0] % pf == 0
    c = c.reshape(c.shape[0] // pf, pf, *c.shape[1:])
    words = np.zeros((c.shape[0], *c.shape[2:]), dtype=np.uint32)
    for j in range(pf):
        words |= c[:, j] << np.uint32(bits * j)
    return np.moveaxis(words, 0, axis).view(np.int32)


def gptq_quantize(w, bits, group_size, v2):
    """Sym GPTQ quantizer (RTN codes: what matters here is the storage format). w [N, K] f32."""
    N, K = w.shape
    G = K if group_size == -1 else group_size
    maxq = 2 ** bits - 1
    wt = w.t().contiguous()  # [K, N]
    ng = K // G
    scales = torch.empty(ng, N)
    codes = torch.empty(K, N, dtype=torch.int64)
    for g in range(ng):
        x = wt[g * G:(g + 1) * G]
        xmin = torch.minimum(x.amin(0), torch.zeros(N))
        xmax = torch.maximum(x.amax(0), torch.zeros(N))
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
        both0 = (xmin == 0) & (xmax == 0)
        xmin, xmax = torch.where(both0, -1.0, xmin), torch.where(both0, 1.0, xmax)
        s = ((xmax - xmin) / maxq).to(torch.float16)  # stored f16; codes use the stored scale
        scales[g] = s.float()
        codes[g * G:(g + 1) * G] = torch.clamp(torch.round(x / s.float()) + (maxq + 1) // 2, 0, maxq).long()
    z = 2 ** (bits - 1)
    qweight = pack_along(codes.numpy(), bits, 0)
    zeros = np.full((ng, N), z if v2 else z - 1, dtype=np.uint32)
    qzeros = pack_along(zeros, bits, 1)
    g_idx = torch.tensor([k // G for k in range(K)], dtype=torch.int32)
    ref = ((codes - z).float() * scales.repeat_interleave(G, dim=0)).t().contiguous()  # [N, K]
    # Cross-check the packing with compressed_tensors' unpacker (weight_packed.T == qweight, offset 2^(b-1)).
    un = unpack_from_int32(torch.from_numpy(qweight).t().contiguous(), bits, torch.Size([N, K]))
    assert torch.equal(un.long(), (codes - z).t()), "GPTQ packing disagrees with compressed_tensors"
    return {"qweight": torch.from_numpy(qweight), "qzeros": torch.from_numpy(qzeros),
            "scales": scales.to(torch.float16), "g_idx": g_idx}, ref


def gptq_quantize_general(w, bits, group_size, v2, sym, perm):
    """GPTQ storage of RTN codes with the §4.1 quantizer, asymmetric or not, with act-order groups: perm (a
    permutation of the K input columns, or None) makes group g the columns perm[g*G:(g+1)*G] and
    g_idx[perm[i]] = i // G (§4.3, desc_act without static groups). v1 zeros are written as GPTQModel does: the
    packed words minus 0x11111111 / 0x01010101 (whole-word, so a z = 0 field borrows from the next one).
    Returns (tensors, reference dequantization W[n, k] = s[g_idx[k], n] * (q[k, n] - z[g_idx[k], n]) in f32)."""
    N, K = w.shape
    G = K if group_size == -1 else group_size
    maxq = 2 ** bits - 1
    ng = -(-K // G)
    order = torch.arange(K) if perm is None else perm
    g_idx = torch.empty(K, dtype=torch.int32)
    g_idx[order] = (torch.arange(K) // G).to(torch.int32)
    wt = w.t().contiguous()  # [K, N]
    scales = torch.empty(ng, N)
    zeros = torch.empty(ng, N, dtype=torch.int64)
    codes = torch.empty(K, N, dtype=torch.int64)
    for g in range(ng):
        cols = order[g * G:(g + 1) * G]
        x = wt[cols]
        xmin = torch.minimum(x.amin(0), torch.zeros(N))
        xmax = torch.maximum(x.amax(0), torch.zeros(N))
        if sym:
            xmax = torch.maximum(xmin.abs(), xmax)
            xmin = torch.where(xmin < 0, -xmax, xmin)
        both0 = (xmin == 0) & (xmax == 0)
        xmin, xmax = torch.where(both0, -1.0, xmin), torch.where(both0, 1.0, xmax)
        s = ((xmax - xmin) / maxq).to(torch.float16).float()  # stored f16; codes use the stored scale
        z = torch.full((N,), (maxq + 1) // 2, dtype=torch.int64) if sym else torch.round(-xmin / s).long()
        scales[g], zeros[g] = s, z
        codes[cols] = torch.clamp(torch.round(x / s) + z, 0, maxq).long()
    qweight = pack_along(codes.numpy(), bits, 0)
    qzeros = pack_along(zeros.numpy().astype(np.uint32), bits, 1)
    if not v2:
        qzeros = (qzeros.view(np.uint32) - np.uint32(0x11111111 if bits == 4 else 0x01010101)).view(np.int32)
    assert sym or (zeros == 0).any(), "the asymmetric fixtures must exercise z = 0 (the v1 borrow)"
    gi = g_idx.long()
    ref = (scales[gi] * (codes - zeros[gi]).float()).t().contiguous()  # [N, K]
    un = unpack_from_int32(torch.from_numpy(qweight).t().contiguous(), bits, torch.Size([N, K]))
    assert torch.equal(un.long(), (codes - 2 ** (bits - 1)).t()), "GPTQ packing disagrees with compressed_tensors"
    return {"qweight": torch.from_numpy(qweight), "qzeros": torch.from_numpy(qzeros),
            "scales": scales.to(torch.float16), "g_idx": g_idx}, ref


def check_worked_examples():
    w = [15, 0, 10, 6, 8, 8, 12, 7]
    assert pack_along(np.array(w).reshape(8, 1), 4, 0)[0, 0] == 2089314831  # 0x7C886A0F, §2.6
    assert pack_along(np.full((1, 8), 7), 4, 1)[0, 0] == 0x77777777
    assert pack_along(np.array([[1, 0x80, 0xFF, 0x7F]]).T, 8, 0)[0, 0] == 2147450881
    # §2.3: v2 zeros [0,5,3,15,1,2,8,4] -> 0x4821F350; whole-word v1 -> 0x3710E23F.
    z = pack_along(np.array([[0, 5, 3, 15, 1, 2, 8, 4]], dtype=np.uint32), 4, 1).view(np.uint32)[0, 0]
    assert z == 0x4821F350 and np.uint32(z - np.uint32(0x11111111)) == 0x3710E23F


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

W8A8_INPUTS = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True,
                               observer=None)

FIXTURES = [
    # GPTQ variants the engine serves as exact f32 dequantizations (tiny base, fixture budget): asymmetric v1
    # (whole-word z - 1, with forced z = 0 groups so the borrow happens), and asymmetric v2 8-bit with act-order
    # (desc_act, g_idx from a random column permutation per module).
    dict(name="tiny-gptq-asym-w4g32", base="tiny", kind="gptq", bits=4, group=32, v2=False, sym=False,
         cfg_file="config"),
    dict(name="tiny-gptqv2-asym-actorder-w8g64", base="tiny", kind="gptq", bits=8, group=64, v2=True, sym=False,
         desc_act=True, cfg_file="config"),
    dict(name="qwen3-gptq-w4g128", base="qwen3", kind="gptq", bits=4, group=128, v2=False, cfg_file="config"),
    dict(name="qwen3-gptqv2-w8ch", base="qwen3", kind="gptq", bits=8, group=-1, v2=True, cfg_file="quantize_config"),
    dict(name="qwen3-ct-w4g128", base="qwen3", kind="ct",
         groups={"group_0": (["Linear"], ct_args(4, "group"), None, None)}, fmt="pack-quantized"),
    # Mixed precision: attention int4 g128 pack-quantized (regex target), MLP int8 per-channel W8A8
    # int-quantized (class target), lm_head left dense (ignore).
    # FP8 float-quantized with all three scale layouts: q/k/v per channel, o_proj per tensor, MLP block [128, 128].
    dict(name="tiny-ct-fp8", base="tiny", kind="ct",
         groups={"group_0": (["re:.*self_attn\\.(q|k|v)_proj$"], fp_args("fp8", "channel"), None, None),
                 "group_1": (["re:.*self_attn\\.o_proj$"], fp_args("fp8", "tensor"), None, None),
                 "group_2": (["re:.*mlp\\..*_proj$"], fp_args("fp8", "block"), None, None)},
         fmt="float-quantized"),
    dict(name="tiny-ct-nvfp4", base="tiny", kind="ct",
         groups={"group_0": (["Linear"], fp_args("nvfp4"), None, None)}, fmt="nvfp4-pack-quantized"),
    dict(name="tiny-ct-mxfp4", base="tiny", kind="ct",
         groups={"group_0": (["Linear"], fp_args("mxfp4"), None, None)}, fmt="mxfp4-pack-quantized"),
    # compressed-tensors asymmetric (symmetric: false + weight_zero_point; the engine serves them as exact f32):
    # int4 pack-quantized with group 32 (attention), per channel (gate / up) and group 128 (down); int8 mixed:
    # pack-quantized group 16 (attention), naive-quantized per channel (gate / up, W8A16) and int-quantized
    # group 128 with dynamic int8 inputs (down; the engine runs it weight-only).
    dict(name="tiny-ct-asym-w4", base="tiny", kind="ct",
         groups={"group_0": (["re:.*self_attn\\.(q|k|v|o)_proj$"], ct_args(4, "group", False, 32), None, None),
                 "group_1": (["re:.*mlp\\.(gate|up)_proj$"], ct_args(4, "channel", False), None, None),
                 "group_2": (["re:.*mlp\\.down_proj$"], ct_args(4, "group", False), None, None)},
         fmt="pack-quantized"),
    dict(name="tiny-ct-asym-w8-mixed", base="tiny", kind="ct",
         groups={"group_0": (["re:.*self_attn\\.(q|k|v|o)_proj$"], ct_args(8, "group", False, 16), "pack-quantized",
                             None),
                 "group_1": (["re:.*mlp\\.(gate|up)_proj$"], ct_args(8, "channel", False), "naive-quantized", None),
                 "group_2": (["re:.*mlp\\.down_proj$"], ct_args(8, "group", False), "int-quantized", W8A8_INPUTS)},
         fmt="mixed-precision"),
    dict(name="llama-ct-mixed", base="llama", kind="ct",
         groups={"group_0": (["re:.*self_attn\\.(q|k|v|o)_proj$"], ct_args(4, "group"), "pack-quantized", None),
                 "group_1": (["Linear"], ct_args(8, "channel"), "int-quantized", W8A8_INPUTS)},
         fmt="mixed-precision"),
]


def group_for(spec, module):
    """The group of a module (exact > regex > class), mirroring the C++ loader; None when ignored."""
    import re
    if module == "lm_head":
        return None
    best, level = None, 0
    for name, (targets, *_rest) in spec["groups"].items():
        for t in targets:
            lv = 3 if t == module else 2 if t.startswith("re:") and re.match(t[3:], module) else 1 if t == "Linear" else 0
            if lv > level:
                best, level = name, lv
    return best


def fake_quant_acts(_module, args):
    # vLLM's dynamic per-token int8 (quant_formats.md §3.7): one absmax per row, codes rni(x * (127 / absmax)).
    x = args[0]
    amax = x.abs().amax(-1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    q = torch.clamp(torch.round(x * inv), -128, 127)
    return (q * (amax / 127.0),)


@torch.no_grad()
def make_fixture(spec):
    base = BASES[spec["base"]]
    cfg, model = make_model(base)
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if base["tie"]:
        sd.pop("lm_head.weight", None)
    refs = {}
    qcfg = None
    for mod in linear_names(model):
        w = model.get_submodule(mod).weight.detach().clone()
        del sd[mod + ".weight"]
        if spec["kind"] == "gptq" and spec["base"] == "tiny":
            sym = spec.get("sym", True)
            perm = torch.randperm(w.shape[1], generator=torch.Generator().manual_seed(len(refs))) \
                if spec.get("desc_act") else None
            if not sym:  # a few all-nonnegative groups (group 0 of rows 0-3): zero point 0 (the v1 borrow case)
                g0 = torch.arange(spec["group"]) if perm is None else perm[:spec["group"]]
                w[0:4, g0] = w[0:4, g0].abs()
            tensors, ref = gptq_quantize_general(w, spec["bits"], spec["group"], spec["v2"], sym, perm)
        elif spec["kind"] == "gptq":
            tensors, ref = gptq_quantize(w, spec["bits"], spec["group"], spec["v2"])
        else:
            targets, args, gfmt, ia = spec["groups"][group_for(spec, mod)]
            if args.type == "float":
                tensors, ref = fp_quantize(w, args)
                for k, v in tensors.items():
                    sd[f"{mod}.{k}"] = v.contiguous()
                refs[mod] = ref
                model.get_submodule(mod).weight.copy_(ref)
                continue
            comp = {"pack-quantized": PackedQuantizationCompressor, "naive-quantized": NaiveQuantizationCompressor}.get(
                gfmt or spec["fmt"], IntQuantizationCompressor)
            if not args.symmetric:  # all-nonnegative / all-nonpositive rows: zero points -2^(b-1) and 2^(b-1) - 1
                w[0:2] = w[0:2].abs()
                w[2:4] = -w[2:4].abs()
            tensors, ref = ct_quantize(w, args, comp, ia)
        for k, v in tensors.items():
            sd[f"{mod}.{k}"] = v.contiguous()
        refs[mod] = ref
        model.get_submodule(mod).weight.copy_(ref)  # the HF reference runs the dequantized weights
    if spec["kind"] == "gptq":
        qcfg = {"bits": spec["bits"], "group_size": spec["group"], "damp_percent": 0.01,
                "desc_act": spec.get("desc_act", False), "static_groups": False, "sym": spec.get("sym", True), "true_sequential": True, "model_name_or_path": None,
                "model_file_base_name": "model", "quant_method": "gptq",
                "checkpoint_format": "gptq_v2" if spec["v2"] else "gptq"}
    else:
        qcfg = ct_config(spec["groups"], spec["fmt"], ["lm_head"])
    out = OUT / spec["name"]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg_dict = cfg.to_dict()
    if spec.get("cfg_file") == "quantize_config":
        (out / "quantize_config.json").write_text(json.dumps(qcfg, indent=2, sort_keys=True) + "\n")
    else:
        cfg_dict["quantization_config"] = qcfg
    (out / "config.json").write_text(json.dumps(cfg_dict, indent=2, sort_keys=True) + "\n")
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    # HF reference: the dequantized model in f32.
    golden = {}
    prompts = [[t % cfg.vocab_size for t in p] for p in PROMPTS]
    for i, ids in enumerate(prompts):
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        golden[f"p{i}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
        golden[f"p{i}.logits"] = logits.contiguous()
    # The same model with the engine's activation quantization simulated before every W8A8 linear (the
    # compressed-tensors groups with input_activations, run per token as they declare and vLLM runs them:
    # scale = max|x| / 127 over the row, code = round_half_even(x * (127 / max|x|))): the reference for the
    # native W8A8 path. Weight-only modules (GPTQ, W4A16 / W8A16, FP) keep f32 activations; a fixture without
    # W8A8 modules has no logits_a8.
    # Asymmetric W8A8 modules run weight-only in the engine (exact f32 dequantization): not simulated.
    a8 = [mod for mod in refs if spec["kind"] == "ct" and spec["groups"][group_for(spec, mod)][3] is not None
          and spec["groups"][group_for(spec, mod)][1].symmetric]
    if a8:
        hooks = [model.get_submodule(mod).register_forward_pre_hook(fake_quant_acts) for mod in a8]
        for i, ids in enumerate(prompts):
            golden[f"p{i}.logits_a8"] = model(input_ids=torch.tensor([ids])).logits[0].float().contiguous()
        for h in hooks:
            h.remove()
    k0 = "model.layers.0.self_attn.k_proj"
    d0 = "model.layers.0.mlp.down_proj"
    golden[f"ref.{k0}.weight"] = refs[k0].contiguous()
    golden[f"ref.{d0}.weight.rows16"] = refs[d0][:16].contiguous()
    save_file(golden, str(out / "golden.safetensors"), metadata={"n_prompts": str(len(PROMPTS))})
    # Reload check: the stored tensors decode to the references.
    back = load_file(str(out / "model.safetensors"))
    assert set(back) == set(sd)
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{spec['name']}: {size} bytes, {len(refs)} quantized modules")
    return size


README = """# Quantized-checkpoint fixtures

Generated by `scripts/make_quant_golden.py` (developers run it by hand; CI only reads these files; regenerating
is byte-for-byte reproducible). Versions: {versions}.

Tiny random models (vocab 256, hidden 128, intermediate 256, 4 heads / 2 KV heads of 32; qwen3: 2 layers, tied
embeddings; llama: 1 layer, untied). Dense tensors are bf16; every linear except lm_head is quantized:

| fixture | format | config |
|---|---|---|
| qwen3-gptq-w4g128 | GPTQ v1 (`gptq`, qzeros = z-1), int4 sym, group 128, trivial g_idx | config.json quantization_config |
| qwen3-gptqv2-w8ch | GPTQ `gptq_v2` (qzeros = z), int8 sym, group_size -1 (per channel) | quantize_config.json |
| qwen3-ct-w4g128 | compressed-tensors pack-quantized int4 sym group 128, ignore lm_head | config.json |
| tiny-ct-fp8 | compressed-tensors float-quantized FP8 E4M3 weights (weight-only): q/k/v per channel, o_proj per tensor, MLP block [128, 128]; tiny base (vocab 128, hidden 64, intermediate 256, 2 heads / 1 KV head of 32, 1 layer, tied) | config.json |
| tiny-ct-nvfp4 | compressed-tensors nvfp4-pack-quantized (NVFP4A16: E2M1, fp8 scale per 16, f32 weight_global_scale divisor), tiny base | config.json |
| tiny-ct-mxfp4 | compressed-tensors mxfp4-pack-quantized (MXFP4A16: E2M1, E8M0 u8 scale per 32), tiny base | config.json |
| tiny-gptq-asym-w4g32 | GPTQ v1 int4 **asymmetric** group 32 (qzeros = z packed minus 0x11111111 whole-word, GPTQModel; some z = 0), tiny base; loads as exact f32 | config.json |
| tiny-gptqv2-asym-actorder-w8g64 | GPTQ `gptq_v2` int8 asymmetric group 64, **desc_act** with g_idx from a random column permutation per module, tiny base; loads as exact f32 | config.json |
| tiny-ct-asym-w4 | compressed-tensors pack-quantized int4 **asymmetric** (weight_zero_point I32 packed along N): attention group 32, gate/up per channel, down group 128; zero points reach -8 and 7; tiny base; loads as exact f32 | config.json |
| tiny-ct-asym-w8-mixed | compressed-tensors mixed-precision int8 **asymmetric**: attention pack-quantized group 16 (zp I32 packed along N), gate/up naive-quantized per channel (zp I8 [N, 1]), down int-quantized group 128 with dynamic int8 inputs (zp I8 [N, 2]; the engine runs it weight-only); tiny base; loads as exact f32 | config.json |
| llama-ct-mixed | compressed-tensors mixed-precision: attention (regex target) pack-quantized int4 g128, MLP ("Linear") int-quantized int8 per channel with dynamic per-token int8 inputs (W8A8), lm_head ignored (dense) | config.json |

compressed-tensors tensors come from the library's own compressors (scales from its calculate_qparams); GPTQ
tensors are packed from the formulas of shared/docs/quant_formats.md §2 and cross-checked against
compressed_tensors' unpack_from_int32. `golden.safetensors`: p{{i}}.input_ids, p{{i}}.logits (HF, f32, on the
dequantized model), p{{i}}.logits_a8 (only fixtures with W8A8 modules: the same with the engine's per-row /
group-of-128 int8 activation quantization simulated before each W8A8 linear), ref.<module>.weight (reference dequantization of layer 0 k_proj, f32) and
ref.<module>.weight.rows16 (first 16 rows of layer 0 down_proj).
"""


def main():
    check_worked_examples()
    OUT.mkdir(parents=True, exist_ok=True)
    total = sum(make_fixture(s) for s in FIXTURES)
    versions = ", ".join(f"{k} {v}" for k, v in VERSIONS.items())
    (OUT / "README.md").write_text(README.format(versions=versions))
    total += (OUT / "README.md").stat().st_size
    print(f"total {total} bytes")
    # Budget 1.5 MB for the integer fixtures, raised to 1.75 MB for the three FP8 / NVFP4 / MXFP4 fixtures
    # (each < 150 KB on the smaller "tiny" base), to 2 MB for the two tiny GPTQ asym / act-order ones, and to
    # 2.3 MB for the two tiny compressed-tensors asymmetric ones (~90 and ~120 KB).
    assert total < 2_300_000, total


if __name__ == "__main__":
    main()
