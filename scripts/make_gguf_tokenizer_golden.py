#!/usr/bin/env python3
"""Golden token ids for Tokenizer::from_gguf_vocab, from the real GGUF files.

For each model GGUF cached by scripts/fetch_models.sh (smollm2,
qwen2.5-coder-1.5b), reads the tokenizer metadata with the `gguf` package and
writes under tests/fixtures/tokenizer_gguf/:

  <model>.vocab.json   the tokenizer.ggml.* metadata the C++ test turns into a
                       GgufVocab: model, pre, tokens, token types (sparse:
                       type -> ids, every other id NORMAL), merges, special
                       ids, plus FNV-1a 64 hashes of the token and merge lists
                       (each string's UTF-8 followed by a NUL byte). When the
                       file's vocabulary and merges equal those of the shared
                       Qwen3 tokenizer.json (true for Qwen2.5), only the tokens
                       past that vocabulary are stored ("base"), to keep the
                       fixture small; the hashes prove the rebuilt lists equal
                       the file's.
  <model>.golden.json  per corpus document (the documents of
                       make_tokenizer_golden.py, rebuilt by golden_corpus.h):
                       token count, FNV-1a 64 of the ids (int32 LE) and of HF's
                       decode of them; full ids for a few short texts.

The reference ids come from HF transformers' GGUF tokenizer conversion,
AutoTokenizer.from_pretrained(dir, gguf_file=name), encode with
add_special_tokens=False -- with one correction: for pre "smollm" HF (5.x)
keeps the plain GPT-2 ByteLevel pre-tokenizer, while llama.cpp splits digits
first (LLAMA_VOCAB_PRE_TYPE_SMOLLM: "\\p{N}" then the GPT-2 regex), which is
SmolLM's own tokenizer.json (Digits(individual_digits) + ByteLevel) and so
what the model was trained on. The reference therefore swaps in that
pre-tokenizer (Split(\\p{N}, isolated) + ByteLevel(use_regex)); the
documents where the uncorrected HF conversion differs are listed in the
golden file ("hf_gguf_differs") and printed.

For a "base" vocabulary the script also encodes the corpus with the Qwen3
tokenizer.json itself and lists the documents whose ids differ
("tokenizer_json_differs"; expected: non-NFC text, since a GGUF carries no
normalizer, and tokens Qwen3 added that the file lacks, like <think>).

Run: /root/.cache/blockspec/venv-golden/bin/python scripts/make_gguf_tokenizer_golden.py
     (needs gguf==0.19.0, transformers 5.23.0, tokenizers 0.23.3)
"""
import copy
import hashlib
import importlib.util
import json
import os
import sys

EXPECTED = {"tokenizers": "0.23.3", "transformers": "5.23.0", "gguf": "0.19.0"}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "tokenizer_gguf")
MODELS_DIR = os.path.join(os.environ.get("BLOCKSPEC_CACHE", os.path.expanduser("~/.cache/blockspec")), "models")
QWEN3_JSON = os.path.join(REPO, "data", "tokenizers", "qwen3", "tokenizer.json")
MODELS = ["smollm2", "qwen2.5-coder-1.5b"]
TYPE_NAMES = {0: "undefined", 1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}

# Short texts whose full ids are stored, so a mismatch shows where.
EXTRA = [
    "Hello world! 123",
    "  multiple   spaces",
    "x =  12\n    34\n\n\t5678",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<tool_call>{\"a\": 1}</tool_call> <|fim_prefix|>def f():<|fim_suffix|>",
    "Cafe\u0301 vs Caf\u00e9, \u00bd \u2460 \u0663\u0664 \uff11\uff12",
    "I'm 'S 'ſ DON'T we'LL",
    "<|endoftext|><|endoftext|>  <|endoftext|>",
    "    return [x**2 for x in range(10)]  # 100 items\r\n",
    "\u4f60\u597d\u4e16\u754c 12,345.67 \U0001F600\U0001F600",
    # Bytes SmolLM2 has no token for (0x04, 0x06, 0x13, 0x1d, lead bytes 0xf1/0xf2).
    "a.\x04.b \x06\x13\x14 q\x1dq \U00040000\U0008abcd!",
]


def load_golden_module():
    path = os.path.join(REPO, "scripts", "make_tokenizer_golden.py")
    spec = importlib.util.spec_from_file_location("make_tokenizer_golden", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fnv_list(strings):
    g = load_golden_module.cache
    return "%016x" % g.fnv1a64(b"".join(s.encode("utf-8") + b"\0" for s in strings))


def check_versions():
    import gguf, tokenizers, transformers
    from importlib.metadata import version
    found = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
             "gguf": version("gguf")}
    for k, v in EXPECTED.items():
        if found[k] != v:
            sys.exit("expected %s==%s, found %s" % (k, v, found[k]))


def read_gguf_vocab(path):
    import gguf
    r = gguf.GGUFReader(path)

    def get(key, default=None):
        f = r.fields.get(key)
        return default if f is None else f.contents()

    v = {"architecture": get("general.architecture"), "model": get("tokenizer.ggml.model"),
         "pre": get("tokenizer.ggml.pre"), "tokens": list(get("tokenizer.ggml.tokens")),
         "token_types": [int(t) for t in get("tokenizer.ggml.token_type", [])],
         "merges": list(get("tokenizer.ggml.merges", []))}
    for name, key in [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id"),
                      ("unk", "unknown_token_id")]:
        x = get("tokenizer.ggml." + key)
        v[name] = None if x is None else int(x)
    for name in ["add_bos", "add_eos"]:
        x = get("tokenizer.ggml.%s_token" % name)
        v[name] = None if x is None else bool(x)
    return v


def qwen3_base():
    with open(QWEN3_JSON, encoding="utf-8") as f:
        j = json.load(f)
    vocab = j["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    return tokens, merges


def vocab_fixture(name, path, v):
    sparse = {}
    for i, t in enumerate(v["token_types"]):
        if t != 1:
            sparse.setdefault(str(t), []).append(i)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    fx = {"source": name + ".gguf", "sha256": sha, "architecture": v["architecture"], "model": v["model"],
          "pre": v["pre"], "n_tokens": len(v["tokens"]), "n_merges": len(v["merges"]),
          "tokens_fnv": fnv_list(v["tokens"]), "merges_fnv": fnv_list(v["merges"]),
          "token_types_sparse": sparse,
          "special_ids": {k: v[k] for k in ["bos", "eos", "pad", "unk"]},
          "add_bos": v["add_bos"], "add_eos": v["add_eos"]}
    base_tokens, base_merges = qwen3_base()
    nb = len(base_tokens)
    if v["tokens"][:nb] == base_tokens and v["merges"] == base_merges:
        fx["base"] = {"tokenizer_json": "shared/data/tokenizers/qwen3/tokenizer.json",
                      "n_tokens": nb, "merges": "all"}
        fx["tokens_tail"] = v["tokens"][nb:]
    else:
        fx["tokens"] = v["tokens"]
        fx["merges"] = v["merges"]
    return fx


def reference_tokenizer(hf_backend, pre):
    """HF's conversion, with llama.cpp's pre-tokenizer where HF's differs."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    if pre != "smollm":
        return hf_backend
    t = Tokenizer.from_str(hf_backend.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return t


def main():
    check_versions()
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    g = load_golden_module()
    load_golden_module.cache = g
    docs = g.shared_documents() + g.synthetic_documents()
    texts = [t for _, t in docs]
    os.makedirs(OUT, exist_ok=True)
    for name in MODELS:
        path = os.path.join(MODELS_DIR, name + ".gguf")
        if not os.path.exists(path):
            print("%s: %s missing, skipped (scripts/fetch_models.sh %s)" % (name, path, name))
            continue
        v = read_gguf_vocab(path)
        fx = vocab_fixture(name, path, v)
        hf = AutoTokenizer.from_pretrained(MODELS_DIR, gguf_file=name + ".gguf").backend_tokenizer
        ref = reference_tokenizer(hf, v["pre"])
        ref_encs = ref.encode_batch(texts, add_special_tokens=False)
        hf_encs = hf.encode_batch(texts, add_special_tokens=False)
        entries, hf_differs = [], []
        for (dname, text), e, h in zip(docs, ref_encs, hf_encs):
            ids = e.ids
            dec = ref.decode(ids, skip_special_tokens=False)
            entries.append({"name": dname, "bytes": len(text.encode("utf-8")), "n_tokens": len(ids),
                            "ids_fnv": "%016x" % g.fnv1a64(g.ids_bytes(ids)),
                            "decode_fnv": "%016x" % g.fnv1a64(dec.encode("utf-8")),
                            "round_trips": dec == text})
            if h.ids != ids:
                hf_differs.append(dname)
        extra = [{"text": t, "ids": ref.encode(t, add_special_tokens=False).ids,
                  "hf_gguf_ids": hf.encode(t, add_special_tokens=False).ids} for t in EXTRA]
        for x in extra:
            x["round_trips"] = ref.decode(x["ids"], skip_special_tokens=False) == x["text"]
        for x in extra:
            if x["hf_gguf_ids"] == x["ids"]:
                del x["hf_gguf_ids"]
        golden = {"source": name + ".gguf", "pre": v["pre"],
                  "reference": "transformers GGUF conversion" +
                               (" with llama.cpp's smollm pre-tokenizer" if ref is not hf else ""),
                  "n_docs": len(docs), "n_tokens": sum(e["n_tokens"] for e in entries),
                  "docs": entries, "hf_gguf_differs": hf_differs, "extra": extra}
        if "base" in fx:
            base = Tokenizer.from_file(QWEN3_JSON)
            b_encs = base.encode_batch(texts, add_special_tokens=False)
            golden["tokenizer_json_differs"] = [d for (d, _), e, b in zip(docs, ref_encs, b_encs) if e.ids != b.ids]
        vocab_path = os.path.join(OUT, name + ".vocab.json")
        with open(vocab_path, "w", encoding="utf-8") as f:
            json.dump(fx, f, ensure_ascii=False, separators=(",", ":"))
        golden_path = os.path.join(OUT, name + ".golden.json")
        with open(golden_path, "w", encoding="utf-8") as f:
            json.dump(golden, f, ensure_ascii=False, indent=0)
        print("%s: pre %s, %d tokens, %d merges, types %s; %d docs, %d tokens; vocab fixture %d bytes, "
              "golden %d bytes" % (name, v["pre"], len(v["tokens"]), len(v["merges"]),
                                   {TYPE_NAMES[int(k)]: len(x) for k, x in fx["token_types_sparse"].items()},
                                   len(docs), golden["n_tokens"], os.path.getsize(vocab_path),
                                   os.path.getsize(golden_path)))
        print("  HF's unmodified GGUF conversion differs on %d of %d documents%s" %
              (len(hf_differs), len(docs), (": " + ", ".join(hf_differs[:8]) + (" ..." if len(hf_differs) > 8 else ""))
               if hf_differs else ""))
        if "tokenizer_json_differs" in golden:
            d = golden["tokenizer_json_differs"]
            print("  equal to the Qwen3 tokenizer.json on %d of %d documents; differs on: %s" %
                  (len(docs) - len(d), len(docs), ", ".join(d)))


if __name__ == "__main__":
    main()
