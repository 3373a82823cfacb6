#!/root/.cache/blockspec/venv-golden/bin/python
"""Writes the safetensors golden fixtures in tests/fixtures/safetensors/.

Every .safetensors file here is produced by the reference implementation
(safetensors.torch.save_file, pinned below); the sharded checkpoint is split
with huggingface_hub.split_torch_state_dict_into_shards and indexed exactly as
transformers' save_pretrained writes model.safetensors.index.json.
tests/formats/safetensors_golden_test.cc reads them back through our reader,
checks every value against manifest.json, and re-writes every file with
write_safetensors, requiring identical bytes; differential.json holds random
and corrupted headers with the reference reader's accept/reject verdict, which
ours must match. So CI needs no Python.

Metadata has at most one key per file: the reference keeps metadata in a Rust
HashMap, so two or more keys come out in a different order on each run.

Run:  /root/.cache/blockspec/venv-golden/bin/python scripts/make_safetensors_golden.py
"""
import json
import os
import random
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


# ---- Differential cases: random valid files and structured corruptions of
# them, each judged by the reference reader (safetensors.deserialize). The C++
# golden test requires the same accept/reject verdict on every one. Kept out of
# the generator: the inputs where we are deliberately stricter (duplicate keys,
# unknown tensor fields, leading whitespace, dimensions >= 2^63), which the
# unit tests cover.
BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "F16": 16,
        "BF16": 16, "I32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}


def random_entries(rng):
    entries, off = [], 0
    for i in range(rng.randint(0, 4)):
        dtype = rng.choice(list(BITS))
        shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * BITS[dtype] // 8
        entries.append([f"t{i}", dtype, shape, [off, off + nbytes]])
        off += nbytes
    return entries, off


def corrupt(rng, entries, data_len):
    e = rng.choice(entries) if entries else None
    m = rng.randint(0, 11)
    if m == 0 and e:
        e[3][1] += rng.choice([-1, 1])
    elif m == 1 and e:
        e[3][0] += rng.choice([-1, 1])
    elif m == 2 and e:
        e[2].append(rng.choice([0, 1, 3, 2**31, 2**62, 2**63 - 1, -1]))
    elif m == 3 and e:
        e[1] = rng.choice(["F33", "f32", "", "BF16", "F4", "F6_E3M2", "C64", "U16", 7, None])
    elif m == 4:
        data_len += rng.choice([-1, 1, 8])
    elif m == 5 and len(entries) > 1:
        entries[0][3], entries[1][3] = entries[1][3], entries[0][3]
    elif m == 6 and e:
        e[3] = rng.choice([[e[3][0], e[3][1], 0], [e[3][0]], [], [e[3][0], 1.5], "0,1"])
    elif m == 7 and e:
        e[2] = rng.choice([[rng.randint(0, 5) for _ in range(rng.randint(0, 5))], [2.0], ["2"], 3, [[1]]])
    elif m == 8 and e:
        e[3] = [rng.randint(0, data_len + 2), rng.randint(0, data_len + 2)]
    elif m == 9 and e:
        e.append(rng.choice(["dtype", "shape", "data_offsets"]))  # marks a field to drop
    return entries, data_len


def render(rng, entries, metadata):
    parts = [] if metadata is None else ['"__metadata__":' + json.dumps(metadata)]
    for e in entries:
        fields = {"dtype": e[1], "shape": e[2], "data_offsets": e[3]}
        if len(e) > 4:
            del fields[e[4]]
        parts.append(json.dumps(e[0]) + ":" + json.dumps(fields))
    rng.shuffle(parts)
    header = "{" + ",".join(parts) + "}"
    style = rng.randint(0, 3)
    if style == 1:
        header += " " * rng.randint(0, 9)
    elif style == 2:
        header += rng.choice(["\n", "\t", "\r", "x", "}", "\0", " \0"])
    elif style == 3:
        header = header.replace(": ", ":").replace(", ", ",")
    return header


def differential_cases(n):
    rng = random.Random(20261130)
    cases, verdicts = [], {True: 0, False: 0}
    while len(cases) < n:
        entries, data_len = random_entries(rng)
        if rng.random() < 0.6:
            entries, data_len = corrupt(rng, entries, data_len)
        metadata = rng.choice([None, {"format": "pt"}, {}, {"a": 1}, {"k": ["v"]}, "pt", None])
        header = render(rng, entries, metadata)
        raw = header.encode()
        blob = struct.pack("<Q", len(raw)) + raw + b"\x5a" * max(data_len, 0)
        try:
            safetensors.deserialize(blob)
            ok = True
        except Exception:  # SafetensorError; the verdict is what matters
            ok = False
        verdicts[ok] += 1
        cases.append({"header": header, "data_len": max(data_len, 0), "accept": ok})
    assert min(verdicts.values()) > n // 5, f"unbalanced verdicts {verdicts}"
    return cases


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
        "metadata_only.safetensors": ({}, {"note": "tab\there \"quoted\" \\ é\x01\x7f/"}),
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

    with open(os.path.join(OUT, "differential.json"), "w") as f:
        # One case per line keeps the file small and its diffs readable.
        f.write('{"about": "header + data_len bytes of 0x5a, and the reference reader\'s verdict",\n"cases": [\n')
        f.write(",\n".join(json.dumps(c) for c in differential_cases(400)))
        f.write("\n]}\n")

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(OUT) for n in ns)
    assert total < 200_000, f"fixtures are {total} bytes; keep them under 200 KB"
    print(f"wrote {OUT} ({total} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
