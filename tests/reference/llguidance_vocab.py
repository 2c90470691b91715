"""The model's vocabulary for llguidance (check_llguidance_masks.py): the GGUF's tokens as the
bytes troupe's trie has them, their types, the end-of-generation tokens as llama.cpp picks
them, and an llguidance tokenizer over them."""
import gguf
import llguidance

# llama.cpp's end-of-generation texts (llama-vocab.cpp), which troupe's tokenizer follows: the
# tokens allowed exactly where the text is whole. Given to llguidance as its EOS tokens.
EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
             "_<EOT>", "<|end_of_text|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}


def gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Vocab:
    """The GGUF's tokens as bytes, their types, and an llguidance tokenizer over them."""

    def __init__(self, model):
        r = gguf.GGUFReader(model)
        assert r.fields["tokenizer.ggml.model"].contents() == "gpt2", "byte-level BPE vocabulary expected"
        f = r.fields["tokenizer.ggml.tokens"]
        texts = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        self.types = list(r.fields["tokenizer.ggml.token_type"].contents())
        eos = int(r.fields["tokenizer.ggml.eos_token_id"].contents())
        dec = gpt2_byte_decoder()
        # normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6
        self.bytes = []
        for t, ty in zip(texts, self.types):
            if ty in (1, 6):
                self.bytes.append(bytes(dec[c] for c in t))
            elif ty == 4:  # user-defined (Qwen's <tool_call>): its text, as troupe's trie has it
                self.bytes.append(t.encode("utf-8"))
            else:
                self.bytes.append(b"")
        self.n = len(texts)
        self.special = {i for i, ty in enumerate(self.types) if ty in (2, 3, 4)}
        self.unused = {i for i, ty in enumerate(self.types) if ty == 5}
        # As llama.cpp: any token with such a text, whatever its type (Qwen2.5's normal token 128247
        # "</s>" becomes a control token that ends generation).
        self.eog = sorted({eos} | {i for i, t in enumerate(texts) if t in EOG_TEXTS})
        self.eog_set = set(self.eog)
        lltokens = []
        for i, (b, ty) in enumerate(zip(self.bytes, self.types)):
            if ty in (2, 3) or i in self.eog_set:
                lltokens.append(b"\xff" + texts[i].encode("utf-8"))  # llguidance's mark of a special token
            else:
                lltokens.append(b)
        vocab = self

        class Wrapped:
            eos_token_id = eos
            bos_token_id = None
            tokens = lltokens
            special_token_ids = sorted(i for i, ty in enumerate(vocab.types) if ty == 3)

            def __call__(self, s):  # llguidance tokenizes only for prompts and forced tokens
                return vocab.greedy(s if isinstance(s, bytes) else s.encode("utf-8"))

        self._trie = None
        self.ll = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Wrapped()), n_vocab=self.n, eos_token=self.eog)
        self.single = {}
        for i, b in enumerate(self.bytes):
            if len(b) == 1 and i not in self.special:
                self.single.setdefault(b, i)
        assert len(self.single) == 256, "a byte-level vocabulary has a token for every byte"
        self.byte_token = [self.single[bytes([b])] for b in range(256)]

    def greedy(self, data):
        if self._trie is None:
            self._trie = {}
            for i, b in enumerate(self.bytes):
                if b and i not in self.special and i not in self.eog_set:
                    self._trie.setdefault(b, i)
        out, at = [], 0
        while at < len(data):
            for k in range(min(64, len(data) - at), 0, -1):
                t = self._trie.get(data[at:at + k])
                if t is not None:
                    out.append(t)
                    at += k
                    break
            else:
                raise ValueError("untokenizable byte")
        return out

    def show(self, t):
        return f"{t} {self.bytes[t]!r}" if self.bytes[t] else f"{t} <special {t}>"
