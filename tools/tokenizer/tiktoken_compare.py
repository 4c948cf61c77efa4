#!/usr/bin/env python3
"""Expected ids from Python tiktoken for pdserve's tokenizer comparison test.

    tiktoken_compare.py --model DIR --out FILE [--count N] [--seed S]

Generates a deterministic corpus (ASCII, CJK, emoji, combining marks, long whitespace runs,
digits, source code, random Unicode, invalid UTF-8, special-token text, vocabulary soup),
encodes it with tiktoken set up as Kimi's tokenizer (kimi_reference.py) and writes one JSON
line per string: {"cat", "b64" (the input bytes), "special" (allow_special), "ids"}.
Invalid UTF-8 input is decoded with errors="replace" first, which is what pdserve does to it.
Exit code 77 means tiktoken is not importable (the C++ test then skips).
"""
import argparse
import base64
import json
import random
import sys
import unicodedata

sys.path.insert(0, __import__("os").path.dirname(__file__))
from kimi_reference import kimi_encode, load_encoding  # noqa: E402

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which "
         "one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first "
         "token model server prefill decode stream cache").split()
CODE = [
    "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT id, name FROM users WHERE created_at >= '2026-01-01' ORDER BY id DESC LIMIT 10;",
    "#include <stdio.h>\nint main(void){printf(\"%s\\n\",\"hi\");return 0;}",
    "const f = async (x) => { await sleep(10); return x?.y ?? 0; };",
    "<div class=\"a\">&nbsp;<span>x &lt; y</span></div>",
    "    if x:\n\t\tpass\r\n",
    "$ git log --oneline | head -n 5 && echo \"done\" >> /tmp/out.txt",
    "{\"key\": [1, 2.5e-3, true, null], \"nested\": {\"a\": \"b\"}}",
]
HAN = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可那你对生能过年"
KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのアイウエオカキクケコ한국어텍스트입니다"
EMOJI = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🇺🇸", "🏳️‍🌈", "❤️", "✨", "🚀", "🙏🏿", "🧑‍💻", "#️⃣", "©️", "☺"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0323", "\u0327", "\u030c", "\u0351", "\u0360", "\u20dd", "\u093f",
             "\u0e31", "\u064e", "\u05b7", "\u302a", "\U00016ff0"]
SPACES = [" ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u0085", "\u2028", "\u2029", "\u3000", "\u2003", "\u180e",
          "\u200b", "\x0b", "\x0c", "\x1c", "\u202f", "\u205f", "\u1680"]
DIGITS = "0123456789٠١٢٣٤٥٦٧٨٩０１２３४५६²³½ⅫⅣ①"
CONTRACT = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'d", "'D",
            "\u017fs", "'\u017f", "'\u212a"]
SPECIALS = ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[BOS]", "[EOS]", "<|media_pad|>", "[PAD]",
            "<|open|", "<|sep>", "<<|open|>>"]


def assigned_chars(lo, hi):
    """Characters assigned in this Python's Unicode database (14.0 for 3.11), skipping surrogates."""
    return [chr(c) for c in range(lo, hi) if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != "Cn"]


def corpus(rng, count, vocab_pieces):
    bmp = assigned_chars(0x20, 0x10000)
    astral = assigned_chars(0x10000, 0x30000)
    out = []

    def add(cat, s, special=False):
        out.append((cat, s if isinstance(s, bytes) else s.encode("utf-8", "surrogatepass"), special))

    gens = {
        "ascii": lambda: " ".join(rng.choice(WORDS).capitalize() if rng.random() < .2 else rng.choice(WORDS)
                                  for _ in range(rng.randint(1, 30))) + rng.choice([".", "!", "?", ",", ""]),
        "contractions": lambda: "".join(rng.choice(WORDS) + rng.choice(CONTRACT) + rng.choice([" ", "", "\n"])
                                        for _ in range(rng.randint(1, 8))),
        "cjk": lambda: "".join(rng.choice([HAN, KANA, "，。！？、「」（）", " ", "abc", "123"])[
            : rng.randint(1, 20)] if rng.random() < .3 else "".join(rng.choice(HAN + KANA) for _ in range(rng.randint(1, 40)))
            for _ in range(rng.randint(1, 4))),
        "emoji": lambda: "".join(rng.choice(EMOJI + [" ", "a", "中", "!"]) for _ in range(rng.randint(1, 20))),
        "combining": lambda: "".join(rng.choice("aeouAEOUnzक가ก") + "".join(rng.choice(COMBINING)
                                     for _ in range(rng.randint(0, 4))) + rng.choice(["", " "])
                                     for _ in range(rng.randint(1, 15))),
        "whitespace": lambda: "".join(rng.choice(SPACES) * rng.randint(1, 60) + rng.choice(["", "x", "中", "!", "9"])
                                      for _ in range(rng.randint(1, 8))),
        "digits": lambda: "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 40))) + rng.choice(["", " ", "px", ".5"]),
        "code": lambda: rng.choice(CODE) * rng.randint(1, 3),
        "unicode_bmp": lambda: "".join(rng.choice(bmp) for _ in range(rng.randint(1, 30))),
        "unicode_astral": lambda: "".join(rng.choice(astral if rng.random() < .5 else bmp) for _ in range(rng.randint(1, 20))),
        "vocab_soup": lambda: b"".join(rng.choice(vocab_pieces) for _ in range(rng.randint(1, 30))),
    }
    names = sorted(gens)
    while len(out) < count:
        name = names[len(out) % len(names)]
        add(name, gens[name]())
    # Invalid UTF-8: random bytes, truncated and overlong sequences, encoded surrogates.
    bad_bits = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe4\xb8",
                b"\xf0\x9f\x98", b"\x80", b"\xbf\xbf", b"\xc3", b"\xf8\x88\x80\x80\x80"]
    for _ in range(600):
        parts = [rng.choice([b"abc ", "中文".encode(), b" ", rng.choice(bad_bits), bytes(rng.randrange(256)
                 for _ in range(rng.randint(1, 6)))]) for _ in range(rng.randint(1, 8))]
        add("invalid_utf8", b"".join(parts))
    # Special-token text, as plain text and with specials allowed.
    for i in range(600):
        s = "".join(rng.choice(SPECIALS + WORDS + [" ", "\n", "中"]) for _ in range(rng.randint(1, 12)))
        add("specials", s, special=bool(i % 2))
    # Long runs that cross Kimi's 25,000-character cut.
    for s in [" " * 30000, "\n" * 25001 + "x", "a" * 60000, "中" * 26000, "9" * 25003, "ab " * 20000,
              "x" + " " * 25000 + "y", "\u3000" * 25010 + "z"]:
        add("long_runs", s)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=11000)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    try:
        import tiktoken  # noqa: F401
    except ImportError as e:
        print(f"tiktoken not importable: {e}", file=sys.stderr)
        return 77
    enc = load_encoding(a.model)
    vocab_pieces = [enc.decode_single_token_bytes(i) for i in range(enc.max_token_value + 1 - 256)]
    rng = random.Random(a.seed)
    n = 0
    with open(a.out, "w", encoding="utf-8") as f:
        for cat, data, special in corpus(rng, a.count, vocab_pieces):
            text = data.decode("utf-8", errors="replace")
            ids = kimi_encode(enc, text, special)
            f.write(json.dumps({"cat": cat, "b64": base64.b64encode(data).decode(), "special": special, "ids": ids}) + "\n")
            n += 1
    print(f"wrote {n} cases to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
