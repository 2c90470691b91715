#!/usr/bin/env python3
"""Reference token ids for the C++ tokenizer, from an independent implementation.

    python make_tokenizer_fixtures.py [VOCAB.gguf] [OUT_DIR]

Defaults: tests/fixtures/qwen2-vocab.gguf and tests/fixtures/. The vocabulary
and merges are read from the vocab-only GGUF (the same bytes the C++ test
loads) and fed to HF `tokenizers`: BPE model, a Split regex + ByteLevel
pre-tokenizer, ByteLevel decoder, control tokens added as special tokens and
user-defined ones as plain added tokens. No normalizer: troupe, like
llama.cpp, does not apply Qwen2's NFC step, so neither side normalizes.

One file per pre-tokenizer, all on the Qwen2 vocabulary (the C++ test
overrides `pre` the same way):
    qwen2-tokens.tsv            qwen2 (the file's own)
    qwen2-tokens.llama-bpe.tsv  Llama 3's pattern, BPE with ignore_merges
    qwen2-tokens.gpt-2.tsv      GPT-2's pattern

When llama-cpp-python is installed, every case is also checked against
llama.cpp's tokenizer on a copy of the file with that `pre` (a second,
independent opinion); the script stops on any disagreement.

Output, one case per line, '#' lines are comments:
    MODE <TAB> hex(utf-8 text) <TAB> ids separated by spaces
MODE is S (special tokens parsed) or T (control tokens are plain text).
"""
import random
import sys
import tempfile
from pathlib import Path

from gguf import GGUFReader, GGUFWriter
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for make_vocab_fixture

# Pre-tokenizer patterns as written in the models' tokenizer.json files, and
# whether the BPE model has ignore_merges set.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PRE_TOKENIZERS = {  # pre name: (output file, pattern, ignore_merges)
    "qwen2": ("qwen2-tokens.tsv", QWEN2_PATTERN, False),
    "llama-bpe": ("qwen2-tokens.llama-bpe.tsv", LLAMA3_PATTERN, True),
    "gpt-2": ("qwen2-tokens.gpt-2.tsv", GPT2_PATTERN, False),
}
CONTROL, USER_DEFINED = 3, 4

CORPUS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing spaces   ",
    "  two leading, two trailing  ",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four\n\n\n",
    "\n\n\n",
    "\r\nwindows\r\nlines\r\n",
    "mixed \t \n  whitespace \n\t",
    " " * 17,
    "\t" * 5 + "x",
    "12345678",
    "3.14159 and 2,718 and 1e-10 and 0x1F",
    "year 2024, version 1.2.3",
    "don't won't I'M we're they've she'll he'd IT'S",
    "'s 'S 'd ' s quote's",
    "naïve café résumé coöperate Ångström",
    "Größe, Straße, Ærøskøbing, Łódź, İstanbul",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "ภาษาไทย",
    "mixed 中文 and English 混合 text",
    "emoji 😀 😃 🎉 🚀",
    "family 👨‍👩‍👧‍👦 and flag 🇯🇵 and skin 👍🏽",
    "❤️ ✨ ☕ ©®™",
    "math ∑ ∫ √ ≤ ≥ ≠ ∞ π",
    "arrows → ← ↑ ↓ ⇒",
    "nbsp\u00a0here, ideographic\u3000space, em\u2003space",
    "line\u2028separator and para\u2029graph",
    "zero\u200bwidth\u200djoiner",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Foo:\n\tdef bar(self):\n\t\tpass\n",
    "#include <vector>\n\nint main() {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) x *= 2;\n    return 0;\n}\n",
    "template <typename T>\nconstexpr T max(T a, T b) { return a > b ? a : b; }",
    "if (a && b || !c) { x->y = z[0]; } // comment",
    "fn main() { println!(\"{}\", 42); }",
    "SELECT * FROM users WHERE id = 42;",
    "<html><body class=\"x\">Hi</body></html>",
    "https://example.com/path?query=1&b=2#frag",
    "user@example.com",
    "$HOME/.cache/troupe && echo ${PATH}",
    "a\\b\\c \"quoted\" 'single'",
    "!!!??? ... --- ___ *** ###",
    "CamelCaseIdentifier snake_case_identifier kebab-case",
    "ALLCAPS lowercase MiXeD",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "almost special <|im_sta and <| im_start |> and <im_start>",
    "<<|im_start|>>",
    "a<|im_start|>b",
    "Wikipedia is a free online encyclopedia, created and edited by volunteers around the world.",
]

# Control tokens with parse_special off: must come out as ordinary text.
TEXT_ONLY = [
    "<|im_start|>user\nHello<|im_end|>",
    "text<|endoftext|>more",
    "<tool_call>x</tool_call> <|fim_pad|>",
]

# Characters for the random cases: every class the regex distinguishes.
ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list(" \t\n\r  ")
    + list("'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`")
    + list("éüßñçøåæœ")
    + list("中文字符日本語한국어")
    + list("абвгдежзийклмн")
    + list("αβγδε")
    + list("٠١٢٣")  # Arabic-Indic digits (\p{N})
    + list("①②½²")  # other \p{N}
    + ["\u0301", "\u0308"]  # combining marks (\p{M})
    + ["😀", "🎉", "👍", "\u200d", "🏽"]
    + ["\u00a0", "\u3000", "\u2028", "\u0085"]
    + ["'s", "'T", "'re", "'LL"]
)


def random_cases(count: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60))) for _ in range(count)]


def build_tokenizer(path: str, pattern: str, ignore_merges: bool) -> Tokenizer:
    reader = GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types) if ty == USER_DEFINED])
    for t, ty in zip(tokens, types):
        if ty in (CONTROL, USER_DEFINED):
            assert tok.token_to_id(t) == vocab[t], t
    return tok


def encode(tok: Tokenizer, text: str, parse_special: bool) -> list[int]:
    tok.encode_special_tokens = not parse_special
    ids = tok.encode(text, add_special_tokens=False).ids
    decoded = tok.decode(ids, skip_special_tokens=False)
    assert decoded == text, (text, decoded)
    return ids


def copy_with_pre(vocab_path: str, pre: str, out: str) -> None:
    """The vocab-only file with tokenizer.ggml.pre replaced, for llama.cpp."""
    from make_vocab_fixture import field_value

    reader = GGUFReader(vocab_path)
    writer = GGUFWriter(out, reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            value, sub = field_value(field)
            writer.add_key_value(key, pre.encode() if key == "tokenizer.ggml.pre" else value, field.types[0], sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def cross_check_with_llama_cpp(vocab_path: str, pre: str, cases: list[tuple[str, str]],
                               expected: list[list[int]]) -> None:
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama-cpp-python not installed: skipping the llama.cpp cross-check", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "vocab.gguf")
        copy_with_pre(vocab_path, pre, path)
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        for (mode, text), ids in zip(cases, expected):
            theirs = llm.tokenize(text.encode("utf-8"), add_bos=False, special=(mode == "S"))
            assert theirs == ids, (pre, mode, text, ids, theirs)
    print(f"{pre}: llama.cpp agrees on all {len(cases)} cases", file=sys.stderr)


def main() -> int:
    vocab_path = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "tests" / "fixtures" / "qwen2-vocab.gguf")
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "tests" / "fixtures"
    cases = [("S", t) for t in CORPUS + random_cases(150)] + [("T", t) for t in TEXT_ONLY]
    for pre, (file_name, pattern, ignore_merges) in PRE_TOKENIZERS.items():
        tok = build_tokenizer(vocab_path, pattern, ignore_merges)
        expected = [encode(tok, text, mode == "S") for mode, text in cases]
        cross_check_with_llama_cpp(vocab_path, pre, cases, expected)
        lines = [
            f"# Generated by tests/reference/make_tokenizer_fixtures.py: qwen2-vocab.gguf, pre-tokenizer {pre},",
            "# HF tokenizers. MODE<TAB>hex(utf-8 text)<TAB>ids; MODE S = parse special tokens, T = control as text.",
        ]
        for (mode, text), ids in zip(cases, expected):
            lines.append(f"{mode}\t{text.encode('utf-8').hex()}\t{' '.join(map(str, ids))}")
        (out_dir / file_name).write_text("\n".join(lines) + "\n")
        print(f"{out_dir / file_name}: {len(cases)} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
