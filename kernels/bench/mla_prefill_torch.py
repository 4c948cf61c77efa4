"""Torch anchors for mla_prefill_bench (docs/perf.md): torch SDPA with the cuDNN and the flash
backends on the dense problem equivalent to one MLA prefill chunk at the K3 prefill rank:
24 heads, bf16, q [1, 24, new, 192], k [1, 24, cached + new, 192], v [1, 24, cached + new, 128],
causal aligned to the end (query i sees keys <= cached + i: causal_lower_right).
Variants tried, each reported or its error printed:
  - v 128 as is (cuDNN takes qk 192 / v 128)
  - v padded to 192 (flash needs equal q/k/v head dims); FLOPs still counted with v 128
  - the square problem (new = cached + new, is_causal) where the lower-right mask is refused
FLOPs: 2 x (192 + 128) per head per (query, key) pair attended, pairs counted exactly.
  python3 mla_prefill_torch.py [cached new]...
"""
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, QK, V = 24, 192, 128


def median_ms(fn, reps=10):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def pairs(cached, new):
    return sum(cached + i + 1 for i in range(new))


def run(label, backend, q, k, v, mask, causal, n_pairs):
    try:
        with sdpa_kernel(backends=[backend]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=QK ** -0.5)
            ms = median_ms(fn)
        tf = n_pairs * H * 2 * (QK + V) / ms * 1e-9
        print(f"{label:58s} {ms:8.3f} ms {tf:7.1f} TFLOP/s ({tf / 790:.2f} of 790)")
    except Exception as e:  # a backend refusing the shape is a result too
        print(f"{label:58s} refused: {str(e).splitlines()[0][:150]}")


def main():
    args = [int(a) for a in sys.argv[1:]]
    cases = list(zip(args[::2], args[1::2])) or [(8192, 8192), (16384, 8192)]
    print(torch.__version__, torch.cuda.get_device_name(), "cudnn", torch.backends.cudnn.version())
    from torch.nn.attention.bias import causal_lower_right
    g = torch.Generator(device="cuda").manual_seed(0)
    for cached, new in cases:
        ctx = cached + new
        q = torch.randn(1, H, new, QK, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, H, ctx, QK, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, H, ctx, V, device="cuda", dtype=torch.bfloat16, generator=g)
        vp = torch.nn.functional.pad(v, (0, QK - V))
        mask = causal_lower_right(new, ctx)
        n = pairs(cached, new)
        tag = f"cached {cached} new {new}"
        run(f"{tag} cuDNN, v 128, lower-right causal", SDPBackend.CUDNN_ATTENTION, q, k, v, mask, False, n)
        run(f"{tag} flash, v 128, lower-right causal", SDPBackend.FLASH_ATTENTION, q, k, v, mask, False, n)
        run(f"{tag} flash, v padded 192, lower-right causal", SDPBackend.FLASH_ATTENTION, q, k, vp, mask, False, n)
        # The square causal problem of the same context (more pairs; its own FLOPs).
        qs = torch.randn(1, H, ctx, QK, device="cuda", dtype=torch.bfloat16, generator=g)
        ns = pairs(0, ctx)
        run(f"square {ctx} cuDNN, v 128, is_causal", SDPBackend.CUDNN_ATTENTION, qs, k, v, None, True, ns)
        run(f"square {ctx} flash, v padded 192, is_causal", SDPBackend.FLASH_ATTENTION, qs, k, vp, None, True, ns)
        del q, k, v, vp, qs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
