"""troupe's tokenizer against llama.cpp's on a real vocabulary, over a corpus.

usage: check_tokenizer_oracle.py TROUPE_BINARY MODEL_GGUF

llama.cpp (llama-cpp-python, the GGUF file's vocabulary alone) is the oracle.
The corpus (corpus() below, several hundred strings, fixed seed) covers ASCII
prose and punctuation, numbers, non-Latin scripts, emoji (with ZWJ sequences,
flags and skin tones), runs of spaces, newlines and tabs, code, characters
that only the byte fallback can encode (private use, rare CJK, controls), and
the vocabulary's special tokens inside text. Every string is tokenized with
special-token parsing on and off, without BOS, by both, and:
  - the ids must be identical, every case;
  - troupe's decoding of them must equal llama.cpp's (special tokens as text),
    and the original string whenever llama.cpp's decoding gives it back.
troupe runs once for all strings (`troupe tokenize --json-lines`).
"""
import json
import random
import subprocess
import sys

from llama_cpp import Llama

ASCII = [
    "Hello world", "Hello, world!", "hello world.", "HELLO WORLD", "The quick brown fox jumps over the lazy dog.",
    "It's a dog's life, isn't it?", "don't won't can't shan't y'all", "Mr. Smith went to Washington D.C. in 1999.",
    "e.g. i.e. etc. vs. a.m. p.m.", "(parentheses) [brackets] {braces} <angles>", "\"double\" and 'single' quotes",
    "semi;colon: colon, comma... ellipsis", "a-b_c.d/e\\f|g", "~`!@#$%^&*()-_=+[]{}|;:'\",.<>/?",
    "https://example.com/path?query=1&x=y#frag", "user.name+tag@example.co.uk", "C:\\Program Files\\troupe\\bin",
    "/usr/local/bin/troupe --help", "3.14159 2.71828 1e-10 6.022e23", "1234567890", "0 00 000 0000 00000",
    "12,345,678.90", "$1,000,000 and 50% off", "2026-12-04T05:30:00Z", "v1.2.3-rc.4+build.5", "#hashtag @mention",
    "ALL CAPS SENTENCE WITH NUMBERS 123", "CamelCaseIdentifier snake_case_identifier kebab-case-identifier",
    "a", "I", " ", "  ", ".", "...", "!!!", "??", "a b c d e f g", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abcabcabcabcabcabc", "supercalifragilisticexpialidocious", "antidisestablishmentarianism",
    "Pneumonoultramicroscopicsilicovolcanoconiosis", "the the the the", "Summarize this paper:",
    "Question: what is 2 + 2? Answer: 4.", "TL;DR: it works.", "I ♥ NY", "naïve café résumé coöperate",
]
SCRIPTS = [
    "你好，世界！", "我们在北京学习中文。", "机器学习是人工智能的一个分支。", "今日は良い天気ですね。", "カタカナとひらがなと漢字",
    "東京都渋谷区", "안녕하세요, 세계!", "한국어 텍스트 처리", "Привет, мир!", "Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε", "αβγδεζηθικλμνξοπρστυφχψω", "مرحبا بالعالم", "اللغة العربية جميلة", "שלום עולם",
    "नमस्ते दुनिया", "हिन्दी भाषा", "สวัสดีชาวโลก", "ภาษาไทย", "Xin chào thế giới", "Tiếng Việt có dấu",
    "Ελληνικά και русский и English", "ქართული ენა", "Հայերեն", "বাংলা ভাষা", "தமிழ் மொழி", "తెలుగు", "ಕನ್ನಡ",
    "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ", "සිංහල", "ພາສາລາວ", "ខ្មែរ", "မြန်မာ", "አማርኛ", "ᏣᎳᎩ", "ᠮᠣᠩᠭᠣᠯ",
    "Zürich Straße Äpfel Öl Übel", "Ærøskøbing Ålborg", "Łódź Kraków Gdańsk", "Český Krumlov", "İstanbul ığdır",
    "e\u0301 (e + combining acute)", "A\u030a\u0323", "ﬁ ﬂ ﬀ (ligatures)", "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ", "①②③ ⅠⅡⅢ",
    "∀x∈ℝ: x² ≥ 0", "∑_{i=1}^{n} i = n(n+1)/2", "→ ← ↑ ↓ ⇒ ⇔", "° ± × ÷ ≈ ≠ ≤ ≥", "€ £ ¥ ₹ ₩ ₿",
]
EMOJI = [
    "😀", "😀😃😄😁", "Hello 👋 world 🌍", "👍🏻 👍🏼 👍🏽 👍🏾 👍🏿", "👨‍👩‍👧‍👦", "👩‍💻 🧑‍🚀", "🏳️‍🌈 🏴‍☠️",
    "🇺🇸 🇯🇵 🇩🇪 🇧🇷", "❤️ ♥ 💔", "🔥🔥🔥", "🤖 + 🧠 = 🚀", "☕️ and 🍕", "⌚ ⏰ ⏳", "🫠 🫡 🫶", "emoji at end 🎉",
]
WHITESPACE = [
    "two  spaces", "three   spaces", "    four leading", "trailing four    ", " a ", "\t", "\t\t", "a\tb\tc",
    "\n", "\n\n", "\n\n\n\n", "line1\nline2", "line1\n\nline2", "line1\r\nline2", "\r\n\r\n", " \n ", "\n \n \n",
    "mixed \t \n spaces", "end with newline\n", "\n\nstarts with newlines", "a" + " " * 17 + "b", " " * 31,
    "\t" * 9, "\n" * 13, "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "em\u2003space", "ideographic\u3000space",
]
CODE = [
    "def f(x):\n    return x * 2\n", "for i in range(10):\n\tprint(i)", "if __name__ == \"__main__\":\n    main()",
    "#include <vector>\nint main() { return 0; }", "std::vector<int32_t> v{1, 2, 3};",
    "template <typename T>\nT max(T a, T b) { return a > b ? a : b; }", "fn main() { println!(\"hi\"); }",
    "const x = (a, b) => a ?? b;", "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}", "<div class=\"x\"><p>Hi &amp; bye</p></div>",
    "#!/usr/bin/env bash\nset -euo pipefail\necho \"$HOME\" | grep -q root", "x = [i**2 for i in range(100) if i % 3]",
    "    def method(self) -> None:\n        pass", "a += 1; b -= 2; c *= 3; d /= 4; e %= 5;", "0xDEADBEEF 0b1010 0o755",
    "// comment\n/* block */\n# hash", "print(f\"{value!r:>10}\")", "λx. x + 1", "git commit -m \"fix: a bug\"",
]
FALLBACK = [
    "\ue000\ue001\uf8ff", "private \ue123 use", "\U00020000\U0002a6d6", "rare 𠀀 CJK", "\x01\x02\x03", "bell\x07",
    "del\x7f", "esc\x1b[31mred\x1b[0m", "\U0001f9ff\U0001fa70", "\U000e0041 tag", "\ufffd replacement",
    "\u2028line separator", "\u0000 nul", "ᚠᛇᚻ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "𓀀𓀁 hieroglyphs", "\U0001d11e music",
]


def special_pieces(llm):
    """Tokens written <...> that parse to one id as special text: control
    tokens first (llama.cpp prints them only when asked), by id."""
    control, other = [], []
    for t in range(llm.n_vocab()):
        piece = llm.detokenize([t], special=True).decode("utf-8", errors="replace")
        if piece.startswith("<") and piece.endswith(">") and len(piece) > 2 and \
                llm.tokenize(piece.encode(), add_bos=False, special=True) == [t]:
            (control if llm.detokenize([t], special=False) == b"" else other).append(piece)
    return control + other


def corpus(specials):
    fixed = ASCII + SCRIPTS + EMOJI + WHITESPACE + CODE + FALLBACK
    fixed += [f"{s}user\nHello{e}" for s, e in zip(specials[:1] * 1, specials[1:2])]
    for s in specials[:12]:
        fixed += [s, f"text {s} text", f"{s}{s}", f"\n{s}\n"]
    rng = random.Random(20261204)
    pools = [ASCII, SCRIPTS, EMOJI, WHITESPACE, CODE, FALLBACK, specials or ["<x>"]]
    mixed = []
    while len(mixed) < 300:
        parts = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(2, 5))]
        seps = [rng.choice(["", " ", "  ", "\n", "\t", ", "]) for _ in parts]
        mixed.append("".join(p + s for p, s in zip(parts, seps)))
    return fixed + mixed


def main():
    troupe, model = sys.argv[1], sys.argv[2]
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    specials = special_pieces(llm)
    texts = corpus(specials)
    failures = cases = exact = 0
    for special in (True, False):
        args = [troupe, "tokenize", "--model", model, "--json-lines"] + (["--special"] if special else [])
        stdin = "".join(json.dumps(t) + "\n" for t in texts)
        out = subprocess.run(args, input=stdin.encode(), capture_output=True, check=True).stdout.decode().split("\n")[:-1]
        if len(out) != len(texts):
            print(f"troupe answered {len(out)} lines for {len(texts)} strings")
            return 1
        for text, line in zip(texts, out):
            cases += 1
            ours = json.loads(line)
            ids = llm.tokenize(text.encode(), add_bos=False, special=special)
            if ours["ids"] != ids:
                failures += 1
                print(f"IDS special={special} {text!r}:\n  llama.cpp {ids}\n  troupe    {ours['ids']}")
                continue
            # Decoding gives the string back, or what llama.cpp gives (its
            # decoder drops some spaces on some vocabularies: Qwen2's long
            # runs of spaces come back as one; troupe's stay exact).
            theirs = llm.detokenize(ids, special=True).decode("utf-8", errors="replace")
            if ours["text"] != text and ours["text"] != theirs:
                failures += 1
                print(f"DECODE special={special} {text!r}: llama.cpp {theirs!r}, troupe {ours['text']!r}")
            elif theirs == text and ours["text"] != text:
                failures += 1
                print(f"ROUND TRIP special={special} {text!r}: troupe {ours['text']!r}")
            exact += ours["text"] == text
    print(f"{len(specials)} special tokens, {min(len(specials), 12)} of them in the text, e.g. {specials[:4]}")
    print(f"{len(texts)} strings x 2 (special tokens parsed or not): {cases - failures} of {cases} identical; "
          f"troupe decodes {exact} of {cases} back to the string exactly")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
