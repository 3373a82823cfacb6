#!/usr/bin/env python3
"""Golden for `blockspec quantize`'s writers: what the reference compressed-tensors library unpacks from
checkpoints blockspec wrote (tests/fixtures/quantize/; the C++ side is tests/quantize/quantize_golden_test.cc).

Developers run this by hand after building blockspec; CI only reads the committed outputs:

    ~/.cache/blockspec/venv-golden/bin/python scripts/make_quantize_golden.py [path/to/blockspec]

Input: tests/fixtures/quantize/input-h128, a random 1-layer Qwen3 written by this script (bf16; hidden 128,
intermediate 256, so every K is a multiple of 128: compressed-tensors rejects partial groups). For each case it runs
`blockspec quantize` on it, keeping two modules quantized (k_proj [64, 128] and down_proj [128, 256]), and stores
  <case>.safetensors  the two modules' tensors exactly as blockspec wrote them (the fixture), metadata
                      "quantization_config" = the config.json entry;
  golden.safetensors  per case and module, from compressed-tensors 0.20.1's own unpackers / decompressors:
    <case>.<module>.codes  BF16 [R, K]: the element values (int: signed code q; fp8: E4M3 value; fp4: E2M1 value;
                           all exact in bf16) of the first R rows (all 64 of k_proj, 16 of down_proj: fixture size)
    <case>.<module>.scale  F32: the per-group scales as the library reads them (NVFP4: the E4M3 local scale,
                           MXFP4: 2^(e-127)), shape as stored
    <case>.<module>.zero   F32 [N, ng]: signed zero points (asym only)
    <case>.<module>.gscale F32 [1]: NVFP4 weight_global_scale
    <case>.<module>.deq    F32 [16, K]: the library's dequantization in float32, first 16 rows
GPTQ cases have no reference library installed (GPTQModel / AutoGPTQ are not available offline): their qweight is
unpacked with compressed-tensors' unpack_from_int32 through the §3.3 equivalence weight_packed = qweight.T, qzeros
along N likewise (v1: field + 1; v2: field), and dequantized as s * (q - z) (quant_formats.md §2.1).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests/fixtures/quantize"
PINNED = {"compressed-tensors": "0.20.1", "safetensors": "0.8.0", "torch": "2.15.0"}

import compressed_tensors  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402

found = {"compressed-tensors": compressed_tensors.__version__.split("+")[0], "safetensors": safetensors.__version__,
         "torch": torch.__version__.split("+")[0]}
if any(found[k] != v for k, v in PINNED.items()):
    sys.exit(f"make_quantize_golden.py: need {PINNED}, found {found}")

from compressed_tensors.compressors.mx_utils import decompress_mx_scale  # noqa: E402
from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import IntQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8  # noqa: E402
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import dequantize  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

MODULES = ["model.layers.0.self_attn.k_proj", "model.layers.0.mlp.down_proj"]
KEEP = ["--ignore", "*.q_proj", "--ignore", "*.v_proj", "--ignore", "*.o_proj", "--ignore", "*.gate_proj",
        "--ignore", "*.up_proj"]
INPUT = OUT / "input-h128"
# name, input fixture, flags
CASES = [
    ("ct_w4a16", "input-h128", ["--scheme", "w4a16"]),
    ("ct_w4a16_asym", "input-h128", ["--scheme", "w4a16", "--asym"]),
    ("ct_w8a16_channel", "input-h128", ["--scheme", "w8a16", "--group", "-1"]),
    ("ct_w8a16_asym", "input-h128", ["--scheme", "w8a16", "--asym"]),
    ("ct_w8a8", "input-h128", ["--scheme", "w8a8"]),
    ("ct_fp8_channel", "input-h128", ["--scheme", "fp8"]),
    ("ct_fp8_tensor", "input-h128", ["--scheme", "fp8", "--fp8-strategy", "tensor"]),
    ("ct_nvfp4", "input-h128", ["--scheme", "nvfp4"]),
    ("ct_mxfp4", "input-h128", ["--scheme", "mxfp4"]),
    ("gptq_w4", "input-h128", ["--scheme", "w4a16", "--format", "gptq"]),
    ("gptq_w8_asym", "input-h128", ["--scheme", "w8a16", "--asym", "--format", "gptq"]),
]


def finish(golden, g, codes, deq, mod):
    rows = codes.shape[0] if "k_proj" in mod else 16
    golden[g + ".codes"] = codes[:rows].to(torch.bfloat16).contiguous()
    assert torch.equal(golden[g + ".codes"].float(), codes[:rows].float()), "codes not exact in bf16"
    golden[g + ".deq"] = deq[:16].float().contiguous()


def ct_reference(qc, sd, mod, case, golden):
    group = next(iter(qc["config_groups"].values()))
    fmt = group["format"] or qc["format"]
    args = QuantizationArgs(**{k: v for k, v in group["weights"].items() if v is not None or k == "group_size"})
    scheme = QuantizationScheme(targets=group["targets"], weights=args)
    st = {k[len(mod) + 1:]: v for k, v in sd.items() if k.startswith(mod + ".")}
    g = f"{case}.{mod}"
    if fmt == "pack-quantized":
        shape = torch.Size(st["weight_shape"].tolist())
        q = unpack_from_int32(st["weight_packed"], args.num_bits, shape)
        zp = None
        if "weight_zero_point" in st:
            ng = st["weight_scale"].shape[1]
            zp = unpack_from_int32(st["weight_zero_point"], args.num_bits, torch.Size([shape[0], ng]), packed_dim=0)
            golden[g + ".zero"] = zp.float().contiguous()
        dec = PackedQuantizationCompressor.decompress(dict(st), scheme)["weight"]
        deq = dequantize(q.float(), st["weight_scale"].float(), zp.float() if zp is not None else None, args,
                         dtype=torch.float32)
        assert torch.equal(dec, deq.to(dec.dtype)), "decompress disagrees"
        codes = q.float()
        golden[g + ".scale"] = st["weight_scale"].float().contiguous()
    elif fmt in ("int-quantized", "float-quantized"):
        comp = IntQuantizationCompressor if fmt == "int-quantized" else FloatQuantizationCompressor
        q = st["weight"]
        dec = comp.decompress(dict(st), scheme)["weight"]
        deq = dequantize(q.float(), st["weight_scale"].float(), None, args, dtype=torch.float32)
        assert torch.equal(dec.float(), deq.to(dec.dtype).float()), "decompress disagrees"
        codes = q.float()
        golden[g + ".scale"] = st["weight_scale"].float().reshape(-1).contiguous()
    else:  # nvfp4 / mxfp4
        N, half = st["weight_packed"].shape
        q = unpack_fp4_from_uint8(st["weight_packed"], N, half * 2, dtype=torch.float32)
        if fmt == "nvfp4-pack-quantized":
            sf = st["weight_scale"].float()
            gs = st["weight_global_scale"]
            golden[g + ".gscale"] = gs.float().contiguous()
            deq = dequantize(q, sf, None, args, dtype=torch.float32, global_scale=gs)
            dec = NVFP4PackedCompressor.decompress(dict(st), scheme)["weight"]
        else:
            sf = decompress_mx_scale(st["weight_scale"]).float()
            deq = dequantize(q, sf, None, args, dtype=torch.float32)
            dec = MXFP4PackedCompressor.decompress(dict(st), scheme)["weight"]
        assert torch.equal(dec.float(), deq.to(dec.dtype).float()), "decompress disagrees"
        codes = q
        golden[g + ".scale"] = sf.contiguous()
    finish(golden, g, codes, deq, mod)


def gptq_reference(qc, sd, mod, case, golden):
    b = qc["bits"]
    qweight, qzeros, scales = sd[mod + ".qweight"], sd[mod + ".qzeros"], sd[mod + ".scales"]
    K, N = qweight.shape[0] * 32 // b, qweight.shape[1]
    ng = scales.shape[0]
    q = unpack_from_int32(qweight.t().contiguous(), b, torch.Size([N, K]))  # signed: u - 2^(b-1)
    z = unpack_from_int32(qzeros.contiguous(), b, torch.Size([ng, N])).t()  # [N, ng]: field - 2^(b-1), packed along N
    off = 1 << (b - 1)
    zfield = z.long() + off  # the stored field, unsigned
    zero = zfield + (1 if qc["checkpoint_format"] == "gptq" else 0)  # v1 stores z - 1
    G = qc["group_size"] if qc["group_size"] != -1 else K
    gidx = sd[mod + ".g_idx"].long()
    assert torch.equal(gidx, torch.arange(K) // G), "g_idx not trivial"
    s = scales.float().t()  # [N, ng]
    deq = s[:, gidx] * ((q.long() + off) - zero[:, gidx]).float()
    g = f"{case}.{mod}"
    golden[g + ".scale"] = s.contiguous()
    if not qc["sym"]:
        golden[g + ".zero"] = (zero - off).float().contiguous()
    finish(golden, g, q.float(), deq, mod)


def make_input():
    """Random 1-layer Qwen3, bf16 (tied embeddings; vocab 64)."""
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 64, "hidden_size": 128,
           "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "tie_word_embeddings": True, "attention_bias": False, "torch_dtype": "bfloat16",
           "bos_token_id": 1, "eos_token_id": 2}
    g = torch.Generator().manual_seed(5)
    p = "model.layers.0."
    shapes = {"model.embed_tokens.weight": (64, 128), "model.norm.weight": (128,), p + "input_layernorm.weight": (128,),
              p + "post_attention_layernorm.weight": (128,), p + "self_attn.q_norm.weight": (64,),
              p + "self_attn.k_norm.weight": (64,), p + "self_attn.q_proj.weight": (128, 128),
              p + "self_attn.k_proj.weight": (64, 128), p + "self_attn.v_proj.weight": (64, 128),
              p + "self_attn.o_proj.weight": (128, 128), p + "mlp.gate_proj.weight": (256, 128),
              p + "mlp.up_proj.weight": (256, 128), p + "mlp.down_proj.weight": (128, 256)}
    sd = {}
    for n, s in shapes.items():
        t = 0.8 + 0.4 * torch.rand(s, generator=g) if "norm" in n else 0.1 * torch.randn(s, generator=g)
        if n.endswith("k_proj.weight"):
            t[5] = t[5].abs()  # a row with no negative value (sym scale from max alone)
            t[7, :128] = 0.0   # an all-zero row (zero-scale fallback)
        sd[n] = t.to(torch.bfloat16).contiguous()
    INPUT.mkdir(parents=True, exist_ok=True)
    (INPUT / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(sd, str(INPUT / "model.safetensors"), metadata={"format": "pt"})


def main():
    make_input()
    exe = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "build/blockspec")
    OUT.mkdir(parents=True, exist_ok=True)
    golden = {}
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fixture, flags in CASES:
            out = Path(tmp) / name
            subprocess.run([exe, "quantize", str(OUT / fixture), str(out), *flags, *KEEP,
                            "--threads", "1"], check=True, stdout=subprocess.DEVNULL)
            qc = json.loads((out / "config.json").read_text())["quantization_config"]
            sd = load_file(str(out / "model.safetensors"))
            keep = {k: v for k, v in sd.items() if any(k.startswith(m + ".") for m in MODULES) and
                    not (k.endswith(".weight") and v.dtype in (torch.float32, torch.bfloat16))}
            save_file(keep, str(OUT / f"{name}.safetensors"), metadata={"format": "pt"})
            cases[name] = {"input": fixture, "flags": flags, "quantization_config": qc}
            for mod in MODULES:
                (gptq_reference if qc["quant_method"] == "gptq" else ct_reference)(qc, sd, mod, name, golden)
            print(f"{name}: {sorted(keep)}")
    save_file(golden, str(OUT / "golden.safetensors"), metadata={"format": "pt"})
    (OUT / "cases.json").write_text(json.dumps({"modules": MODULES, "keep_flags": KEEP, "cases": cases,
                                                "versions": found}, indent=2) + "\n")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
