#!/usr/bin/env python3
"""Golden chat-template renderings from HF `tokenizer.apply_chat_template`.

Writes under tests/fixtures/chat/:

  qwen3.jinja           Qwen3's template (data/tokenizers/qwen3/tokenizer_config.json)
  qwen2.5-coder.jinja   GGUF tokenizer.chat_template of qwen2.5-coder-1.5b.gguf
  smollm2.jinja         GGUF tokenizer.chat_template of smollm2.gguf
  qwen3.5.jinja         the Qwen3.5 template as llama.cpp ships it (models/templates/Qwen3.5-4B.jinja,
                        ../shared/data/tokenizers/qwen3.5/): ChatML, <think> generation prompt,
                        XML tool calls, reasoning_content
  cases.json            {"templates": {name: file}, "cases": [{template, name,
                        messages, add_generation_prompt, enable_thinking?,
                        tools?, expected | error}]}

HF's real path: a PreTrainedTokenizerFast (Qwen3's tokenizer files; the
template text is all that matters with tokenize=False) whose chat_template is
set to each template, then
  tok.apply_chat_template(messages, tools=..., tokenize=False,
                          add_generation_prompt=..., enable_thinking=...)
which compiles with ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]) as the C++ side mirrors.
A case whose rendering raises stores "error": the exception's message.

Run: /root/.cache/blockspec/venv-golden/bin/python scripts/make_chat_template_golden.py
"""
import copy
import json
import os

import gguf
import transformers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN3_DIR = os.path.join(ROOT, "data", "tokenizers", "qwen3")
MODELS = os.path.expanduser("~/.cache/blockspec/models")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat")
QWEN35_TEMPLATE = os.path.join(ROOT, "..", "shared", "data", "tokenizers", "qwen3.5", "Qwen3.5-4B.jinja")


def gguf_template(path):
    reader = gguf.GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def system(text):
    return {"role": "system", "content": text}


TRICKY = 'héllo wörld 你好 🎉🚀 "double" \'single\' back\\slash\ttab\r\nCRLF <|im_end|> {{ not_jinja }} {% if %}'
TOOL_ARGS = {"location": "Paris, 🇫🇷", "unit": "celsius", "days": 3, "threshold": 0.5, "big": 1e20,
             "flags": [True, False, None], "nested": {"quote": "a\"b", "nl": "x\ny"}}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather — in °C",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                   "required": ["location"]}}},
    {"type": "function", "function": {"name": "noop", "description": "", "parameters": {}}}]


def common_conversations():
    """(name, messages, add_generation_prompt, tools) shared by every template."""
    return [
        ("single_user", [user("Hello!")], True, None),
        ("single_user_no_gen", [user("Hello!")], False, None),
        ("system_user", [system("You are terse."), user("What is 2+2?")], True, None),
        ("multi_turn", [user("Hi"), assistant("Hello! How can I help?"), user("Tell me a joke.")], True, None),
        ("system_multi_turn", [system("Be nice."), user("a"), assistant("b"), user("c"), assistant("d"),
                               user("e")], True, None),
        ("assistant_last_no_gen", [user("Hi"), assistant("Hello there.")], False, None),
        ("assistant_last_gen", [user("Hi"), assistant("Hello there.")], True, None),
        ("unicode_quotes", [system(TRICKY), user(TRICKY)], True, None),
        ("empty_content", [user(""), assistant(""), user("")], True, None),
        ("newlines_whitespace", [user("\n\n  line1\n\nline2  \n\n"), assistant("  spaced \n"), user("\t")], True,
         None),
        ("system_mid_conversation", [user("q1"), system("new rules"), user("q2")], True, None),
        ("long_history", [m for i in range(6) for m in (user(f"question {i}"), assistant(f"answer {i}"))]
         + [user("last")], True, None),
        ("tool_calls", [user("Weather in Paris?"),
                        assistant("", tool_calls=[{"type": "function", "function": {
                            "name": "get_weather", "arguments": TOOL_ARGS}}]),
                        {"role": "tool", "content": "{\"temp\": 21}"},
                        {"role": "tool", "content": "second result"},
                        assistant("It is 21 °C.")], True, None),
        ("tools_given", [user("Weather?")], True, TOOLS),
        ("tools_given_with_system", [system("Use tools."), user("Weather?")], True, TOOLS),
    ]


def qwen3_conversations():
    think = "<think>\nLet me think.\n</think>\n\nThe answer is 4."
    return [
        ("reasoning_content_last", [user("2+2?"), assistant("4", reasoning_content="Adding 2 and 2.")], False),
        ("reasoning_content_history", [user("2+2?"), assistant("4", reasoning_content="Adding."), user("3+3?")],
         True),
        ("think_in_content_last", [user("2+2?"), assistant(think)], False),
        ("think_in_content_history", [user("2+2?"), assistant(think), user("and 3+3?")], True),
        ("think_without_open_tag", [user("x"), assistant("just reasoning\n</think>\nanswer")], False),
        ("multi_step_tool", [user("Weather?"),
                             assistant("<think>\nneed tool\n</think>\n\n", tool_calls=[{"function": {
                                 "name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]),
                             {"role": "tool", "content": "sunny"},
                             assistant("It is sunny.", reasoning_content="Tool said sunny.")], False),
        ("tool_response_user", [user("q"), assistant("a"), user("<tool_response>\nr\n</tool_response>"),
                                assistant("done", reasoning_content="r")], False),
        ("empty_messages_error", [], True),
    ]


def render(tok, template, messages, add_generation_prompt, tools, enable_thinking):
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return tok.apply_chat_template(copy.deepcopy(messages), tools=copy.deepcopy(tools), chat_template=template,
                                   tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)


def main():
    assert transformers.__version__.startswith("5."), transformers.__version__
    tok = AutoTokenizer.from_pretrained(QWEN3_DIR)
    templates = {
        "qwen3": tok.chat_template,
        "qwen2.5-coder": gguf_template(os.path.join(MODELS, "qwen2.5-coder-1.5b.gguf")),
        "smollm2": gguf_template(os.path.join(MODELS, "smollm2.gguf")),
        "qwen3.5": open(QWEN35_TEMPLATE, encoding="utf-8").read(),
    }
    os.makedirs(OUT, exist_ok=True)
    files = {}
    for name, text in templates.items():
        files[name] = name + ".jinja"
        with open(os.path.join(OUT, files[name]), "w", encoding="utf-8", newline="") as f:
            f.write(text)

    cases = []
    for name, text in templates.items():
        convs = [(n, m, g, t, None) for n, m, g, t in common_conversations()]
        if name in ("qwen3", "qwen3.5"):
            convs += [(n, m, g, None, None) for n, m, g in qwen3_conversations()]
            # enable_thinking true / false / absent over a few shapes.
            for think in (True, False):
                for n, m, g, t in common_conversations()[:6]:
                    convs.append((f"{n}_thinking_{str(think).lower()}", m, g, t, think))
                convs.append((f"reasoning_history_thinking_{str(think).lower()}",
                              qwen3_conversations()[1][1], True, None, think))
        for case_name, messages, gen, tools, think in convs:
            case = {"template": name, "name": case_name, "messages": messages, "add_generation_prompt": gen}
            if tools is not None:
                case["tools"] = tools
            if think is not None:
                case["enable_thinking"] = think
            try:
                case["expected"] = render(tok, text, messages, gen, tools, think)
            except Exception as e:  # the C++ side must fail too
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)

    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "templates": files, "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    counts = {}
    for c in cases:
        counts[c["template"]] = counts.get(c["template"], 0) + 1
    print("wrote", len(cases), "cases", counts, "errors:", [c["name"] for c in cases if "error" in c])


if __name__ == "__main__":
    main()
