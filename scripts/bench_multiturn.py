#!/usr/bin/env python3
"""Multi-turn chat benchmark for prefix caching (issue 19): a chat of T turns in which every turn resends the
whole history (each user message, then the assistant's greedy answer), against `blockspec serve` with prefix
caching on and off, the two servers run one after the other R times (on, off, on, off, ...). Prints TTFT per
turn (streamed, time to the first content token), total time, cached prompt tokens, and whether the answers of
the two servers are identical. --speculative-config JSON serves both with that speculation (a DFlash drafter's
context is cached beside each page); --plain-too adds a third server per round, caching on without speculation.
Needs the openai client (scripts/setup.sh makes ~/.cache/blockspec/venv-openai).

  ~/.cache/blockspec/venv-openai/bin/python scripts/bench_multiturn.py --blockspec build/blockspec \
      --model ~/.cache/blockspec/models/qwen2.5-coder-1.5b.gguf --turns 10 --max-tokens 48 --rounds 2 [--json OUT]

User messages: the first turns of data/prompts/mt_bench.jsonl (MT-Bench questions, Apache-2.0), or with --prompts
the "question" (or first of "turns") of each line of another prompt set (data/prompts/gsm8k_test.jsonl).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(binary, model, extra):
    proc = subprocess.Popen([binary, "serve", model, "--port", "0", "--served-model-name", "m", "--max-model-len", "4096",
                             *extra], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    log = []
    port = None
    while port is None:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError("server exited:\n" + "".join(log))
        log.append(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    threading.Thread(target=lambda: [log.append(x) for x in proc.stderr], daemon=True).start()
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    break
        except Exception:
            time.sleep(0.2)
    return proc, port, log


def chat(port, questions, max_tokens):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=600)
    history, answers, ttft, cached = [], [], [], []
    t0 = time.perf_counter()
    for q in questions:
        history.append({"role": "user", "content": q})
        start_t = time.perf_counter()
        first = None
        text = ""
        usage = None
        for ch in client.chat.completions.create(model="m", messages=history, max_tokens=max_tokens, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}):
            if ch.choices and ch.choices[0].delta.content:
                if first is None:
                    first = time.perf_counter() - start_t
                text += ch.choices[0].delta.content
            if ch.usage:
                usage = ch.usage
        ttft.append(first if first is not None else time.perf_counter() - start_t)
        details = usage.prompt_tokens_details
        cached.append((usage.prompt_tokens, details.cached_tokens if details else 0))
        answers.append(text)
        history.append({"role": "assistant", "content": text})
    return {"ttft_s": ttft, "total_s": time.perf_counter() - t0, "prompt_and_cached": cached, "answers": answers}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blockspec", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--prompts", default=os.path.join(ROOT, "data/prompts/mt_bench.jsonl"))
    p.add_argument("--speculative-config")
    p.add_argument("--plain-too", action="store_true")
    p.add_argument("--json")
    a = p.parse_args()
    questions = []
    with open(a.prompts) as f:
        for line in f:
            r = json.loads(line)
            questions.append(r["question"] if "question" in r else r["turns"][0])
            if len(questions) == a.turns:
                break
    modes = ("on", "off", "plain") if a.plain_too else ("on", "off")
    runs = {m: [] for m in modes}
    spec = ["--speculative-config", a.speculative_config] if a.speculative_config else []
    for r in range(a.rounds):
        for mode in modes:
            extra = {"on": spec, "off": spec + ["--no-enable-prefix-caching"], "plain": []}[mode]
            proc, port, log = start(a.blockspec, a.model, extra)
            try:
                res = chat(port, questions, a.max_tokens)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            runs[mode].append(res)
            print(f"round {r} caching {mode}: total {res['total_s']:.1f} s, TTFT per turn "
                  + " ".join(f"{t:.2f}" for t in res["ttft_s"]), file=sys.stderr)
    identical = all(x["answers"] == runs["off"][0]["answers"] for m in modes for x in runs[m])
    print(f"answers identical with and without caching (all rounds): {identical}")
    print("| turn | prompt tokens | cached (on) | TTFT on (s) | TTFT off (s) | ratio |")
    print("|---|---|---|---|---|---|")
    for t in range(a.turns):
        on = statistics.median(x["ttft_s"][t] for x in runs["on"])
        off = statistics.median(x["ttft_s"][t] for x in runs["off"])
        pr, ca = runs["on"][0]["prompt_and_cached"][t]
        print(f"| {t + 1} | {pr} | {ca} | {on:.2f} | {off:.2f} | {off / on:.2f}x |")
    ton = statistics.median(x["total_s"] for x in runs["on"])
    toff = statistics.median(x["total_s"] for x in runs["off"])
    print(f"| total | | | {ton:.1f} | {toff:.1f} | {toff / ton:.2f}x |")
    if a.plain_too:
        tpl = statistics.median(x["total_s"] for x in runs["plain"])
        print(f"plain serving (caching on, no speculation): total {tpl:.1f} s; on / plain {tpl / ton:.2f}x")
    if a.json:
        json.dump({"runs": runs, "identical": identical}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
