#!/usr/bin/env python3
"""The cost of structured output's token masks (issue 19): N random JSON schemas (the generator of
tests/server/openai_client_test.py) answered at T = 1 with response_format json_schema by `blockspec serve`, then
the same prompts unconstrained with the same number of tokens each (ignore_eos), both at concurrency C, rounds
interleaved, each pass from an empty prefix cache (POST /reset_prefix_cache: the prompts repeat). Prints output
tok/s of both and how many constrained outputs validate (jsonschema).

  ~/.cache/blockspec/venv-openai/bin/python scripts/bench_structured.py --blockspec build/blockspec \
      --model ~/.cache/blockspec/models/qwen2.5-coder-1.5b.gguf --n 40 --concurrency 8 --rounds 2
"""
import argparse
import concurrent.futures
import importlib.util
import json
import os
import random
import statistics
import sys
import time

import jsonschema
import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("oct", os.path.join(ROOT, "tests/server/openai_client_test.py"))
oct_ = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oct_)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blockspec", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--extra", default="", help="more serve flags, space separated")
    a = p.parse_args()
    rng = random.Random(2026)
    schemas = [oct_.random_schema(rng) for _ in range(a.n)]
    server = oct_.Server(a.blockspec, a.model, a.extra.split() if a.extra else [])
    client = openai.OpenAI(base_url=server.base + "/v1", api_key=oct_.KEY, max_retries=0, timeout=900)
    msgs = lambda i: [{"role": "user", "content": "Reply with a JSON value for this schema: " + json.dumps(schemas[i])}]
    res = {"constrained": [], "free": []}
    try:
        for r in range(a.rounds):
            server.reset_prefix_cache()  # both passes start from an empty prefix cache
            def constrained(i):
                out = client.chat.completions.create(
                    model=oct_.NAME, messages=msgs(i), max_tokens=256, temperature=1.0, seed=i + 1000 * r,
                    response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schemas[i]}})
                return out.choices[0].message.content, out.usage.completion_tokens
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
                outs = list(ex.map(constrained, range(a.n)))
            secs = time.time() - t0
            valid = 0
            for s, (text, _) in zip(schemas, outs):
                try:
                    jsonschema.validate(json.loads(text), s)
                    valid += 1
                except Exception:  # noqa: BLE001
                    pass
            toks = sum(n for _, n in outs)
            res["constrained"].append(toks / secs)

            def free(i):
                return client.chat.completions.create(model=oct_.NAME, messages=msgs(i), max_tokens=max(1, outs[i][1]),
                                                      temperature=1.0, seed=i, extra_body={"ignore_eos": True}
                                                      ).usage.completion_tokens
            server.reset_prefix_cache()
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
                ftoks = sum(ex.map(free, range(a.n)))
            fsecs = time.time() - t0
            res["free"].append(ftoks / fsecs)
            print(f"round {r}: constrained {toks} tokens {secs:.1f} s ({toks / secs:.1f} tok/s), valid {valid}/{a.n}; "
                  f"unconstrained {ftoks} tokens {fsecs:.1f} s ({ftoks / fsecs:.1f} tok/s)", file=sys.stderr)
    finally:
        server.stop()
    c, f = statistics.median(res["constrained"]), statistics.median(res["free"])
    print(f"median output tok/s: constrained {c:.1f}, unconstrained {f:.1f}, ratio {c / f:.2f}")


if __name__ == "__main__":
    main()
