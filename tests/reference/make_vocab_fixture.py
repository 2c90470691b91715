#!/usr/bin/env python3
"""Write a vocab-only GGUF: the tokenizer metadata of a real model, no tensors.

    python make_vocab_fixture.py [MODEL.gguf] [OUT.gguf]

Defaults: the default model from ops/models.sh and tests/fixtures/qwen2-vocab.gguf.
Every `tokenizer.*` key is copied with its exact GGUF type, plus the
architecture and name for provenance, so the C++ tests read the same bytes a
full model would give them without needing the 400 MB file.

Needs the `gguf` package (ops/python-env.sh --no-llama makes a venv with it).
"""
import os
import subprocess
import sys
from pathlib import Path

from gguf import GGUFReader, GGUFValueType, GGUFWriter

REPO = Path(__file__).resolve().parents[2]
KEPT_GENERAL_KEYS = ("general.name", "general.basename", "general.size_label")


def default_model() -> str:
    out = subprocess.run([str(REPO / "ops" / "models.sh"), "--path"], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0]


def field_value(field):
    """The field's value in the form GGUFWriter.add_key_value expects."""
    main = field.types[0]
    if main == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == GGUFValueType.STRING:
            # Raw bytes, not str: a token need not be valid UTF-8.
            return [bytes(field.parts[i]) for i in field.data], sub
        return [x.item() for i in field.data for x in field.parts[i]], sub
    if main == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]), None
    return field.parts[field.data[0]][0].item(), None


def main() -> int:
    model = sys.argv[1] if len(sys.argv) > 1 else default_model()
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "tests" / "fixtures" / "qwen2-vocab.gguf"
    reader = GGUFReader(model)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(out) + ".tmp", arch)
    copied = 0
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.") or key in KEPT_GENERAL_KEYS:
            value, sub = field_value(field)
            writer.add_key_value(key, value, field.types[0], sub_type=sub)
            copied += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(str(out) + ".tmp", out)
    print(f"{out}: {copied} keys from {model}, {out.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
