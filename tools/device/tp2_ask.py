# Waits for /health, sends one chat request, saves the answer and prints wall times.
import json, sys, time, urllib.request
port, out = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
for _ in range(120):
    try:
        if urllib.request.urlopen(base + "/health", timeout=2).status == 200: break
    except Exception: time.sleep(0.5)
body = {"model": "tk3", "messages": [{"role": "user", "content": "Say something about GPUs."}], "max_tokens": 32, "temperature": 0}
times = []
for i in range(4):
    t0 = time.time()
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    ans = json.load(urllib.request.urlopen(req, timeout=60))
    times.append(time.time() - t0)
json.dump(ans, open(out, "w"))
print(port, "answer:", json.dumps(ans)[:400])
print(port, "wall per request (s):", ["%.3f" % t for t in times])
