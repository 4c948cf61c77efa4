#!/usr/bin/env python3
"""The official `openai` Python client against a live `pdserve serve` on the tiny model.

Starts the server on a free port (--port 0; the port is read from its first stdout line),
runs the checks, and always kills it. Exit 77 (ctest: skipped) when `openai` is missing.
Usage: openai_client_test.py --pdserve PATH/TO/pdserve
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading

try:
    import openai
except ImportError:
    print("openai client not installed (pip install openai): skipping")
    sys.exit(77)


def start_server(pdserve, model_dir):
    proc = subprocess.Popen(
        [pdserve, "serve", "--model", model_dir, "--host", "127.0.0.1", "--port", "0",
         "--api-key", "test-key", "--page-size", "16", "--max-model-len", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    deadline = threading.Timer(120, proc.kill)  # never hang CI on a server that never starts
    deadline.start()
    try:
        for line in proc.stdout:
            if "listening on http://" in line:
                port = int(line.strip().rsplit(":", 1)[1])
                break
    finally:
        deadline.cancel()
    if port is None:
        proc.kill()
        raise RuntimeError("pdserve serve did not start")
    # Keep draining its log so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, port


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def run_checks(client):
    model = client.models.list().data[0].id
    check(model == "tiny-k3", "models.list names the served model")

    # Completions: text, usage, finish_reason length with ignore_eos.
    c = client.completions.create(model=model, prompt="The quick brown fox", max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    check(c.object == "text_completion", "completion object")
    check(c.choices[0].finish_reason == "length", "finish_reason length")
    check(c.usage.completion_tokens == 8 and c.usage.total_tokens == c.usage.prompt_tokens + 8, "completion usage")
    greedy_text = c.choices[0].text

    # Token-id prompt.
    t = client.completions.create(model=model, prompt=[10, 20, 30], max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    check(t.usage.prompt_tokens == 3, "token-id prompt counted")

    # Streaming: chunk format, same text as non-streaming, usage chunk at the end.
    stream = client.completions.create(model=model, prompt="The quick brown fox", max_tokens=8, temperature=0,
                                       stream=True, stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    check(text == greedy_text, "streamed text equals non-streamed text")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8 and not chunks[-1].choices,
          "include_usage adds a final usage chunk")
    check(all(ch.usage is None for ch in chunks[:-1]), "other chunks carry usage null")

    # Stop strings: cut before the stop, never in the output, finish_reason stop.
    assert len(greedy_text) >= 6, greedy_text
    stop = greedy_text[len(greedy_text) // 2:len(greedy_text) // 2 + 2]
    s = client.completions.create(model=model, prompt="The quick brown fox", max_tokens=8, temperature=0,
                                  stop=[stop], extra_body={"ignore_eos": True})
    check(s.choices[0].text == greedy_text[:greedy_text.find(stop)], "stop string cuts the text")
    check(s.choices[0].finish_reason == "stop", "finish_reason stop")

    # Seed reproducibility.
    a = client.completions.create(model=model, prompt="Once", max_tokens=12, temperature=1.0, seed=7,
                                  extra_body={"ignore_eos": True})
    b = client.completions.create(model=model, prompt="Once", max_tokens=12, temperature=1.0, seed=7,
                                  extra_body={"ignore_eos": True})
    check(a.choices[0].text == b.choices[0].text, "same seed, same text")

    # Logprobs (completions: integer top-k; chat: bool + top_logprobs).
    lp = client.completions.create(model=model, prompt="abc", max_tokens=4, temperature=0, logprobs=2,
                                   extra_body={"ignore_eos": True})
    l = lp.choices[0].logprobs
    check(len(l.tokens) == 4 and len(l.token_logprobs) == 4 and all(x <= 0 for x in l.token_logprobs),
          "completion logprobs")
    check(all(len(d) <= 2 for d in l.top_logprobs), "completion top_logprobs size")

    # Chat: non-streaming, reasoning_content split, streaming chunk format.
    msgs = [{"role": "user", "content": "Say hello"}]
    ch = client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0,
                                        logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    m = ch.choices[0].message
    check(ch.object == "chat.completion" and m.role == "assistant", "chat completion object")
    reasoning = getattr(m, "reasoning_content", None)
    if reasoning is None and m.model_extra:
        reasoning = m.model_extra.get("reasoning_content")
    check(isinstance(reasoning, str), "reasoning_content present in thinking mode")
    check(ch.usage.completion_tokens == 16, "chat usage")
    check(len(ch.choices[0].logprobs.content) == 16 and len(ch.choices[0].logprobs.content[0].top_logprobs) == 2,
          "chat logprobs")
    st = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0, stream=True,
                                             extra_body={"ignore_eos": True}))
    check(st[0].object == "chat.completion.chunk" and st[0].choices[0].delta.role == "assistant",
          "first chat chunk carries the role")
    content = "".join(x.choices[0].delta.content or "" for x in st if x.choices)
    check(content == (m.content or ""), "streamed chat content equals non-streamed content")
    check(st[-1].choices[0].finish_reason == "length", "chat stream ends with finish_reason")

    # Errors surface as the client's typed exceptions.
    try:
        client.completions.create(model=model, prompt="x", max_tokens=0)
        check(False, "max_tokens=0 must fail")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == "max_tokens", "BadRequestError with param")
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check(False, "wrong api key must fail")
    except openai.AuthenticationError:
        check(True, "wrong api key -> AuthenticationError")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pdserve", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pdserve-openai-")
    proc = None
    try:
        model_dir = os.path.join(tmp, "tiny-k3")
        subprocess.run([args.pdserve, "make-model", "--preset", "tiny-k3", "--out", model_dir], check=True,
                       stdout=subprocess.DEVNULL)
        proc, port = start_server(args.pdserve, model_dir)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="test-key", max_retries=0, timeout=120)
        run_checks(client)
        print("all openai client checks passed")
        return 0
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
