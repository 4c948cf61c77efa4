"""Torch anchor for moe_prefill_bench: the same EP4 rank (224 experts, 3584 -> 3072 -> 3584,
SiTU(4, 25)), 32768 routed rows in the same four distributions (uniform, zipf, hot, random), with
bf16 dequantised weights (random; 15 GB): (a) one matmul pair per expert, (b) torch's
grouped matmul (torch._grouped_mm) if this torch has it. CUDA events, 3 warm-ups, median of
--reps. Prints TFLOP/s on 2 * rows * 3 * 3072 * 3584 FLOPs. --rows R,...: other routed row
counts (R rows of R / 4 tokens, as moe_prefill_bench --rows R)."""
import argparse

import torch
from bench_timing import median_us, moe_prefill_counts

E, INTER, DIM, ROWS = 224, 3072, 3584, 32768


def situ(g, u):
    return 4.0 * torch.tanh(g / 4.0) * torch.sigmoid(g) * (25.0 * torch.tanh(u / 25.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rows", default=str(ROWS), help="routed rows (comma list)")
    args = ap.parse_args()
    torch.manual_seed(0)
    w13 = torch.randn(E, 2 * INTER, DIM, dtype=torch.bfloat16, device="cuda") * 0.02
    w2 = torch.randn(E, DIM, INTER, dtype=torch.bfloat16, device="cuda") * 0.02
    for rows in [int(r) for r in args.rows.split(",") if r]:
        run_rows(rows, args.reps, w13, w2)


def run_rows(rows, reps, w13, w2):
    dev = "cuda"
    x = torch.randn(rows, DIM, dtype=torch.bfloat16, device=dev)
    flops = 2.0 * rows * 3 * INTER * DIM
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; {rows} rows")
    for kind in ("uniform", "zipf", "hot", "random"):
        c = moe_prefill_counts(kind, E, rows, rows // 4)
        off = [0]
        for v in c:
            off.append(off[-1] + v)
        out = torch.empty(rows, DIM, dtype=torch.bfloat16, device=dev)

        def per_expert():
            for e in range(E):
                s, t = off[e], off[e + 1]
                if t > s:
                    h = x[s:t] @ w13[e].t()
                    out[s:t] = situ(h[:, :INTER], h[:, INTER:]) @ w2[e].t()

        us = median_us(lambda i: per_expert(), reps)
        print(f"torch per-expert {kind:7s}: {us:9.1f} us  {flops / us * 1e-6:6.1f} TFLOP/s")
        if hasattr(torch, "_grouped_mm"):
            offs = torch.tensor(off[1:], dtype=torch.int32, device=dev)
            b13, b2 = w13.transpose(-2, -1), w2.transpose(-2, -1)

            def grouped():
                h = torch._grouped_mm(x, b13, offs=offs)
                a = situ(h[:, :INTER], h[:, INTER:])
                return torch._grouped_mm(a, b2, offs=offs)

            try:
                us = median_us(lambda i: grouped(), reps)
                per_expert()
                err = (grouped().float() - out.float()).abs().max().item() / out.float().abs().max().item()
                print(f"torch _grouped_mm {kind:7s}: {us:9.1f} us  {flops / us * 1e-6:6.1f} TFLOP/s  (vs per-expert: normalised diff {err:.2g})")
            except Exception as ex:  # noqa: BLE001 - report and go on
                print(f"torch _grouped_mm {kind}: failed: {ex}")
        else:
            print("torch._grouped_mm: not in this torch")


if __name__ == "__main__":
    main()
