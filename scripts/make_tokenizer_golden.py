#!/usr/bin/env python3
"""Golden token ids for the tokenizer tests, from HF `tokenizers`.

Builds a mixed corpus of documents, encodes each with HF `tokenizers`
(encode(text, add_special_tokens=False)) using the Qwen3 tokenizer.json, and
writes under tests/fixtures/tokenizer/:

  synthetic_docs.json  the generated stress documents (CJK, emoji, whitespace
                       runs, digits, contractions, mixed scripts, combining
                       marks, special tokens, code, random code points)
  golden.json          per document: name, UTF-8 byte count, token count,
                       FNV-1a 64 of the ids, FNV-1a 64 of HF's decode of them,
                       whether decode(encode(x)) == x, and where its full ids
                       sit in golden_ids.bin (for a subset)
  golden_ids.bin       int32 little-endian ids of the subset

The corpus is NOT stored whole: the large part is rebuilt by the C++ test
from data/ (in the repo; copied from the team's shared data) by the same rules as
`shared_documents` below; keep the two in sync
(tests/tokenizer/golden_corpus.cc).

  Documents from shared data, in this order:
  1. text/tinyshakespeare.txt, cut at line ends: a document is the shortest
     run of whole lines (each with its "\\n") of at least DOC_BYTES bytes;
     the remainder is the last document. Named "shakespeare/<k>".
  2. prompts/{mt_bench,humaneval,gsm8k_test,gsm8k_train}.jsonl: each line is
     a JSON object; its text is its string leaves, keys in sorted (byte)
     order, depth first, arrays in order, joined by "\\n\\n". Records are
     grouped like lines above, each record contributing text + "\\n\\n".
     Named "<file stem>/<k>".

FNV-1a 64: offset 0xcbf29ce484222325, prime 0x100000001b3, over the bytes of
the ids as int32 little-endian (for the decode hash: over the UTF-8 bytes).

Run: /root/.cache/blockspec/venv-golden/bin/python scripts/make_tokenizer_golden.py
"""
import json
import os
import random
import struct
import sys
import unicodedata

EXPECTED_TOKENIZERS = "0.23.3"
DOC_BYTES = 16384
FULL_IDS_EVERY = 10  # shared-data documents with full ids: every 10th

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(REPO, "data")
OUT = os.path.join(REPO, "tests", "fixtures", "tokenizer")
TOKENIZER_JSON = os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")
JSONL_FILES = ["mt_bench", "humaneval", "gsm8k_test", "gsm8k_train"]


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def ids_bytes(ids) -> bytes:
    return struct.pack("<%di" % len(ids), *ids)


def group(chunks, prefix):
    docs, cur = [], []
    size = 0
    for c in chunks:
        cur.append(c)
        size += len(c.encode("utf-8"))
        if size >= DOC_BYTES:
            docs.append("".join(cur))
            cur, size = [], 0
    if cur:
        docs.append("".join(cur))
    return [("%s/%d" % (prefix, k), d) for k, d in enumerate(docs)]


def string_leaves(v, out):
    if isinstance(v, str):
        out.append(v)
    elif isinstance(v, list):
        for x in v:
            string_leaves(x, out)
    elif isinstance(v, dict):
        for k in sorted(v.keys(), key=lambda s: s.encode("utf-8")):
            string_leaves(v[k], out)


def shared_documents():
    with open(os.path.join(SHARED, "text", "tinyshakespeare.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    # Cut at "\n" only (str.splitlines would also cut at \r, \u2028, ...).
    lines = [l + "\n" for l in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if lines[-1] == "":
        lines.pop()
    docs = group(lines, "shakespeare")
    for stem in JSONL_FILES:
        records = []
        with open(os.path.join(SHARED, "prompts", stem + ".jsonl"), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                leaves = []
                string_leaves(json.loads(line), leaves)
                records.append("\n\n".join(leaves) + "\n\n")
        docs += group(records, stem)
    return docs


# ---------------------------------------------------------------- synthetic

def pick(rng, s):
    return s[rng.randrange(len(s))]


def cjk_doc(rng):
    hanzi = [chr(c) for c in range(0x4E00, 0x9FA6)]
    common = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从"
    kana = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
    hangul = [chr(c) for c in range(0xAC00, 0xD7A4)]
    punct = "，。、；：？！「」『』（）《》…—・ー〜　"
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        kind = rng.randrange(6)
        n = rng.randrange(3, 40)
        if kind == 0:
            out.append("".join(pick(rng, common) if rng.random() < 0.7 else pick(rng, hanzi) for _ in range(n)))
        elif kind == 1:
            out.append("".join(pick(rng, kana) for _ in range(n)))
        elif kind == 2:
            out.append("".join(pick(rng, hangul) for _ in range(n // 3 + 1)) + " ")
        elif kind == 3:
            out.append(pick(rng, punct))
        elif kind == 4:
            out.append(pick(rng, [" the model ", "GPU", " 2024年", "3.14", "\n", "Qwen3", " v2 ", "ＡＢＣ１２３"]))
        else:
            out.append(pick(rng, ["。\n", "！", "？\n\n", "、", " "]))
    return "".join(out)


def emoji_doc(rng):
    base = [chr(c) for c in range(0x1F600, 0x1F650)] + [chr(c) for c in range(0x1F300, 0x1F5FF)]
    skin = [chr(c) for c in range(0x1F3FB, 0x1F400)]
    zwj = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F469\u200D\U0001F4BB",
           "\U0001F3F3\uFE0F\u200D\U0001F308", "\u2764\uFE0F\u200D\U0001F525", "\U0001F9D1\U0001F3FD\u200D\U0001F680"]
    flags = ["\U0001F1FA\U0001F1F8", "\U0001F1EF\U0001F1F5", "\U0001F1E9\U0001F1EA", "\U0001F1E8\U0001F1F3"]
    misc = ["1\uFE0F\u20E3", "#\uFE0F\u20E3", "\u2600\uFE0F", "\u263A", "\u2705", "\u00A9\uFE0F", "\u2122"]
    words = ["love", "it", "so", "much", "great", "job", "lol", "ok", "\n", "!!", "...", "wow"]
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        r = rng.random()
        if r < 0.3:
            out.append(pick(rng, base))
        elif r < 0.4:
            out.append(pick(rng, base) + pick(rng, skin))
        elif r < 0.5:
            out.append(pick(rng, zwj))
        elif r < 0.55:
            out.append(pick(rng, flags))
        elif r < 0.6:
            out.append(pick(rng, misc))
        else:
            out.append(pick(rng, ["", " "]) + pick(rng, words) + pick(rng, ["", " ", "  "]))
    return "".join(out)


WS_RUNS = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ",
           "  \n  ", "\r", "\u00A0", "\u3000", "\u2028", "\u0085", "\u2003", "\u200B", "\f", "\v", " \r\n\t "]


def whitespace_doc(rng):
    words = ["alpha", "Beta", "x", "42", "foo()", "#", "--", "é", "中文", "\U0001F600", "'s", "end."]
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        r = rng.random()
        if r < 0.02:
            out.append(pick(rng, [" ", "\n", "\t", "\r\n"]) * rng.randrange(50, 2000))
        elif r < 0.5:
            out.append(pick(rng, WS_RUNS) * rng.randrange(1, 4))
        else:
            out.append(pick(rng, words))
    return "".join(out) + pick(rng, ["", " ", "\n", "   \n\n", "\t"])


def digits_doc(rng):
    digit_sets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９"]
    other = ["½", "²", "³", "Ⅻ", "ⅷ", "①", "⑩", "¼", "𝟙𝟚", "〇", "万"]
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        r = rng.random()
        ds = digit_sets[0] if rng.random() < 0.7 else pick(rng, digit_sets)
        n = "".join(pick(rng, ds) for _ in range(rng.randrange(1, 25)))
        if r < 0.3:
            out.append(n)
        elif r < 0.45:
            out.append("%s.%s" % (n, rng.randrange(1000)))
        elif r < 0.55:
            out.append("{:,}".format(rng.randrange(10 ** 12)))
        elif r < 0.65:
            out.append("%04d-%02d-%02d" % (rng.randrange(3000), rng.randrange(13), rng.randrange(32)))
        elif r < 0.75:
            out.append(pick(rng, other))
        elif r < 0.85:
            out.append(pick(rng, ["v", "x", "abc", "$", "-", "+", "0x", "1e", "%"]) + n)
        else:
            out.append(pick(rng, [" ", "  ", "\n", ", ", "/", ":"]))
        out.append(pick(rng, ["", " ", " ", "\n"]))
    return "".join(out)


def contractions_doc(rng):
    suffixes = ["s", "t", "re", "ve", "m", "ll", "d"]
    words = ["it", "IT", "I", "you", "We", "they", "She", "don", "CAN", "won", "o", "rock", "n", "", "123", "é", "中"]
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        w = pick(rng, words)
        suf = pick(rng, suffixes)
        suf = "".join(c.upper() if rng.random() < 0.4 else c for c in suf)
        q = pick(rng, ["'", "'", "'", "\u2019", "''", "`"])
        tail = pick(rng, ["", "", "s", "x", "'", "ing", "ſ", " ", "\n", "LL", "ve"])
        out.append(pick(rng, [" ", " ", "", "\n", "  ", "\t", "("]) + w + q + suf + tail)
        if rng.random() < 0.05:
            out.append(pick(rng, [" 'ſ", "'ſt", " 'K", "'ǅ", "'İ", "'ß"]))
    return "".join(out)


SCRIPT_WORDS = ["привет", "Москва", "ΕΛΛΆΔΑ", "λόγος", "مرحبا", "العربية", "שלום", "עִבְרִית", "नमस्ते", "हिन्दी",
                "สวัสดี", "ภาษาไทย", "Բարեւ", "ქართული", "ሰላም", "தமிழ்", "ཀ་ཁ", "Ꭰ", "ᚠᚢᚦ", "Straße", "ÆØÅ",
                "İstanbul", "ǅungla", "ﬁnance", "Ⅷ", "𝓗𝓮𝓵𝓵𝓸", "ｆｕｌｌ", "Tiếng Việt", "Ελληνικά123", "abcабв"]


def scripts_doc(rng):
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        w = pick(rng, SCRIPT_WORDS)
        if rng.random() < 0.2:
            w = w + pick(rng, SCRIPT_WORDS)  # mixed scripts within one word
        out.append(w + pick(rng, [" ", " ", ", ", ".\n", "-", "_", "", "  ", "؟ ", "। "]))
    return "".join(out)


def combining_doc(rng):
    marks = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030A", "\u0323", "\u0327", "\u0328", "\u031B", "\u0345", "\u05B7", "\u093C"]
    texts = ["Café crème brûlée à la carte", "Việt Nam đẹp lắm", "Ångström Ωhm", "naïve coöperate façade",
             "Ελληνικά ἄλφα ᾅδης", "Ǆemal ǈuba", "résumé", "Pokémon", "Zürich Österreich"]
    singletons = ["\u212B", "\u2126", "\u212A", "\u0958", "\u2000", "\uF900", "\u0340", "\u0374"]
    jamo_l = [chr(c) for c in range(0x1100, 0x1113)]
    jamo_v = [chr(c) for c in range(0x1161, 0x1176)]
    jamo_t = [chr(c) for c in range(0x11A8, 0x11C3)]
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        r = rng.random()
        if r < 0.3:
            out.append(unicodedata.normalize(pick(rng, ["NFD", "NFKD", "NFC"]), pick(rng, texts)))
        elif r < 0.55:
            base = pick(rng, "aeiouAEOnscgzyqx ")
            out.append(base + "".join(pick(rng, marks) for _ in range(rng.randrange(1, 4))))
        elif r < 0.65:
            out.append(pick(rng, singletons))
        elif r < 0.8:
            out.append(pick(rng, jamo_l) + pick(rng, jamo_v) + (pick(rng, jamo_t) if rng.random() < 0.5 else ""))
        else:
            out.append(pick(rng, [" ", "\n", ". ", "'s ", "1"]))
    return "".join(out)


SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|vision_start|>", "<|image_pad|>"]
NEAR_MISSES = ["<|im_start", "<|im_start|", "im_start|>", "<<|im_end|>>", "<think", "</think", "<|endoftext|",
               "<|IM_START|>", "< think>", "<|im_start |>", "<|"]


def special_doc(rng):
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        r = rng.random()
        if r < 0.3:
            role = pick(rng, ["system", "user", "assistant", "tool"])
            body = pick(rng, ["Hello! How are you?", "What's 2+2?\n", "Write code:\n```py\nprint('hi')\n```",
                              "  leading spaces", "中文问题？", "emoji \U0001F600", "e\u0301\u0301"])
            think = "<think>\n%s\n</think>\n\n" % pick(rng, ["Let me think.", "", "Hmm... 'll do"]) if role == "assistant" else ""
            out.append("<|im_start|>%s\n%s%s<|im_end|>\n" % (role, think, body))
        elif r < 0.6:
            out.append(pick(rng, SPECIALS))
        elif r < 0.75:
            out.append(pick(rng, NEAR_MISSES))
        else:
            out.append(pick(rng, [" ", "  ", "\n", "x", "word", "\u0301", "'s", "123", "\t", "é", "<", "|>"]))
    return "".join(out)


CODE_SNIPPETS = [
    "def {f}(x, y=None):\n    \"\"\"Return {f} of x.\"\"\"\n    if x is None:\n        return []\n    return [i ** 2 for i in range(x) if i % 3 != 0]\n\n",
    "int {f}(const std::vector<int>& v) {{\n\tint s = 0;\n\tfor (auto x : v) s += x << 1;\n\treturn s >= 0 ? s : -s;\n}}\n",
    "const {f} = async (req, res) => {{\r\n  const {{ id }} = req.params;\r\n  if (id !== undefined && id.length > 0) {{\r\n    return res.json({{ ok: true }});\r\n  }}\r\n}};\r\n",
    "{{\n  \"{f}\": [1, 2.5, -3e10, null, true],\n  \"nested\": {{\"k\": \"v\\n\\t\"}}\n}}\n",
    "<div class=\"{f}\">&nbsp;<span>{f}</span></div>\n<!-- comment -->\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | sed -e 's/a/b/g' >> out.log 2>&1; done\n",
    "SELECT {f}, COUNT(*) FROM t WHERE x <> 'y' GROUP BY 1 HAVING COUNT(*) > 10;\n",
    "fn {f}<'a>(s: &'a str) -> Option<&'a str> {{ s.split_once(\"::\").map(|(a, _)| a) }}\n",
    "    # TODO(me): fix {f}\n    x = re.compile(r'^\\s*(\\d+)\\.(\\w+)$')  # noqa\n",
    "/* {f} */\nstruct S {{ uint8_t a[16]; float b; }};\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
]


def code_doc(rng):
    names = ["compute", "get_value", "parseJSON", "__init__", "x1", "fooBar", "HTTPServer", "my_func_2", "λ"]
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        s = pick(rng, CODE_SNIPPETS).format(f=pick(rng, names))
        if rng.random() < 0.2:
            s = s.replace("    ", "\t")
        if rng.random() < 0.2:
            s = "  " * rng.randrange(1, 6) + s.replace("\n", "\n" + "  " * rng.randrange(1, 4))
        out.append(s)
    return "".join(out)


def assigned_pool():
    # Blocks that have been stable for many Unicode versions, so the
    # Unicode tables of PCRE2, utf8proc and HF's Oniguruma / Rust agree.
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2AF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x10A0, 0x10FF),
              (0x2000, 0x206F), (0x2100, 0x214F), (0x2190, 0x22FF), (0x2500, 0x27BF), (0x3000, 0x303F),
              (0x3040, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF),
              (0x1F600, 0x1F64F), (0x1D400, 0x1D7FF)]
    pool = []
    for a, b in ranges:
        for c in range(a, b + 1):
            ch = chr(c)
            if unicodedata.category(ch) not in ("Cn", "Cs", "Co"):
                pool.append(ch)
    return pool


def random_doc(rng, pool):
    out = []
    while sum(len(x.encode()) for x in out) < DOC_BYTES:
        r = rng.random()
        if r < 0.6:
            out.append("".join(pick(rng, pool) for _ in range(rng.randrange(1, 12))))
        elif r < 0.8:
            out.append(pick(rng, WS_RUNS))
        else:
            out.append(pick(rng, ["the", "'s", "'LL", "42", "<|im_end|>", "é", "\U0001F600", "a\u0301"]))
    return "".join(out)


def synthetic_documents():
    rng = random.Random(20240607)
    pool = assigned_pool()
    makers = [("cjk", cjk_doc, 8), ("emoji", emoji_doc, 4), ("whitespace", whitespace_doc, 6),
              ("digits", digits_doc, 4), ("contractions", contractions_doc, 4), ("scripts", scripts_doc, 5),
              ("combining", combining_doc, 5), ("special", special_doc, 5), ("code", code_doc, 6),
              ("random", lambda r: random_doc(r, pool), 12)]
    docs = []
    for name, fn, count in makers:
        for k in range(count):
            docs.append(("synthetic/%s/%d" % (name, k), fn(rng)))
    # Small edge cases, one document each.
    edge = ["", " ", "\n", "a", "<|im_start|>", "  <|im_end|>  ", "\r\n" * 3, " " * 20000, "\n" * 5000,
            "'s", "'", "''", "x" * 3000, "é" * 500, "e\u0301" * 500, "<think></think>" * 20,
            "\u200b\u200c\u200d\ufeff", "\U0010FFFD", "a\u0000b", "\u0085\u0085"]
    for k, e in enumerate(edge):
        docs.append(("synthetic/edge/%d" % k, e))
    return docs


def gpt2_style_variant(tokenizer_json_text):
    """The Qwen3 tokenizer.json edited to exercise the GPT-2 path: ByteLevel
    pre-tokenizer alone with use_regex and add_prefix_space, plus a
    normalized, single_word, lstrip, rstrip added token. The C++ test applies
    the same edit (tokenizer_golden_test.cc, gpt2_style_variant)."""
    t = json.loads(tokenizer_json_text)
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    t["added_tokens"].append({"id": 151669, "content": "hello world", "single_word": True, "lstrip": True,
                              "rstrip": True, "normalized": True, "special": False})
    return json.dumps(t)


VARIANT_EXTRA = ["say  hello world  now", "xhello world", "hello world", " hello worldly", "HELLO WORLD"]


def main():
    import tokenizers
    if tokenizers.__version__ != EXPECTED_TOKENIZERS:
        sys.exit("expected tokenizers==%s, found %s" % (EXPECTED_TOKENIZERS, tokenizers.__version__))
    tok = tokenizers.Tokenizer.from_file(TOKENIZER_JSON)
    synthetic = synthetic_documents()
    docs = shared_documents() + synthetic
    texts = [d for _, d in docs]
    encs = tok.encode_batch(texts, add_special_tokens=False)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "synthetic_docs.json"), "w", encoding="utf-8") as f:
        json.dump([{"name": n, "text": t} for n, t in synthetic], f, ensure_ascii=False, indent=0)
    entries, blob = [], bytearray()
    n_shared = len(docs) - len(synthetic)
    for i, ((name, text), enc) in enumerate(zip(docs, encs)):
        ids = enc.ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        e = {"name": name, "bytes": len(text.encode("utf-8")), "n_tokens": len(ids),
             "ids_fnv": "%016x" % fnv1a64(ids_bytes(ids)),
             "decode_fnv": "%016x" % fnv1a64(decoded.encode("utf-8")),
             "round_trips": decoded == text}
        if i >= n_shared or i % FULL_IDS_EVERY == 0:
            e["ids_offset"] = len(blob) // 4
            blob += ids_bytes(ids)
        entries.append(e)
    with open(TOKENIZER_JSON, encoding="utf-8") as f:
        variant = tokenizers.Tokenizer.from_str(gpt2_style_variant(f.read()))
    vtexts = [t for _, t in synthetic] + VARIANT_EXTRA
    variant_entries = [{"n_tokens": len(e.ids), "ids_fnv": "%016x" % fnv1a64(ids_bytes(e.ids))}
                       for e in variant.encode_batch(vtexts, add_special_tokens=False)]
    with open(os.path.join(OUT, "golden_ids.bin"), "wb") as f:
        f.write(bytes(blob))
    meta = {"tokenizers_version": tokenizers.__version__, "tokenizer": "shared/data/tokenizers/qwen3/tokenizer.json",
            "doc_bytes": DOC_BYTES, "n_docs": len(docs),
            "corpus_bytes": sum(e["bytes"] for e in entries), "n_tokens": sum(e["n_tokens"] for e in entries),
            "docs": entries,
            # Synthetic documents then VARIANT_EXTRA, under gpt2_style_variant.
            "gpt2_style_variant": {"extra": VARIANT_EXTRA, "docs": variant_entries}}
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=0)
    print("docs %d, corpus %d bytes, %d tokens, full ids for %d tokens" %
          (len(docs), meta["corpus_bytes"], meta["n_tokens"], len(blob) // 4))


if __name__ == "__main__":
    main()
