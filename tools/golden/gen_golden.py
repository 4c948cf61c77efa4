#!/usr/bin/env python3
"""Golden logits for pdserve's tiny models from references nobody here wrote.

  tiny-kimi-linear: transformers' native KimiLinearForCausalLM (installed package).
  tiny-k3:          the public Kimi-K3 modeling code (modeling_kimi_linear.py from the
                    model repository; pass its folder with --ref-path), run with fla.

Both run in float32 (TF32 off). The script only reads the checkpoint that
`pdserve make-model` wrote; MXFP4 experts are dequantised to float32 here, exactly
(E2M1 * 2^(scale-127) is representable), so the reference sees the same weights.

Output: a JSON fixture with, per prompt, the logits of every position at a fixed set
of sampled vocabulary columns, the full logits of the last position, and a greedy
continuation computed with the reference's own cache (its decode path).
"""
import argparse
import json
import os
import random
import sys
import tempfile

# Full fp32 everywhere: Triton (fla) would otherwise feed fp32 dots to TF32 tensor cores,
# which rounds inputs to 10 mantissa bits and shows up as 5e-4 relative error.
os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")

import torch
from safetensors.torch import load_file

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def load_checkpoint(model_dir):
    idx = json.load(open(os.path.join(model_dir, "model.safetensors.index.json")))
    sd = {}
    for f in sorted(set(idx["weight_map"].values())):
        sd.update(load_file(os.path.join(model_dir, f)))
    return sd


def dequant_mxfp4(packed, scale):
    lo, hi = packed & 0xF, packed >> 4
    vals = torch.stack([E2M1[lo.long()], E2M1[hi.long()]], dim=-1).reshape(packed.shape[0], -1)
    s = torch.pow(2.0, scale.float() - 127.0)
    return (vals.reshape(vals.shape[0], -1, 32) * s.unsqueeze(-1)).reshape(vals.shape[0], -1)


def prompts_for(vocab_ranks, seed=7):
    rnd = random.Random(seed)
    lens = [70, 9, 1]  # crosses a 64-token KDA chunk; short; a single token
    return [[rnd.randrange(vocab_ranks) for _ in range(n)] for n in lens]


def sampled_columns(vocab, n=128):
    step = max(1, vocab // n)
    return list(range(0, vocab, step))[:n]


@torch.no_grad()
def run_reference(model, prompts, vocab, device, steps=8):
    cols = sampled_columns(vocab)
    out = []
    for ids in prompts:
        x = torch.tensor([ids], device=device)
        full = model(input_ids=x, use_cache=False).logits[0].float().cpu()
        # Greedy continuation through the reference's own cache (prefill then decode);
        # if the reference's cache cannot run on this transformers, recompute each step.
        gen, margins = [], []
        try:
            res = model(input_ids=x, use_cache=True)
            cache = res.past_key_values
            step = lambda tok: model(input_ids=torch.tensor([[tok]], device=device), past_key_values=cache, use_cache=True)
            decode_path = "cache"
        except Exception as e:  # noqa: BLE001
            print("reference cache unusable, recomputing:", e)
            res = model(input_ids=x, use_cache=False)
            cache = None
            decode_path = "recompute"
        nxt = int(res.logits[0, -1].argmax())
        seq = list(ids)
        for _ in range(steps):
            gen.append(nxt)
            seq.append(nxt)
            if cache is not None:
                res = step(nxt)
                cache = res.past_key_values
            else:
                res = model(input_ids=torch.tensor([seq], device=device), use_cache=False)
            row = res.logits[0, -1].float()
            top2 = torch.topk(row, 2).values
            margins.append(float(top2[0] - top2[1]))
            nxt = int(row.argmax())
        out.append({
            "prompt": ids,
            "columns": cols,
            "logits_sampled": [[round(v, 6) for v in r] for r in full[:, cols].tolist()],
            "last_logits": [round(v, 6) for v in full[-1].tolist()],
            "greedy": gen,
            "greedy_margins": margins,
            "decode_path": decode_path,
        })
    return out


def build_kimi_linear(model_dir, device):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, config=cfg, torch_dtype=torch.float32)
    return model.to(device).eval(), cfg.vocab_size, "transformers KimiLinearForCausalLM"


SHIM = '''
from transformers.configuration_utils import PretrainedConfig

class KimiLinearConfig(PretrainedConfig):
    model_type = "kimi_linear"
    def __init__(self, **kw):
        lac = kw.pop("linear_attn_config", None)
        super().__init__(**{k: kw.pop(k) for k in ("pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings") if k in kw})
        for k, v in kw.items():
            setattr(self, k, v)
        self.linear_attn_config = lac
        for k, d in (("num_shared_experts", None), ("first_k_dense_replace", 0), ("moe_layer_freq", 1),
                     ("num_expert_group", 1), ("topk_group", 1), ("moe_renormalize", True),
                     ("routed_scaling_factor", 1.0), ("moe_router_activation_func", "sigmoid"),
                     ("initializer_range", 0.02), ("use_cache", True), ("num_key_value_heads", None)):
            if not hasattr(self, k) or getattr(self, k) is None and d is not None:
                setattr(self, k, d)
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
    @property
    def is_mla(self):
        return True
    @property
    def is_moe(self):
        return self.num_experts is not None
    def is_kda_layer(self, i):
        return self.linear_attn_config is not None and (i + 1) in self.linear_attn_config["kda_layers"]

class KimiK3Config(PretrainedConfig):
    model_type = "kimi_k3"
'''


def build_k3(model_dir, ref_path, device):
    pkg = os.path.join(tempfile.mkdtemp(), "k3ref")
    os.makedirs(pkg)
    with open(os.path.join(ref_path, "modeling_kimi_linear.py")) as f:
        src = f.read()
    open(os.path.join(pkg, "modeling_kimi_linear.py"), "w").write(src)
    open(os.path.join(pkg, "configuration_kimi_k3.py"), "w").write(SHIM)
    open(os.path.join(pkg, "__init__.py"), "w").write("")
    sys.path.insert(0, os.path.dirname(pkg))
    from k3ref.configuration_kimi_k3 import KimiLinearConfig
    from k3ref.modeling_kimi_linear import KimiDynamicCache, KimiLinearForCausalLM

    # transformers >= 5.x asks caches for the query offset; the reference cache predates it.
    if not hasattr(KimiDynamicCache, "get_query_offset"):
        KimiDynamicCache.get_query_offset = lambda self, layer_idx=0: self.get_seq_length(layer_idx)

    top = json.load(open(os.path.join(model_dir, "config.json")))
    tc = dict(top["text_config"])
    tc.pop("quantization_config", None)
    cfg = KimiLinearConfig(**tc)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = KimiLinearForCausalLM(cfg).float()
    sd = load_checkpoint(model_dir)
    heads = tc["linear_attn_config"]["num_heads"]
    clean = {}
    for name, t in sd.items():
        if not name.startswith("language_model."):
            continue  # vision tower and projector
        n = name[len("language_model."):]
        if n.endswith(".weight_scale"):
            continue
        if n.endswith(".weight_packed"):
            base = n[: -len(".weight_packed")]
            clean[base + ".weight"] = dequant_mxfp4(t, sd[name.replace("weight_packed", "weight_scale")])
            continue
        if n.endswith(".A_log"):
            t = t.reshape(-1)[:heads]
        clean[n] = t.float()
    missing, unexpected = model.load_state_dict(clean, strict=False)
    missing = [m for m in missing if not m.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing={missing} unexpected={unexpected}")
    return model.to(device).eval(), tc["vocab_size"], "Kimi-K3 reference modeling_kimi_linear.py + fla"


@torch.no_grad()
def write_trace(model, ids, device, path):
    """Every module's output (first tensor of a tuple) for one short prompt."""
    outs, hooks = {}, []
    for name, mod in model.named_modules():
        def hook(m, inp, out, name=name):
            t = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                outs[name] = [round(v, 7) for v in t.float().reshape(-1).tolist()]
        hooks.append(mod.register_forward_hook(hook))
    model(input_ids=torch.tensor([ids], device=device), use_cache=False)
    for h in hooks:
        h.remove()
    dtypes = {n: str(p.dtype) for n, p in model.named_parameters()}
    json.dump({"prompt": ids, "outputs": outs, "param_dtypes": dtypes}, open(path, "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--kind", choices=["kimi_linear", "k3"], required=True)
    ap.add_argument("--ref-path", help="folder holding the K3 reference modeling_kimi_linear.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", help="also write every module's output for a short prompt here (debugging)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch.backends, "fp32_precision"):
        torch.backends.fp32_precision = "ieee"
    torch.set_float32_matmul_precision("highest")
    if a.kind == "kimi_linear":
        model, vocab, ref = build_kimi_linear(a.model_dir, a.device)
    else:
        model, vocab, ref = build_k3(a.model_dir, a.ref_path, a.device)
    cfg = json.load(open(os.path.join(a.model_dir, "config.json")))
    ranks = vocab - 256
    data = {
        "reference": ref,
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "preset": cfg.get("pdserve_preset"),
        "seed": cfg.get("pdserve_seed"),
        "dtype": "float32",
        "device": a.device,
        "cases": run_reference(model, prompts_for(ranks), vocab, a.device),
    }
    try:
        import fla
        data["versions"]["fla"] = fla.__version__
    except Exception:
        pass
    with open(a.out, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    if a.trace:
        write_trace(model, prompts_for(ranks)[1][:3], a.device, a.trace)
    print("wrote", a.out, "reference:", ref)


if __name__ == "__main__":
    main()
