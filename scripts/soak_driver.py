#!/usr/bin/env python3
"""The soak's daemons, load and checks (started by scripts/soak.sh; see its header)."""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

PDSERVE, WORK = os.environ["PDSERVE"], os.environ["WORK"]
DURATION = float(os.environ["DURATION"])
CONCURRENCY = int(os.environ["CONCURRENCY"])
MAX_REQUESTS = int(os.environ["MAX_REQUESTS"])
HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


PORTS = {"prefill": free_port(), "bootstrap": free_port(), "decode": free_port(), "router": free_port()}
COMMON = ["--model", f"{WORK}/model", "--host", HOST, "--page-size", "16", "--max-running", "8",
          "--max-queue", "32", "--max-model-len", "2048", "--drain-timeout", "20"]
SECRET = ["--cluster-secret-file", f"{WORK}/cluster.secret"]
COMMANDS = {
    # A prefill request whose decode half never arrives (decode down) holds an HTTP thread for
    # the bootstrap timeout, and a decode request whose prefill half failed holds its pages
    # for the waiting timeout (300 s each by default): keep both short here.
    "prefill": [PDSERVE, "prefill", *COMMON, *SECRET, "--bootstrap-timeout", "30", "--port", str(PORTS["prefill"]),
                "--bootstrap-port", str(PORTS["bootstrap"])],
    "decode": [PDSERVE, "decode", *COMMON, *SECRET, "--waiting-timeout", "30", "--port", str(PORTS["decode"])],
    "router": [PDSERVE, "router", "--pd", "--prefill", f"http://{HOST}:{PORTS['prefill']}@{PORTS['bootstrap']}",
               "--decode", f"http://{HOST}:{PORTS['decode']}", "--host", HOST, "--port", str(PORTS["router"]),
               "--health-interval", "1", "--health-success-threshold", "1", "--request-timeout", "120"],
}
procs, rss, lock = {}, {}, threading.Lock()
counts = {}


def count(what):
    with lock:
        counts[what] = counts.get(what, 0) + 1


def get(port, path, timeout=5):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def start(name):
    log = open(f"{WORK}/{name}.log", "ab")
    procs[name] = subprocess.Popen(COMMANDS[name], stdout=log, stderr=subprocess.STDOUT)
    port = PORTS[name]
    for _ in range(1200):
        if procs[name].poll() is not None:
            sys.exit(f"soak: {name} exited with {procs[name].returncode} while starting; see {WORK}/{name}.log")
        try:
            if get(port, "/health", 1)[0] == 200:
                rss.setdefault(name, []).append((time.time(), None))  # marks a (re)start
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"soak: {name} did not become healthy")


def vmrss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(path, body, timeout=120):
    c = http.client.HTTPConnection(HOST, PORTS["router"], timeout=timeout)
    try:
        c.request("POST", path, body=body if isinstance(body, bytes) else json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def prompt(rng):
    return [rng.randrange(10, 1000) for _ in range(rng.randint(1, 300))]


def one_request(rng):
    kind = rng.choices(["plain", "stream", "chat", "disconnect", "abort", "bad"], [30, 20, 15, 15, 10, 10])[0]
    try:
        if kind == "plain":
            st, _ = post("/v1/completions", {"prompt": prompt(rng), "max_tokens": rng.randint(1, 48),
                                             "temperature": rng.choice([0, 0.8]), "ignore_eos": True})
        elif kind == "chat":
            st, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi " * rng.randint(1, 80)}],
                                                  "max_tokens": rng.randint(1, 32)})
        elif kind in ("stream", "disconnect"):
            c = http.client.HTTPConnection(HOST, PORTS["router"], timeout=120)
            body = {"prompt": prompt(rng), "max_tokens": rng.randint(8, 96), "stream": True, "ignore_eos": True}
            c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            st = r.status
            if kind == "disconnect" and st == 200:
                r.read(rng.randint(1, 400))  # a few events, then vanish mid-stream
                c.sock.shutdown(socket.SHUT_RDWR)
            else:
                r.read()
            c.close()
        elif kind == "abort":
            try:  # a client that gives up before the answer
                post("/v1/completions", {"prompt": prompt(rng), "max_tokens": 200, "ignore_eos": True},
                     timeout=rng.uniform(0.01, 0.3))
                st = 200
            except (socket.timeout, TimeoutError):
                st = "client_timeout"
        else:
            bad = rng.choice([b'{"prompt": "x", ', {"prompt": "x", "max_tokens": -1},
                              {"prompt": [5] * 3000, "max_tokens": 4}, {"messages": "not a list"}])
            st, _ = post("/v1/completions" if "prompt" in str(bad) else "/v1/chat/completions", bad)
            if st not in (400, 502, 503):  # 502/503: the decode restart window, judged by the router
                count("bad_input_not_400")
        count(f"{kind}:{st}")
    except (OSError, http.client.HTTPException) as e:
        count(f"{kind}:{type(e).__name__}")


def worker(seed, stop_at):
    rng = random.Random(seed)
    while time.time() < stop_at:
        with lock:
            if counts.get("_sent", 0) >= MAX_REQUESTS:
                return
            counts["_sent"] = counts.get("_sent", 0) + 1
        one_request(rng)


def sampler(stop):
    while not stop.is_set():
        for name, p in list(procs.items()):
            if p.poll() is None:
                try:
                    rss[name].append((time.time(), vmrss_kib(p.pid)))
                except OSError:
                    pass
        stop.wait(5)


def growth(samples):
    """RSS growth over the last half of a daemon's (last) life, after warm-up, in KiB."""
    life = []
    for t, v in samples:
        life = [] if v is None else life + [(t, v)]
    if len(life) < 6:
        return None, life
    half = life[len(life) // 2:]
    third = len(half) // 3
    return max(v for _, v in half[-third:]) - max(v for _, v in half[:third]), life


def main():
    for name in ("prefill", "decode", "router"):
        start(name)
    print(f"soak: up: {PORTS}", flush=True)
    stop = threading.Event()
    threading.Thread(target=sampler, args=(stop,), daemon=True).start()
    t0 = time.time()
    stop_at = t0 + DURATION
    threads = [threading.Thread(target=worker, args=(i, stop_at)) for i in range(CONCURRENCY)]
    for th in threads:
        th.start()
    time.sleep(DURATION / 2)
    # One worker restart: decode drains (SIGTERM) and comes back on the same port.
    procs["decode"].send_signal(signal.SIGTERM)
    code = procs["decode"].wait(60)
    count(f"decode_restart_exit:{code}")
    start("decode")
    print(f"soak: decode restarted at {time.time() - t0:.0f} s (drain exit code {code})", flush=True)
    for th in threads:
        th.join()
    stop.set()
    elapsed = time.time() - t0
    problems = []
    for name, p in procs.items():
        if p.poll() is not None:
            problems.append(f"{name} exited with {p.returncode}")
    if counts.get("decode_restart_exit:0", 0) != 1:
        problems.append("decode did not exit 0 on SIGTERM")
    time.sleep(5)  # requests cut by the disconnects finish or abort
    pools = {}
    for name in ("prefill", "decode"):
        for _ in range(200):  # up to ~40 s: past the 30 s bootstrap / waiting timeouts
            try:
                info = json.loads(get(PORTS[name], "/get_server_info")[1])
            except (OSError, ValueError) as e:
                pools[name] = {"error": f"/get_server_info: {e!r}", "kv_pages_used": -1, "kda_slots_used": -1}
                time.sleep(1)
                continue
            pools[name] = {**info["pools"], **info["requests"]}
            if pools[name]["kv_pages_used"] == 0 and pools[name]["kda_slots_used"] == 0 and info["requests"]["running"] == 0:
                break
            time.sleep(0.2)
        if pools[name]["kv_pages_used"] or pools[name]["kda_slots_used"]:
            problems.append(f"{name} still holds pages or slots when idle: {pools[name]}")
    if counts.get("bad_input_not_400"):
        problems.append(f"{counts['bad_input_not_400']} bad inputs not answered 400")
    # Every worker back in the router's rotation once the load is gone.
    for _ in range(30):
        try:
            router_health = get(PORTS["router"], "/health")
        except OSError as e:
            router_health = (None, repr(e).encode())
        if router_health[0] == 200:
            break
        time.sleep(1)
    if router_health[0] != 200:
        problems.append(f"router /health still {router_health[0]} after the load: {router_health[1][:200]!r}")
    memory = {}
    for name, samples in rss.items():
        g, life = growth(samples)
        memory[name] = {"first_kib": life[0][1] if life else None, "last_kib": life[-1][1] if life else None,
                        "max_kib": max((v for _, v in life), default=None), "late_growth_kib": g}
        # Stopped growing: over the last half of its life, the last third is within 2% (or 4 MiB) of the first.
        if g is not None and g > max(4096, 0.02 * memory[name]["max_kib"]):
            problems.append(f"{name} resident memory still growing: +{g} KiB late in the run")
    for name in ("router", "decode", "prefill"):
        procs[name].send_signal(signal.SIGTERM)
        code = procs[name].wait(60)
        if code != 0:
            problems.append(f"{name} exited {code} on SIGTERM at the end")
    sent = counts.pop("_sent", 0)
    report = {"seconds": round(elapsed), "requests": sent, "outcomes": dict(sorted(counts.items())),
              "pools_when_idle": pools, "memory": memory, "problems": problems}
    with open(f"{WORK}/report.json", "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    print("soak: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
