#!/usr/bin/env python3
"""Golden fixtures for blockspec's GGUF reader and dequantizers.

Writes tests/fixtures/gguf/:
  types.gguf             one tensor per supported ggml type, random blocks (raw random bytes,
                         with every f16 scale field forced finite), plus one metadata key of
                         every value type (nested arrays too); general.alignment = 64.
  types_ref.safetensors  gguf.quants.dequantize() of each tensor, F32, same names and
                         row-major shapes (GGUF ne reversed).
  tiny_llama.gguf, tiny_qwen2.gguf
                         headers of 2-layer toy models (zero weights) with every key
                         config_from_gguf reads, for its unit tests.
  real_slices.gguf / real_slices_ref.safetensors
                         a few rows cut from the real SmolLM2 (Q8_0, Q4_1, F32) and
                         Qwen2.5-Coder-1.5B (Q4_K, Q6_K) GGUFs, if scripts/fetch_models.sh
                         has cached them (skipped otherwise; the committed files stay).

Run with the golden venv:
  /root/.cache/blockspec/venv-golden/bin/pip install gguf==0.19.0 numpy safetensors
  /root/.cache/blockspec/venv-golden/bin/python scripts/make_gguf_golden.py
The C++ golden test (tests/formats/gguf_golden_test.cc) compares bit for bit.
"""
import importlib.metadata
import os
import sys
from pathlib import Path

import numpy as np

GGUF_VERSION = "0.19.0"
found = importlib.metadata.version("gguf")
if found != GGUF_VERSION:
    sys.exit(f"make_gguf_golden.py: needs gguf=={GGUF_VERSION}, found {found}")

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf"
CACHE = Path(os.environ.get("BLOCKSPEC_CACHE", Path.home() / ".cache" / "blockspec")) / "models"

# Byte offsets of the f16 fields (scales/mins) inside one block, per type
# (ggml-common.h block_* structs).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def finite_f16_bits(rng, n):
    """Random binary16 bit patterns, never inf/NaN (exponent 31 -> 30)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    exp = (bits >> 10) & 0x1F
    bits = np.where(exp == 0x1F, bits & np.uint16(0xFBFF), bits)
    return bits.astype(np.uint16)


def random_blocks(rng, qtype, n_rows, n_cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert n_cols % block == 0
    raw = rng.integers(0, 256, size=(n_rows, n_cols // block, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[..., off:off + 2] = finite_f16_bits(rng, raw.shape[:2]).view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw.reshape(n_rows, -1)


def add_metadata(w):
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo\nwörld")
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float64("test.f64", -2.5e-300)
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_f32", [0.5, -1.25])
    w.add_array("test.array_bool", [True, False, True])
    w.add_array("test.array_str", ["a", "", "ccc"])
    w.add_array("test.array_u8", b"\x01\xff")
    # The writer refuses empty arrays; the C++ unit tests cover them with hand-made bytes.
    w.add_array("test.array_nested", [[1, 2], ["x", "yz"]])


def write_types(rng):
    w = gguf.GGUFWriter(str(OUT / "types.gguf"), "test")
    w.add_custom_alignment(64)
    add_metadata(w)
    ref = {}
    # F32: random normals; F16: random finite bit patterns plus the special
    # values (inf, -0, smallest subnormal, max); BF16: any bits, NaNs included
    # (its dequantization is a pure shift, so NaN payloads compare exactly).
    f32 = rng.standard_normal((3, 40)).astype(np.float32)
    w.add_tensor("f32", f32, raw_dtype=T.F32)
    ref["f32"] = gguf.quants.dequantize(f32, T.F32)
    f16 = finite_f16_bits(rng, (3, 40))
    f16.reshape(-1)[:5] = [0x7C00, 0xFC00, 0x8000, 0x0001, 0x7BFF]
    w.add_tensor("f16", f16.view(np.uint8), raw_dtype=T.F16)
    ref["f16"] = gguf.quants.dequantize(f16.view(np.uint8), T.F16)
    bf16 = rng.integers(0, 256, size=(3, 80), dtype=np.uint8)
    w.add_tensor("bf16", bf16, raw_dtype=T.BF16)
    ref["bf16"] = gguf.quants.dequantize(bf16, T.BF16)
    for qtype, (rows, cols) in {
        T.Q4_0: (3, 64), T.Q4_1: (3, 64), T.Q5_0: (3, 64), T.Q5_1: (3, 64), T.Q8_0: (3, 64),
        T.Q2_K: (2, 512), T.Q3_K: (2, 512), T.Q4_K: (2, 512), T.Q5_K: (2, 512), T.Q6_K: (2, 512),
    }.items():
        name = qtype.name.lower()
        raw = random_blocks(rng, qtype, rows, cols)
        w.add_tensor(name, raw, raw_dtype=qtype)
        ref[name] = gguf.quants.dequantize(raw, qtype)
        assert ref[name].shape == (rows, cols), (name, ref[name].shape)
    # A 3-D tensor: ne = [32, 2, 2] is row-major [2, 2, 32].
    q3d = random_blocks(rng, T.Q8_0, 4, 32).reshape(2, 2, 34)
    w.add_tensor("q8_0_3d", q3d, raw_dtype=T.Q8_0)
    ref["q8_0_3d"] = gguf.quants.dequantize(q3d, T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in ref.items()},
              str(OUT / "types_ref.safetensors"))


def write_real_slices():
    sources = {
        "smollm2": [("token_embd.weight", 2), ("blk.0.attn_q.weight", 2), ("blk.0.ffn_down.weight", 1),
                    ("blk.0.attn_norm.weight", None)],
        "qwen2.5-coder-1.5b": [("blk.0.attn_q.weight", 1), ("blk.0.ffn_down.weight", 1), ("output.weight", 1)],
    }
    if not all((CACHE / f"{m}.gguf").exists() for m in sources):
        print("make_gguf_golden.py: real models not cached; keeping the committed real_slices files")
        return
    w = gguf.GGUFWriter(str(OUT / "real_slices.gguf"), "test")
    ref = {}
    for model, tensors in sources.items():
        reader = gguf.GGUFReader(str(CACHE / f"{model}.gguf"))
        by_name = {t.name: t for t in reader.tensors}
        for tname, rows in tensors:
            t = by_name[tname]
            data = np.asarray(t.data)
            if rows is not None:
                data = data[:rows]
            name = f"{model}/{tname}"
            w.add_tensor(name, np.ascontiguousarray(data),
                         raw_dtype=t.tensor_type if t.tensor_type != T.F32 else None)
            ref[name] = gguf.quants.dequantize(np.ascontiguousarray(data), t.tensor_type)
            print(f"  {name}: {t.tensor_type.name} {list(data.shape)} -> {list(ref[name].shape)}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in ref.items()},
              str(OUT / "real_slices_ref.safetensors"))


def write_tiny_model(arch, path, with_output, with_bias, rope_scaling):
    """A tiny model header written by the reference writer, for config_from_gguf:
    hidden 8, 2 layers, 2 q heads / 1 kv head (head_dim 4), ffn 16, vocab 6."""
    hidden, n_layers, n_heads, n_kv, ffn, vocab = 8, 2, 2, 1, 16, 6
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(1000000.0 if arch == "qwen2" else 10000.0)
    w.add_layer_norm_rms_eps(1e-6 if arch == "qwen2" else 1e-5)
    w.add_rope_dimension_count(hidden // n_heads)
    if rope_scaling == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
        w.add_rope_scaling_orig_ctx_len(32768)
    elif rope_scaling == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(2.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(arch)
    w.add_token_list(["a", "b", "ab", "<s>", "</s>", "<pad>"])
    w.add_token_types([1, 1, 1, 3, 3, 3])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(3)
    w.add_eos_token_id(4)
    w.add_pad_token_id(5)
    w.add_chat_template("{{ messages }}")
    z = lambda *shape: np.zeros(shape, dtype=np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", z(vocab, hidden))
    w.add_tensor("output_norm.weight", z(hidden))
    if with_output:
        w.add_tensor("output.weight", z(vocab, hidden))
    hd = hidden // n_heads
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", z(hidden))
        w.add_tensor(f"blk.{i}.attn_q.weight", z(n_heads * hd, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", z(n_kv * hd, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", z(n_kv * hd, hidden))
        if with_bias:
            w.add_tensor(f"blk.{i}.attn_q.bias", z(n_heads * hd))
            w.add_tensor(f"blk.{i}.attn_k.bias", z(n_kv * hd))
            w.add_tensor(f"blk.{i}.attn_v.bias", z(n_kv * hd))
        w.add_tensor(f"blk.{i}.attn_output.weight", z(hidden, n_heads * hd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", z(hidden))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", z(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", z(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", z(hidden, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    write_types(np.random.default_rng(20240611))
    write_tiny_model("llama", OUT / "tiny_llama.gguf", with_output=False, with_bias=False, rope_scaling="linear")
    write_tiny_model("qwen2", OUT / "tiny_qwen2.gguf", with_output=True, with_bias=True, rope_scaling="yarn")
    write_real_slices()
    for p in sorted(OUT.iterdir()):
        print(f"{p.relative_to(ROOT)}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
