#!/root/.cache/blockspec/venv-golden/bin/python
"""Writes the safetensors golden fixtures in tests/fixtures/safetensors/.

Every .safetensors file here is produced by the reference implementation
(safetensors.torch.save_file, pinned below); the sharded checkpoint is split
with huggingface_hub.split_torch_state_dict_into_shards and indexed exactly as
transformers' save_pretrained writes model.safetensors.index.json.
tests/formats/safetensors_golden_test.cc reads them back through our reader,
checks every value against manifest.json, and re-writes every file with
write_safetensors, requiring identical bytes. So CI needs no Python.

Metadata has at most one key per file: the reference keeps metadata in a Rust
HashMap, so two or more keys come out in a different order on each run.

Run:  /root/.cache/blockspec/venv-golden/bin/python scripts/make_safetensors_golden.py
"""
import json
import os
import shutil
import struct
import sys

import huggingface_hub
import numpy
import safetensors
import torch
from safetensors.torch import load_file, save_file

PINNED = {"safetensors": "0.8.0", "torch": "2.15.0", "huggingface_hub": "2.4.0"}
for mod, want in [(safetensors, PINNED["safetensors"]), (torch, PINNED["torch"]),
                  (huggingface_hub, PINNED["huggingface_hub"])]:
    have = mod.__version__.split("+")[0]
    assert have == want, f"{mod.__name__} {have} != pinned {want}; regenerate deliberately and update PINNED"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "safetensors")

DTYPE_NAMES = {
    torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
    torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.int64: "I64",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.bool: "BOOL", torch.uint16: "U16",
}


def values_of(t):
    """Expected element values as JSON numbers: floats as float64 (exact for
    every dtype here), integers as ints, bools as 0/1."""
    if t.dtype == torch.bool or not t.is_floating_point():
        return [int(v) for v in t.flatten().to(torch.int64).tolist()]
    return [float(v) for v in t.flatten().to(torch.float64).tolist()]


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def describe(path, tensors, metadata):
    """Manifest record for one file, checked against a reload by the reference."""
    back = load_file(path)
    assert set(back) == set(tensors)
    entries = {}
    for name, t in tensors.items():
        raw = raw_bytes(t)
        assert back[name].dtype == t.dtype and back[name].shape == t.shape and raw_bytes(back[name]) == raw
        entries[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                         "bytes_hex": raw.hex(), "values": values_of(t)}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = f.read(n)
    assert n % 8 == 0 and header.startswith(b"{")
    return {"metadata": metadata or {}, "tensors": entries, "size": os.path.getsize(path)}


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    g = torch.Generator().manual_seed(1234)
    manifest = {"generator": {k: v for k, v in PINNED.items()}, "files": {}}

    # Every dtype the loader meets in practice, plus scalar and zero-size
    # shapes; names exercise the writer's sort (dtype first, then bytes) and
    # serde's escaping (quote, backslash, control byte, non-ASCII).
    f32 = torch.randn(3, 5, generator=g)
    tensors = {
        "model.embed_tokens.weight": torch.randn(4, 6, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(7, generator=g).to(torch.float16),
        "lm_head.weight": f32,
        "f64": torch.randn(2, 2, generator=g).to(torch.float64),
        "scale": torch.tensor(0.125),  # shape []
        "empty": torch.zeros(0, 4),  # zero-size dim: no bytes
        "qweight": torch.randint(-2**31, 2**31 - 1, (2, 3), generator=g, dtype=torch.int32),
        "i16": torch.randint(-2**15, 2**15 - 1, (3,), generator=g, dtype=torch.int16),
        "u16": torch.randint(0, 2**16 - 1, (3,), generator=g, dtype=torch.int32).to(torch.uint16),
        "g_idx": torch.randint(-128, 127, (5,), generator=g, dtype=torch.int8),
        "packed": torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8),
        "weight_shape": torch.tensor([4096, 11008, -1], dtype=torch.int64),
        "fp8": (torch.randn(6, generator=g) * 4).to(torch.float8_e4m3fn),
        "fp8_e5m2": (torch.randn(4, generator=g) * 4).to(torch.float8_e5m2),
        "mask": torch.tensor([True, False, True, True, False]),
        "weird \"name\"\\\t\x01 é→😀": torch.arange(3, dtype=torch.float32),
        "Z_upper": torch.ones(1),
    }
    files = {
        "all_dtypes.safetensors": (tensors, {"format": "pt"}),
        "no_metadata.safetensors": ({"b": torch.arange(4, dtype=torch.int32),
                                     "a": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)}, None),
        "empty.safetensors": ({}, None),
        "gptq_metadata.safetensors": ({"model.layers.0.mlp.up_proj.qweight":
                                       torch.randint(-2**31, 2**31 - 1, (1, 8), generator=g, dtype=torch.int32),
                                       "model.layers.0.mlp.up_proj.scales": torch.rand(1, 8, generator=g).half()},
                                      {"gptq_bits": "4"}),
    }
    for name, (ts, md) in files.items():
        path = os.path.join(OUT, name)
        save_file(ts, path, metadata=md)
        manifest["files"][name] = describe(path, ts, md)

    # Sharded checkpoint, split the way transformers' save_pretrained does.
    sd = {f"model.layers.{i}.{p}": torch.randn(8, 8, generator=g).to(torch.bfloat16)
          for i in range(3) for p in ("self_attn.q_proj.weight", "mlp.up_proj.weight")}
    sd["model.norm.weight"] = torch.ones(8)
    split = huggingface_hub.split_torch_state_dict_into_shards(
        sd, filename_pattern="model{suffix}.safetensors", max_shard_size=400)
    assert split.is_sharded and len(split.filename_to_tensors) >= 2
    sharded = os.path.join(OUT, "sharded")
    os.makedirs(sharded)
    for fname, names in split.filename_to_tensors.items():
        shard = {n: sd[n] for n in names}
        path = os.path.join(sharded, fname)
        save_file(shard, path, metadata={"format": "pt"})
        manifest["files"]["sharded/" + fname] = describe(path, shard, {"format": "pt"})
    index = {"metadata": {"total_size": split.metadata["total_size"]}, "weight_map": split.tensor_to_filename}
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")  # as transformers writes it
    manifest["sharded"] = {"dir": "sharded", "weight_map": split.tensor_to_filename,
                           "total_size": split.metadata["total_size"]}

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(OUT) for n in ns)
    assert total < 200_000, f"fixtures are {total} bytes; keep them under 200 KB"
    print(f"wrote {OUT} ({total} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
