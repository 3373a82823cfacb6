"""`blockspec serve` driven by the real `openai` Python client (e2e).

Starts the server binary on a free port with the real SmolLM2-135M GGUF and an
API key, waits for /health, then checks completions, chat, streaming (with
include_usage), errors the client raises, and 8 concurrent clients.

Run by CTest (label e2e) with the venv scripts/setup.sh makes:
  ~/.cache/blockspec/venv-openai/bin/python tests/server/openai_client_test.py \
      --blockspec build/blockspec --model ~/.cache/blockspec/models/smollm2.gguf
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import openai

ARGS = None
KEY = "e2e-test-key"
NAME = "smollm2"


class Server:
    def __init__(self, binary, model, extra=()):
        self.proc = subprocess.Popen(
            [binary, "serve", model, "--port", "0", "--served-model-name", NAME, "--api-key", KEY,
             "--max-model-len", "1024", "--max-num-seqs", "8", *extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("blockspec serve exited before listening:\n" + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("no 'listening on' line within 60 s")
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr], daemon=True).start()
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 300
        while True:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except urllib.error.HTTPError as e:
                assert e.code == 503, e.code  # loading
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server never became healthy:\n" + "".join(self.log))
            time.sleep(0.2)

    def reset_prefix_cache(self):
        req = urllib.request.Request(self.base + "/reset_prefix_cache", data=b"", method="POST",
                                     headers={"Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req) as r:
            assert r.status == 200

    def stop_checked(self):
        """Stops the server and checks it shut down cleanly on SIGTERM."""
        self.stop()
        assert self.proc.returncode == 0, "".join(self.log)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.blockspec, ARGS.model)
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key=KEY, max_retries=0, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()

    def test_models(self):
        ids = [m.id for m in self.client.models.list().data]
        self.assertEqual(ids, [NAME])

    def test_completion(self):
        r = self.client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=8,
                                           temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(len(r.choices), 1)
        self.assertIn("Paris", r.choices[0].text)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertEqual(r.usage.prompt_tokens, 5)
        self.assertLessEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat(self):
        # "Answer in one word." keeps SmolLM2's answer off a near tie: asked plainly, its first token ("The" vs
        # "L'") flips between the exact file weights and the default int8-activation load.
        msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
        r = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=20, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn("Paris", r.choices[0].message.content)
        # Stop string: the text ends before it, finish_reason "stop".
        s = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=20, temperature=0,
                                                stop=[" Paris"])
        self.assertEqual(s.choices[0].finish_reason, "stop")
        self.assertEqual(s.choices[0].message.content, r.choices[0].message.content.split(" Paris")[0])
        # chat_template_kwargs pass through (extra_body, as with vLLM).
        k = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=4, temperature=0,
                                                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        self.assertEqual(k.usage.prompt_tokens, r.usage.prompt_tokens)

    def test_streaming(self):
        msgs = [{"role": "user", "content": "Write one sentence about the sea."}]
        full = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=24, temperature=0)
        chunks = list(self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=24, temperature=0,
                                                          stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, full.choices[0].message.content)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, full.usage.completion_tokens)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finish, [full.choices[0].finish_reason])

        comp = self.client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=16, temperature=0)
        parts = list(self.client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=16,
                                                    temperature=0, stream=True))
        self.assertEqual("".join(p.choices[0].text for p in parts), comp.choices[0].text)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model=NAME, prompt="hi", max_tokens=4, n=0)
        self.assertEqual(e.exception.body["param"], "n")
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model=NAME, messages=[], max_tokens=4)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="nope", prompt="hi", max_tokens=4)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=NAME, prompt="hi", max_tokens=5000)
        bad_key = openai.OpenAI(base_url=self.server.base + "/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad_key.models.list()

    def metrics(self):
        """/metrics as {"name": value}, with ":reason" appended for finished_reason series."""
        req = urllib.request.Request(self.server.base + "/metrics", headers={"Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req) as r:
            text = r.read().decode()
        return {m.group(1) + (":" + m.group(2) if m.group(2) else ""): float(m.group(3))
                for m in re.finditer(r'^(blockspec:[a-z_]+)\{[^}]*?(?:finished_reason="(\w+)")?\} (\S+)$', text, re.M)}

    def test_slow_json_answer_parses(self):
        # A non-streaming answer that takes longer than the server's 2 s
        # heartbeat starts with spaces (it watches the connection meanwhile);
        # the client must parse it all the same. (Whether this one is slow
        # enough depends on the machine; server_test.cc's
        # SlowJsonAnswersStartWithSpacesAndStillParse holds the engine to
        # make sure of the spaces.)
        raw = self.client.completions.with_raw_response.create(model=NAME, prompt="A long story:", max_tokens=320,
                                                               temperature=0, extra_body={"ignore_eos": True})
        r = raw.parse()
        self.assertEqual(r.usage.completion_tokens, 320)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertTrue(raw.http_response.text.lstrip(" ").startswith("{"), raw.http_response.text[:40])

    def test_client_timeout_cancels_json_request(self):
        # The client gives up (closes the connection) long before 900 tokens:
        # the server cancels the request at once, counted as abort.
        aborted = self.metrics().get("blockspec:request_success_total:abort", 0)
        impatient = self.client.with_options(timeout=0.5)
        with self.assertRaises(openai.APITimeoutError):
            impatient.completions.create(model=NAME, prompt="A very long story:", max_tokens=900, temperature=0,
                                         extra_body={"ignore_eos": True})
        m = self.wait_idle()
        self.assertEqual(m["blockspec:num_requests_running"], 0, "the request still runs 5 s after the client left")
        self.assertEqual(m["blockspec:kv_cache_pages_used"], 0)
        self.assertEqual(m["blockspec:request_success_total:abort"], aborted + 1)

    def test_concurrency_8(self):
        def one(i):
            msgs = [{"role": "user", "content": f"Count from {i} to {i + 5}."}]
            if i % 2:
                chunks = list(self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=16,
                                                                  temperature=0, stream=True))
                return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1].choices[0].finish_reason
            r = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=16, temperature=0)
            return r.choices[0].message.content, r.choices[0].finish_reason

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, range(8)))
        for text, finish in results:
            self.assertTrue(text)
            self.assertIn(finish, ("stop", "length"))
        # The gauges follow at the engine's next step, a moment after the
        # last answer (longer on a busy machine).
        self.assertEqual(self.wait_idle()["blockspec:num_requests_running"], 0.0)

    def wait_idle(self, seconds=60):
        # Waits for the condition; the deadline only bounds a broken server.
        deadline = time.time() + seconds
        while True:
            m = self.metrics()
            idle = m["blockspec:num_requests_running"] == 0 and m["blockspec:num_requests_waiting"] == 0
            if idle or time.time() > deadline:
                return m
            time.sleep(0.05)


def chat_logprobs(client, msgs, **kw):
    """(tokens, logprobs, tops) of a greedy chat answer with logprobs, JSON or streamed."""
    r = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=24, temperature=0, logprobs=True,
                                       top_logprobs=3, **kw)
    entries = []
    if kw.get("stream"):
        for ch in r:
            if ch.choices and ch.choices[0].logprobs:
                entries += ch.choices[0].logprobs.content
    else:
        entries = r.choices[0].logprobs.content
    return ([e.token for e in entries], [e.logprob for e in entries],
            [[(t.token, t.logprob) for t in e.top_logprobs] for e in entries])


class LogprobsAndChoicesTest(unittest.TestCase):
    """logprobs / top_logprobs and n > 1 through the openai client on the real SmolLM2."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.blockspec, ARGS.model)
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key=KEY, max_retries=0, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()

    def test_chat_logprobs(self):
        msgs = [{"role": "user", "content": "Write one sentence about the sea."}]
        r = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=24, temperature=0)
        tokens, lps, tops = chat_logprobs(self.client, msgs)
        self.assertEqual(len(tokens), r.usage.completion_tokens)
        text = "".join(tokens)
        if r.choices[0].finish_reason == "stop":  # the eos token is scored but not part of the text
            text = "".join(tokens[:-1])
        self.assertEqual(text, r.choices[0].message.content)
        for t, lp, top in zip(tokens, lps, tops):
            self.assertLessEqual(lp, 0.0)
            self.assertEqual(len(top), 3)
            self.assertEqual(top[0][0], t)  # greedy: the chosen token is the most likely
            self.assertAlmostEqual(top[0][1], lp, places=6)
            self.assertGreaterEqual(top[0][1], top[1][1])
            self.assertGreaterEqual(top[1][1], top[2][1])
        # Streamed: the same tokens and values.
        s_tokens, s_lps, s_tops = chat_logprobs(self.client, msgs, stream=True)
        self.assertEqual(s_tokens, tokens)
        self.assertEqual(s_lps, lps)
        self.assertEqual(s_tops, tops)

    def test_completion_logprobs(self):
        r = self.client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=8,
                                           temperature=0, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 8)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        self.assertEqual(lp.text_offset[0], 0)
        self.assertEqual(lp.text_offset[-1], len(r.choices[0].text) - len(lp.tokens[-1]))
        for t, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertIn(t, top)
            self.assertEqual(top[t], v)
            self.assertLessEqual(len(top), 3)

    def test_forced_tool_choice(self):
        """tool_choice "required" and a named function, forced by structured output (as vLLM forces them)."""
        tools = ToolCallsTest.TOOLS + [{"type": "function", "function": {
            "name": "add", "description": "Add two integers", "parameters": {
                "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]}}}]
        msgs = [{"role": "user", "content": "What is the weather like in Paris today?"}]
        named = {"type": "function", "function": {"name": "get_current_weather"}}
        r = self.client.chat.completions.create(model=NAME, messages=msgs, tools=tools, tool_choice=named,
                                                max_tokens=60, temperature=0)
        m = r.choices[0].message
        self.assertEqual(len(m.tool_calls), 1)
        self.assertEqual(m.tool_calls[0].function.name, "get_current_weather")
        args = json.loads(m.tool_calls[0].function.arguments)
        self.assertIsInstance(args["city"], str)
        # Streamed: the arguments arrive as they are generated and add up to the same call.
        name, pieces = None, ""
        for ch in self.client.chat.completions.create(model=NAME, messages=msgs, tools=tools, tool_choice=named,
                                                      max_tokens=60, temperature=0, stream=True):
            for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
                name = name or tc.function.name
                pieces += tc.function.arguments or ""
        self.assertEqual((name, pieces), ("get_current_weather", m.tool_calls[0].function.arguments))
        ask = [{"role": "user", "content": "What is 2+3? Also what's the weather in Rome?"}]
        r = self.client.chat.completions.create(model=NAME, messages=ask, tools=tools, tool_choice="required",
                                                max_tokens=200, temperature=0)
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        for tc in r.choices[0].message.tool_calls:
            self.assertIn(tc.function.name, ("get_current_weather", "add"))
            json.loads(tc.function.arguments)
        self.assertGreaterEqual(len(r.choices[0].message.tool_calls), 1)

    def test_n_choices(self):
        msgs = [{"role": "user", "content": "Name a colour."}]
        r = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=12, temperature=1.0, n=3,
                                                seed=9)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        for i, c in enumerate(r.choices):
            one = self.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=12, temperature=1.0,
                                                      seed=9 + i)
            self.assertEqual(c.message.content, one.choices[0].message.content)
        parts = {}
        for ch in self.client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=10,
                                                 temperature=1.0, n=2, seed=3, stream=True):
            parts[ch.choices[0].index] = parts.get(ch.choices[0].index, "") + ch.choices[0].text
        whole = self.client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=10,
                                               temperature=1.0, n=2, seed=3)
        self.assertEqual([parts[0], parts[1]], [c.text for c in whole.choices])


class SpeculativeServeTest(unittest.TestCase):
    """`blockspec serve --speculative-config` (n-gram, K = 3) answers greedy
    requests exactly as the server without it, through the openai client,
    with drafts made and accepted on the real model."""

    SPEC = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'
    PROMPTS = ["def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\ndef fib2(n):\n",
               "one two three four five one two three four five one two",
               "The capital of France is"]

    @classmethod
    def setUpClass(cls):
        cls.plain = Server(ARGS.blockspec, ARGS.model)
        cls.spec = Server(ARGS.blockspec, ARGS.model, ["--speculative-config", cls.SPEC])

    @classmethod
    def tearDownClass(cls):
        for s in (cls.plain, cls.spec):
            s.stop_checked()

    def answers(self, server):
        c = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
        out = []
        for p in self.PROMPTS:
            out.append(c.completions.create(model=NAME, prompt=p, max_tokens=48, temperature=0,
                                            extra_body={"ignore_eos": True}).choices[0].text)
            parts = c.completions.create(model=NAME, prompt=p, max_tokens=48, temperature=0, stream=True,
                                         extra_body={"ignore_eos": True})
            out.append("".join(x.choices[0].text for x in parts))
        msgs = [{"role": "user", "content": "Repeat after me: red green blue red green blue red green blue"}]
        out.append(c.chat.completions.create(model=NAME, messages=msgs, max_tokens=32, temperature=0)
                   .choices[0].message.content)
        return out

    def test_same_answers_and_drafts_accepted(self):
        plain, spec = self.answers(self.plain), self.answers(self.spec)
        self.assertEqual(spec, plain)
        # Logprobs: speculation reports what plain decoding reports for the same tokens.
        msgs = [{"role": "user", "content": "Repeat after me: red green blue red green blue red green blue"}]
        clients = [openai.OpenAI(base_url=s.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
                   for s in (self.plain, self.spec)]
        (pt, pl, ptop), (st, sl, stop) = [chat_logprobs(c, msgs) for c in clients]
        self.assertEqual(st, pt)
        for a, b in zip(sl, pl):
            self.assertAlmostEqual(a, b, delta=1e-4)
        self.assertEqual([[t for t, _ in x] for x in stop], [[t for t, _ in x] for x in ptop])
        req = urllib.request.Request(self.spec.base + "/metrics", headers={"Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req) as r:
            text = r.read().decode()
        m = {k: float(v) for k, v in re.findall(r"^blockspec:(spec_decode_num_\w+_total)\{[^}]*\} (\S+)$", text, re.M)}
        print(f"[openai spec] {m}", file=sys.stderr)
        self.assertGreater(m["spec_decode_num_drafts_total"], 0)
        self.assertGreater(m["spec_decode_num_accepted_tokens_total"], 0)
        self.assertLessEqual(m["spec_decode_num_draft_tokens_total"], 3 * m["spec_decode_num_drafts_total"])


class ToolCallsTest(unittest.TestCase):
    """`serve --enable-auto-tool-choice --tool-call-parser hermes` through the openai client: tool calls
    returned and streamed as vLLM returns them, and an agent loop that sends the tool result back. The
    model is tests/fixtures/toolcall/qwen3-toolcall-tiny (scripts/make_toolcall_model.py): hand-set
    weights whose greedy answer is a hermes tool call on a first turn and a text answer once a tool
    result is in the conversation (no offline model emits <tool_call>)."""

    TOOLS = [{"type": "function", "function": {
        "name": "get_current_weather", "description": "Get the current weather in a given city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]
    ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]

    @classmethod
    def setUpClass(cls):
        cls.servers = [Server(ARGS.blockspec, ARGS.toolcall_model, cls.FLAGS),
                       Server(ARGS.blockspec, ARGS.toolcall_model,
                              cls.FLAGS + ["--speculative-config", SpeculativeServeTest.SPEC]),
                       Server(ARGS.blockspec, ARGS.toolcall_model)]  # without the tool flags
        cls.clients = [openai.OpenAI(base_url=s.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
                       for s in cls.servers]

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop_checked()

    def call(self, client, messages, **kw):
        return client.chat.completions.create(model=NAME, messages=messages, tools=self.TOOLS, max_tokens=32,
                                              temperature=0, **kw)

    def streamed(self, client, messages, **kw):
        """The streamed answer put together as the openai client's users do: content, and per index the
        tool call's id, name and argument pieces."""
        content, calls, finish, ids_seen = "", {}, [], []
        for ch in self.call(client, messages, stream=True, **kw):
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    self.assertIsNone(c["id"], "a tool call's id is sent once")
                    c["id"], c["name"] = tc.id, tc.function.name
                    self.assertEqual(tc.type, "function")
                c["arguments"] += tc.function.arguments or ""
            if ch.choices[0].finish_reason:
                finish.append(ch.choices[0].finish_reason)
        return content, [calls[i] for i in sorted(calls)], finish

    def test_tool_call_then_answer(self):
        for client in self.clients[:2]:  # plain and speculative (n-gram, K = 3): the same answers
            r = self.call(client, self.ASK)
            m = r.choices[0].message
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
            self.assertIsNone(m.content)
            self.assertEqual(len(m.tool_calls), 1)
            tc = m.tool_calls[0]
            self.assertEqual(tc.type, "function")
            self.assertTrue(tc.id.startswith("chatcmpl-tool-"), tc.id)
            self.assertEqual(tc.function.name, "get_current_weather")
            self.assertEqual(tc.function.arguments, '{"city": "Paris"}')  # json.dumps, as vLLM writes it
            # Streamed: the same call, its id and name first, then the arguments.
            content, calls, finish = self.streamed(client, self.ASK)
            self.assertEqual(content, "")
            self.assertEqual([(c["name"], c["arguments"]) for c in calls], [("get_current_weather", '{"city": "Paris"}')])
            self.assertEqual(finish, ["tool_calls"])
            # The agent loop: the assistant's call and the tool's result go back; the model answers.
            history = self.ASK + [m.model_dump(exclude_none=True),
                                  {"role": "tool", "tool_call_id": tc.id,
                                   "content": json.dumps({"city": "Paris", "sky": "sunny", "celsius": 21})}]
            r2 = self.call(client, history)
            self.assertEqual(r2.choices[0].finish_reason, "stop")
            self.assertEqual(r2.choices[0].message.content, "It is sunny in Paris today.")
            self.assertFalse(r2.choices[0].message.tool_calls)
            content, calls, finish = self.streamed(client, history)
            self.assertEqual((content, calls, finish), ("It is sunny in Paris today.", [], ["stop"]))

    def test_tool_choice(self):
        client = self.clients[0]
        # "none": the tools are still in the prompt, the answer is not parsed (vLLM's default).
        r = self.call(client, self.ASK, tool_choice="none")
        self.assertEqual(r.choices[0].message.content,
                         '<tool_call>{"name": "get_current_weather", "arguments": {"city": "Paris"}}</tool_call>')
        self.assertFalse(r.choices[0].message.tool_calls)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(self.call(client, self.ASK, parallel_tool_calls=False).choices[0].finish_reason, "tool_calls")
        with self.assertRaises(openai.BadRequestError) as e:
            self.call(client, self.ASK, tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertIn("not in 'tools'", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=NAME, messages=self.ASK, tools=[{"type": "function", "function": {}}])
        self.assertIn("tools[0].function.name", str(e.exception))

    def test_without_the_tool_flags(self):
        client = self.clients[2]
        with self.assertRaises(openai.BadRequestError) as e:
            self.call(client, self.ASK)
        self.assertIn("--enable-auto-tool-choice and --tool-call-parser", str(e.exception))
        r = self.call(client, self.ASK, tool_choice="none")
        self.assertTrue(r.choices[0].message.content.startswith("<tool_call>"))


class ReasoningTest(unittest.TestCase):
    """`serve --reasoning-parser qwen3` through the openai client: the <think> span is reasoning_content in the
    message and in the stream deltas, the rest content. The model is tests/fixtures/toolcall/qwen3-think-tiny
    (hand-set weights, scripts/make_toolcall_model.py): its greedy answer opens with a thought."""

    MSGS = [{"role": "user", "content": "What is the weather like in Paris today?"}]

    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.blockspec, ARGS.think_model, ["--reasoning-parser", "qwen3"])
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key=KEY, max_retries=0, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()

    def test_reasoning_split(self):
        r = self.client.chat.completions.create(model=NAME, messages=self.MSGS, max_tokens=16, temperature=0)
        m = r.choices[0].message
        self.assertEqual(m.reasoning_content, "\nThe user asks about the weather.\n")
        self.assertEqual(m.content, "\n\nIt is sunny in Paris today.")
        reasoning, content = "", ""
        for ch in self.client.chat.completions.create(model=NAME, messages=self.MSGS, max_tokens=16, temperature=0,
                                                      stream=True):
            if ch.choices:
                reasoning += getattr(ch.choices[0].delta, "reasoning_content", None) or ""
                content += ch.choices[0].delta.content or ""
        self.assertEqual((reasoning, content), (m.reasoning_content, m.content))


def random_schema(rng, depth=0):
    """A random JSON schema of the kinds structured output supports: nested objects with required and optional
    properties, arrays, enums, numbers, integers, booleans, null, strings bounded by maxLength or an anchored
    pattern, anyOf."""
    kinds = ["string", "pattern", "integer", "number", "boolean", "enum", "null"]
    if depth < 2:
        kinds += ["object", "array", "object", "anyOf"]
    k = rng.choice(kinds)
    if k == "string":
        return {"type": "string", "maxLength": rng.randint(1, 8)}
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-z]{2,5}$", "^[A-Z][0-9]{3}$", "^(yes|no)$",
                                                         "^\\d{1,3}(\\.\\d)?$", "^[a-f0-9]{4}-[a-f0-9]{2}$"])}
    if k == "integer":
        return {"type": "integer"} if rng.random() < 0.5 else {"type": "integer", "minimum": 0}
    if k == "number":
        return {"type": "number"}
    if k == "boolean":
        return {"type": "boolean"}
    if k == "null":
        return {"type": "null"}
    if k == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 1, 2.5, True, None, "a b"], rng.randint(1, 4))}
    if k == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(2)]}
    if k == "array":
        lo = rng.randint(0, 2)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo, "maxItems": lo + rng.randint(0, 2)}
    names = rng.sample(["id", "name", "size", "color", "tags", "meta", "ok", "when"], rng.randint(1, 4))
    props = {n: random_schema(rng, depth + 1) for n in names}
    return {"type": "object", "properties": props, "required": [n for n in names if rng.random() < 0.6]}


class StructuredOutputTest(unittest.TestCase):
    """Structured output through the openai client on the real SmolLM2: 200 requests with random JSON schemas at
    T = 1, on a plain server and on an n-gram speculative one (drafts the grammar forbids are rejected); every
    output parses and validates against its schema (jsonschema 4.23, an implementation nobody here wrote).
    Also json_object, guided_choice, guided_regex, and the throughput cost of the mask (printed)."""

    N = 200

    @classmethod
    def setUpClass(cls):
        cls.servers = [Server(ARGS.blockspec, ARGS.model),
                       Server(ARGS.blockspec, ARGS.model, ["--speculative-config", SpeculativeServeTest.SPEC])]
        cls.clients = [openai.OpenAI(base_url=s.base + "/v1", api_key=KEY, max_retries=0, timeout=600)
                       for s in cls.servers]

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop_checked()

    def run_schemas(self, client, schemas):
        def one(i):
            msgs = [{"role": "user", "content": "Reply with a JSON value for this schema: " + json.dumps(schemas[i])}]
            r = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=256, temperature=1.0, seed=i,
                                               response_format={"type": "json_schema",
                                                                "json_schema": {"name": "s", "schema": schemas[i]}})
            return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            out = list(ex.map(one, range(len(schemas))))
        return out, time.time() - t0

    def test_random_schemas_validate(self):
        import jsonschema
        import random
        rng = random.Random(2026)
        schemas = [random_schema(rng) for _ in range(self.N)]
        for name, client in zip(("plain", "ngram"), self.clients):
            out, secs = self.run_schemas(client, schemas)
            tokens = sum(n for _, _, n in out)
            bad = []
            for schema, (text, finish, _) in zip(schemas, out):
                try:
                    self.assertEqual(finish, "stop", text)
                    jsonschema.validate(json.loads(text), schema)
                except Exception as e:  # noqa: BLE001 -- every failure is collected and shown
                    bad.append((schema, text, repr(e)[:200]))
            print(f"[structured {name}] {self.N} schemas, {tokens} tokens in {secs:.1f} s "
                  f"({tokens / secs:.1f} tok/s at concurrency 8), invalid: {len(bad)}", file=sys.stderr)
            self.assertEqual(bad, [], f"{len(bad)} outputs do not validate; first: {bad[:1]}")
        # The mask's cost: the same prompts unconstrained, as many tokens each (ignore_eos), from an empty prefix
        # cache as the constrained pass had (its prompts would otherwise be cached).
        self.servers[0].reset_prefix_cache()
        def free(i):
            msgs = [{"role": "user", "content": "Reply with a JSON value for this schema: " + json.dumps(schemas[i])}]
            return self.clients[0].chat.completions.create(
                model=NAME, messages=msgs, max_tokens=max(1, out[i][2]), temperature=1.0, seed=i,
                extra_body={"ignore_eos": True}).usage.completion_tokens
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            ftokens = sum(ex.map(free, range(self.N)))
        fsecs = time.time() - t0
        print(f"[structured cost] unconstrained, same prompts and lengths: {ftokens} tokens in {fsecs:.1f} s "
              f"({ftokens / fsecs:.1f} tok/s)", file=sys.stderr)

    def test_other_forms(self):
        c = self.clients[0]
        msgs = [{"role": "user", "content": "Is the sky blue? Describe it as JSON."}]
        # A sampled object may still be open when max_tokens ends it (the mask allows any string; which seeds do
        # depends on the machine's kernels): every finished answer must be an object, every cut one must start
        # as one, and at least one of a few seeds must finish.
        finished = 0
        for seed in range(1, 6):
            r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=200, temperature=1.0, seed=seed,
                                          response_format={"type": "json_object"})
            text = r.choices[0].message.content
            if r.choices[0].finish_reason == "stop":
                self.assertIsInstance(json.loads(text), dict, text)
                finished += 1
            else:
                self.assertEqual(r.choices[0].finish_reason, "length", text)
                self.assertTrue(text.lstrip().startswith("{"), text)
        self.assertGreaterEqual(finished, 1, "no json_object answer finished within 200 tokens in 5 seeds")
        r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=10, temperature=1.0,
                                      extra_body={"guided_choice": ["yes", "no"]})
        self.assertIn(r.choices[0].message.content, ("yes", "no"))
        r = c.completions.create(model=NAME, prompt="Call me at ", max_tokens=20, temperature=1.0,
                                 extra_body={"guided_regex": "\\d{3}-\\d{4}"})
        self.assertRegex(r.choices[0].text, "^\\d{3}-\\d{4}$")
        with self.assertRaises(openai.BadRequestError) as e:
            c.chat.completions.create(model=NAME, messages=msgs, max_tokens=10, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "number", "maximum": 3}}})
        self.assertIn("maximum", str(e.exception))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--blockspec", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--toolcall-model",
                   default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../fixtures/toolcall/qwen3-toolcall-tiny"))
    p.add_argument("--think-model",
                   default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../fixtures/toolcall/qwen3-think-tiny"))
    ARGS, rest = p.parse_known_args()
    if not os.path.exists(ARGS.model):
        sys.exit(f"{ARGS.model} is missing: run scripts/fetch_models.sh smollm2")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
