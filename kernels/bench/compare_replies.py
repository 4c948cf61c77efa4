#!/usr/bin/env python3
"""Replies of a pdserve server to fixed greedy prompts, and their comparison (run_serve_nodes_h200.sh).

  compare_replies.py query PORT               -> JSON list of {text, token_logprobs} on stdout
  compare_replies.py many PORT                -> the same, every prompt sent at once (one batch)
  compare_replies.py compare NODES TP2 TP1    -> equality of NODES with TP2 and with TP1
  compare_replies.py same NAME GOT REF        -> equality of GOT with REF, printed as NAME (run_pp_cuda_h200.sh)
"""
import json
import sys
import urllib.request

PROMPTS = ["Hello", "The quick brown fox", "1, 2, 3,", "Once upon a time"]


def one(port, p):
    body = json.dumps({"prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "logprobs": 2}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        c = json.load(r)["choices"][0]
    return {"text": c["text"], "token_logprobs": c["logprobs"]["token_logprobs"]}


def query(port):
    json.dump([one(port, p) for p in PROMPTS], sys.stdout)


def many(port):
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(PROMPTS)) as ex:
        json.dump(list(ex.map(lambda p: one(port, p), PROMPTS)), sys.stdout)


def compare(nodes_path, tp2_path, tp1_path):
    nodes, tp2, tp1 = (json.load(open(p)) for p in (nodes_path, tp2_path, tp1_path))
    for name, ref in (("one-process tp2", tp2), ("tp1", tp1)):
        same_text = all(a["text"] == b["text"] for a, b in zip(nodes, ref)) and len(nodes) == len(ref)
        bitwise = nodes == ref
        diff = max(abs(x - y) for a, b in zip(nodes, ref) for x, y in zip(a["token_logprobs"], b["token_logprobs"]))
        print(f"two nodes vs {name}: texts {'equal' if same_text else 'DIFFER'}, logprobs "
              f"{'bitwise equal' if bitwise else 'max |diff| %.3g' % diff} over {len(PROMPTS)} prompts x 16 tokens")


def same(name, got_path, ref_path):
    got, ref = (json.load(open(p)) for p in (got_path, ref_path))
    same_text = len(got) == len(ref) and all(a["text"] == b["text"] for a, b in zip(got, ref))
    diff = max(abs(x - y) for a, b in zip(got, ref) for x, y in zip(a["token_logprobs"], b["token_logprobs"]))
    print(f"{name}: texts {'equal' if same_text else 'DIFFER'}, logprobs "
          f"{'bitwise equal' if got == ref else 'max |diff| %.3g' % diff} over {len(PROMPTS)} prompts x 16 tokens")


if __name__ == "__main__":
    if sys.argv[1] == "query":
        query(int(sys.argv[2]))
    elif sys.argv[1] == "many":
        many(int(sys.argv[2]))
    elif sys.argv[1] == "same":
        same(*sys.argv[2:5])
    else:
        compare(*sys.argv[2:5])
