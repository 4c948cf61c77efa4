"""Shared by the Python anchors in kernels/bench: CUDA-event timing and the MoE prefill row counts.

Imported from the scripts' own folder (Python puts a script's folder first on sys.path), so each
anchor is timed the same way and draws the same rows as the C++ benches it stands beside.
"""
import torch


def median_us(fn, reps, warm=3):
    """Median of `reps` timings (us, CUDA events) of fn(i) after `warm` untimed calls.

    fn takes the call's index so that callers can rotate inputs (weight sets past L2, graphs).
    """
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    ts = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def moe_prefill_counts(kind, experts, total, tokens):
    """moe_prefill_bench.cpp's counts_for(): `total` routed rows over `experts` local experts.

    uniform; zipf (weight 1 / (e + 1)); hot (expert 0 takes one row of every one of `tokens`
    tokens, the rest spread evenly); random (each row's expert drawn uniformly by xorshift64*).
    The integer remainder goes round-robin from expert 0.
    """
    c = [0] * experts
    if kind == "random":
        m = (1 << 64) - 1
        s = 0x9E3779B97F4A7C15
        for _ in range(total):
            s ^= s >> 12
            s ^= (s << 25) & m
            s ^= s >> 27
            c[(((s * 0x2545F4914F6CDD1D) & m) >> 32) % experts] += 1
        return c
    w = [1.0] * experts
    fixed = 0
    if kind == "zipf":
        w = [1.0 / (e + 1) for e in range(experts)]
    if kind == "hot":
        c[0] = fixed = tokens
        w[0] = 0.0
    s = sum(w)
    given = fixed
    for e in range(experts):
        if w[e] > 0:
            c[e] = int(float(total - fixed) * w[e] / s)
            given += c[e]
    e = 0
    while given < total:
        if w[e] > 0:
            c[e] += 1
            given += 1
        e = (e + 1) % experts
    return c
