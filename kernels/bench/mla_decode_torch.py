"""Torch anchor for mla_decode_bench (docs/perf.md): the same absorbed-MLA decode step in plain
torch (no FlashInfer/FlashMLA wheel on the device): fp32 pages [P, 64, 576], random page
tables; (a) gather the pages then matmul + softmax + matmul, (b) the attention alone over
pre-gathered dense latents. Bandwidth = the same cache bytes (rows x ctx x 576 x 4) / time.
  python3 mla_decode_torch.py
"""
import math
import sys
import torch

LAT, ROPE, PAGE = 512, 64, 64
ENTRY = LAT + ROPE


def median_us(fn, reps=10):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def attend(q, kv, scale):
    # q [B, H, 576], kv [B, N, 576] -> o [B, H, 512]
    s = torch.bmm(q, kv.transpose(1, 2)) * scale
    return torch.bmm(torch.softmax(s, dim=-1), kv[:, :, :LAT])


def shape(heads, batch, ctx):
    pages_per_row = ctx // PAGE
    pool = batch * pages_per_row
    cache = torch.randn(pool, PAGE, ENTRY, device="cuda")
    table = torch.randperm(pool, device="cuda").view(batch, pages_per_row)
    q = torch.randn(batch, heads, ENTRY, device="cuda")
    scale = 1.0 / math.sqrt(192.0)
    nbytes = batch * ctx * ENTRY * 4
    gathered_us = median_us(lambda: attend(q, cache[table].view(batch, ctx, ENTRY), scale))
    dense = cache[table].view(batch, ctx, ENTRY)
    dense_us = median_us(lambda: attend(q, dense, scale))
    floor = nbytes / 4.2e12 * 1e6
    print(f"| {heads:2d} | {batch:4d} | {ctx:6d} | {nbytes / 1e6:9.1f} | {floor:8.2f} | {gathered_us:9.1f} | "
          f"{nbytes / gathered_us * 1e-6:5.2f} TB/s | {dense_us:9.1f} | {nbytes / dense_us * 1e-6:5.2f} TB/s |", flush=True)
    del cache, dense
    torch.cuda.empty_cache()


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}: fp32 absorbed MLA decode, page 64")
    print("| H | batch | ctx | MB | floor us | gather+attend us | BW | attend (pre-gathered) us | BW |")
    print("|---|---|---|---|---|---|---|---|---|")
    if len(sys.argv) > 1 and sys.argv[1] == "focus":  # mla_decode_bench's focus shapes
        for b in (1, 8, 32, 128, 256):
            for c in (1024, 16384):
                shape(3, b, c)
        for b, c in ((256, 4096), (1, 65536), (8, 65536)):
            shape(3, b, c)
        return
    for b in (1, 8, 32, 64, 128, 256):
        for c in (1024, 4096, 16384):
            shape(3, b, c)
    for b in (1, 8):
        shape(3, b, 65536)
    for h in (16, 24):
        shape(h, 32, 4096)


if __name__ == "__main__":
    with torch.no_grad():
        main()
