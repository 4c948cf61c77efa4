"""A tiktoken Encoding set up the way Kimi's tokenization_kimi.py sets it up, for comparisons.

Builds tiktoken.Encoding from a model directory's tiktoken.model and tokenizer_config.json
with Kimi's pre-tokenisation pattern, and encodes with the same 400,000-character chunks and
25,000-character whitespace / non-whitespace run cuts as Kimi's encoder.
"""
import json
import os

# Kimi's pat_str (tokenization_kimi.py), in the fancy-regex syntax tiktoken accepts.
KIMI_PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

MAX_ENCODE_CHARS = 400_000
MAX_RUN_CHARS = 25_000
NUM_RESERVED = 256


def load_encoding(model_dir):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(os.path.join(model_dir, "tiktoken.model"))
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    names = {int(k): v["content"] for k, v in cfg.get("added_tokens_decoder", {}).items()}
    base = len(ranks)
    specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(base, base + NUM_RESERVED)}
    return tiktoken.Encoding(name=os.path.basename(model_dir.rstrip("/")) or "kimi",
                             pat_str=KIMI_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def _split_runs(s, limit):
    """Cut s so no piece has more than `limit` consecutive (non-)whitespace characters."""
    run, is_space, start = 0, (s[0].isspace() if s else False), 0
    for i, ch in enumerate(s):
        now = ch.isspace()
        if now != is_space:
            run, is_space = 1, now
        else:
            run += 1
            if run > limit:
                yield s[start:i]
                start, run = i, 1
    yield s[start:]


def kimi_encode(enc, text, allow_special=False):
    ids = []
    for i in range(0, len(text), MAX_ENCODE_CHARS):
        for piece in _split_runs(text[i:i + MAX_ENCODE_CHARS], MAX_RUN_CHARS):
            if allow_special:
                ids.extend(enc.encode(piece, allowed_special="all"))
            else:
                ids.extend(enc.encode(piece, disallowed_special=()))
    return ids
