#!/usr/bin/env python3
"""Writes tests/fixtures/toolcall/qwen3-toolcall-tiny: a 1-layer Qwen3 checkpoint whose weights are
set by hand so that its greedy answer is a tool call in the hermes format on a first turn, and a
short text answer once a tool result is in the conversation. No offline model says <tool_call>
(Qwen2.5-Coder-1.5B answers tool prompts with ```json fences), so this is what lets the tool-call
path of `serve` be tested end to end with the real `openai` client (tests/server/openai_client_test.py).

  python3 scripts/make_toolcall_model.py            # both fixtures
  python3 scripts/make_toolcall_model.py --variant think OUT_DIR

Variant "think" (tests/fixtures/toolcall/qwen3-think-tiny) answers a first turn with
"<think>\nThe user asks about the weather.\n</think>\n\nIt is sunny in Paris today." instead, for the
reasoning parser (`--reasoning-parser qwen3`); <think> and </think> are added tokens as in Qwen3.

Only the standard library. The tokenizer is the 512-token BPE of tests/fixtures/golden/qwen3-tiny-f32
with added tokens (non-special, as Qwen's own <tool_call> is): <tool_call>, </tool_call>,
<tool_response>, </tool_response> and a few JSON / text pieces, so every token of the scripted answers
is distinct. The chat template is Qwen3's (tests/fixtures/chat/qwen3.jinja, Apache-2.0, Qwen team).

How the weights make the answers (H = 128, 1 layer, attention and MLP otherwise zero):
- embed[t] = unit vector u_t for every token the answers use and for "\\n"; 0 for the rest, so the
  residual of a position is u_t plus what attention adds; the final RMSNorm scales a unit vector to
  sqrt(H), and lm_head row n = A * u_t for each step t -> n of a script: the next token is a bigram
  lookup with logit margin A * sqrt(H).
- q_proj = 0, so attention is uniform over the causal context; v reads the <tool_response> indicator
  u_m and o_proj writes it to a flag direction u_f: after a tool result the flag is
  count / (positions so far), about 1/300 in the test's prompts, 0 before.
- At "\\n" (the end of "<|im_start|>assistant\\n") <tool_call> has logit A * sqrt(H), the text answer's
  first token 0.99 * A * sqrt(H) + B * sqrt(H) * flag: with B = 30 A the flag decides for prompts of ~30 to
  ~3000 tokens.
"""
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "tests/fixtures/golden/qwen3-tiny-f32")

H, F, N_HEADS, N_KV, HEAD_DIM = 128, 64, 2, 1, 64
A, B = 10.0, 300.0

# Added tokens, ids from 512 on; the scripted answers are made of them.
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
         '{"name": "', "get_current_weather", '", "arguments": {"city": "', "Paris", '"}}',
         "It is sunny", " in Paris today."]
TOOL_SCRIPT = ["<tool_call>", '{"name": "', "get_current_weather", '", "arguments": {"city": "', "Paris", '"}}',
               "</tool_call>"]
THINK_ADDED = ["<think>", "</think>", "\nThe user asks about the weather.\n", "\n\nIt is sunny in Paris today."]
THINK_SCRIPT = ["<think>", "\nThe user asks about the weather.\n", "</think>", "\n\nIt is sunny in Paris today."]
TEXT_SCRIPT = ["It is sunny", " in Paris today."]
EOS = 511  # <|im_end|>


def bf16_bytes(values):
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        out += struct.pack("<H", (bits >> 16) & 0xFFFF)
    return bytes(out)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = bf16_bytes(values)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    if len(sys.argv) == 1:
        make("toolcall", os.path.join(ROOT, "tests/fixtures/toolcall/qwen3-toolcall-tiny"))
        make("think", os.path.join(ROOT, "tests/fixtures/toolcall/qwen3-think-tiny"))
    elif sys.argv[1] == "--variant":
        make(sys.argv[2], sys.argv[3])
    else:
        make("toolcall", sys.argv[1])


def make(variant, out):
    added = ADDED + (THINK_ADDED if variant == "think" else [])
    first_script = THINK_SCRIPT if variant == "think" else TOOL_SCRIPT
    os.makedirs(out, exist_ok=True)
    tok = json.load(open(os.path.join(SRC, "tokenizer.json")))
    base_vocab = 512
    ids = {}
    for i, content in enumerate(added):
        ids[content] = base_vocab + i
        tok["added_tokens"].append({"id": base_vocab + i, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": False})
    newline = tok["model"]["vocab"]["\u010a"]  # byte-level "\n"
    vocab = base_vocab + len(added)
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False, indent=1)
    template = open(os.path.join(ROOT, "tests/fixtures/chat/qwen3.jinja")).read()
    json.dump({"chat_template": template, "eos_token": "<|im_end|>", "bos_token": None, "pad_token": "<|endoftext|>",
               "model_max_length": 4096}, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": H,
              "intermediate_size": F, "num_hidden_layers": 1, "num_attention_heads": N_HEADS,
              "num_key_value_heads": N_KV, "head_dim": HEAD_DIM, "hidden_act": "silu", "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "max_position_embeddings": 4096, "vocab_size": vocab,
              "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16",
              "bos_token_id": 509, "eos_token_id": [EOS, 509]}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump({"bos_token_id": 509, "eos_token_id": [EOS, 509]}, open(os.path.join(out, "generation_config.json"), "w"),
              indent=1)

    # Directions: one per scripted token and "\n", then the marker and the flag.
    dims = {}
    for t in [newline] + [ids[c] for c in first_script + TEXT_SCRIPT]:
        dims.setdefault(t, len(dims))
    marker = ids["<tool_response>"]
    dims[marker] = len(dims)
    flag = len(dims)
    assert flag < H

    def zeros(n):
        return [0.0] * n

    embed = zeros(vocab * H)
    for t, d in dims.items():
        embed[t * H + d] = 1.0
    head = zeros(vocab * H)

    def step(cur, nxt, w=A):
        head[nxt * H + dims[cur]] += w

    for script in (first_script, TEXT_SCRIPT):
        seq = [ids[c] for c in script] + [EOS]
        for cur, nxt in zip(seq, seq[1:]):
            step(cur, nxt)
    step(newline, ids[first_script[0]])
    step(newline, ids[TEXT_SCRIPT[0]], 0.99 * A)
    head[ids[TEXT_SCRIPT[0]] * H + flag] += B

    # Attention: v (kv head 0, channel 0) = the marker's normalised component / sqrt(H) = 1 for the
    # marker; o_proj (head 0, channel 0) -> the flag direction.
    v = zeros(N_KV * HEAD_DIM * H)
    v[0 * H + dims[marker]] = 1.0 / (H ** 0.5)
    o = zeros(H * N_HEADS * HEAD_DIM)
    o[flag * (N_HEADS * HEAD_DIM) + 0] = 1.0
    p = "model.layers.0."
    tensors = {
        "model.embed_tokens.weight": ([vocab, H], embed),
        "lm_head.weight": ([vocab, H], head),
        "model.norm.weight": ([H], [1.0] * H),
        p + "input_layernorm.weight": ([H], [1.0] * H),
        p + "post_attention_layernorm.weight": ([H], [1.0] * H),
        p + "self_attn.q_proj.weight": ([N_HEADS * HEAD_DIM, H], zeros(N_HEADS * HEAD_DIM * H)),
        p + "self_attn.k_proj.weight": ([N_KV * HEAD_DIM, H], zeros(N_KV * HEAD_DIM * H)),
        p + "self_attn.v_proj.weight": ([N_KV * HEAD_DIM, H], v),
        p + "self_attn.o_proj.weight": ([H, N_HEADS * HEAD_DIM], o),
        p + "self_attn.q_norm.weight": ([HEAD_DIM], [1.0] * HEAD_DIM),
        p + "self_attn.k_norm.weight": ([HEAD_DIM], [1.0] * HEAD_DIM),
        p + "mlp.gate_proj.weight": ([F, H], zeros(F * H)),
        p + "mlp.up_proj.weight": ([F, H], zeros(F * H)),
        p + "mlp.down_proj.weight": ([H, F], zeros(H * F)),
    }
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "README.md"), "w") as f:
        first = ("a hermes tool call (get_current_weather, city Paris)" if variant == "toolcall" else
                 "\"<think>\\nThe user asks about the weather.\\n</think>\\n\\nIt is sunny in Paris today.\"")
        f.write("Made by `python3 scripts/make_toolcall_model.py` (see its docstring): a hand-set 1-layer Qwen3 whose\n"
                "greedy chat answer is " + first + " on a first turn and\n"
                "\"It is sunny in Paris today.\" once a tool result is in the conversation. Tokenizer: the tiny BPE of\n"
                "tests/fixtures/golden/qwen3-tiny-f32 plus added tokens; chat template: Qwen3's (Apache-2.0).\n")
    print("wrote", out, "vocab", vocab, "directions", len(dims) + 1)


if __name__ == "__main__":
    main()
