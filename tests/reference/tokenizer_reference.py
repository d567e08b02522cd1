#!/usr/bin/env python3
"""Reference encodings for troupe's tokenizers: GPT-2's byte-level BPE (tiktoken) and Mistral's
first SentencePiece model (sentencepiece), over the Shakespeare corpus and a torture text.

    scripts/fetch_text.sh                                  # the data, into data/ (or DIR)
    tests/reference/setup_reference_env.sh                 # /tmp/torchenv with tiktoken, sentencepiece
    /tmp/torchenv/bin/python tests/reference/tokenizer_reference.py data [--out tests/data/tokenizer]
                                                           [--check]

Reads DATA/tokenizers/gpt2/{vocab.bpe,encoder.json}, DATA/tokenizers/mistral-v1/tokenizer.model,
DATA/shakespeare/works.tsv and the works it lists, and OUT/torture.txt (committed). Writes to
OUT (default: tests/data/tokenizer beside this directory):

  gpt2_reference.tsv           one line per text: name, bytes, tokens, sha256 of the ids
  sentencepiece_reference.tsv  (as consecutive little-endian int32 values), tab-separated;
                               lines starting with '#' are comments (versions, settings, totals)
  torture_gpt2_ids.txt         the torture text's ids (ordinary encoding), whitespace-separated,
  torture_sentencepiece_ids.txt  after one '#' comment line

GPT-2: a tiktoken.Encoding built offline from the same two files the C++ tokenizer reads
(tiktoken.load.data_gym_to_mergeable_bpe_ranks), with tiktoken's own GPT-2 pattern
(tiktoken_ext.openai_public.r50k_pat_str) and <|endoftext|> = 50256. Each work and torture.txt
are encoded with encode_ordinary (special-token text is plain text); "torture.txt+special" is
encode(text, allowed_special="all"). Texts are read as bytes and decoded as UTF-8. The script
also checks that the pattern of the original GPT-2 release gives the same ids on every text.

SentencePiece: SentencePieceProcessor(model_file=...).encode(text) with default options (ids;
no BOS/EOS; the model's own normalizer and dummy-prefix settings).

Both: decode(encode(torture)) is compared with the torture text; what differs is reported and
written into the header. --check regenerates in memory and compares with the files in OUT
(exit 1 on a difference) instead of writing them.
"""

import argparse
import array
import hashlib
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "data", "tokenizer")

# The pattern of GPT-2's encoder.py (Python's `regex` module); tiktoken's r50k_pat_str is an
# equivalent, faster form of it.
GPT2_ORIGINAL_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def ids_sha256(ids):
    a = array.array("i", ids)
    assert a.itemsize == 4
    if sys.byteorder == "big":
        a.byteswap()
    return hashlib.sha256(a.tobytes()).hexdigest()


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    return data, data.decode("utf-8")


def load_texts(data_dir, out_dir):
    """[(name, bytes, str)]: the works in works.tsv order, then torture.txt."""
    texts = []
    with open(os.path.join(data_dir, "shakespeare", "works.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    for name, _title, size in rows:
        data, text = read_text(os.path.join(data_dir, "shakespeare", name))
        assert len(data) == int(size), f"{name}: {len(data)} bytes, works.tsv says {size}"
        texts.append((name, data, text))
    assert len(texts) == 42, f"{len(texts)} works in works.tsv, expected 42"
    data, text = read_text(os.path.join(out_dir, "torture.txt"))
    texts.append(("torture.txt", data, text))
    return texts


def row(name, data, ids):
    return f"{name}\t{len(data)}\t{len(ids)}\t{ids_sha256(ids)}"


def describe_difference(a, b):
    """Where string b first differs from a, shown as escaped context."""
    if a == b:
        return "identical"
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    line = a.count("\n", 0, i) + 1
    return (f"{len(a)} vs {len(b)} code points; first difference at code point {i} "
            f"(line {line}): {a[max(0, i - 12):i + 12]!r} became {b[max(0, i - 12):i + 12]!r}")


def gpt2(data_dir, texts, log):
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str

    vocab_bpe = os.path.join(data_dir, "tokenizers", "gpt2", "vocab.bpe")
    encoder_json = os.path.join(data_dir, "tokenizers", "gpt2", "encoder.json")
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json)
    special = {"<|endoftext|>": 50256}
    enc = tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                            special_tokens=special, explicit_n_vocab=50257)
    original = tiktoken.Encoding(name="gpt2-original-pattern", pat_str=GPT2_ORIGINAL_PAT,
                                 mergeable_ranks=ranks, special_tokens=special)

    rows, total_bytes, total_tokens, same_as_original = [], 0, 0, True
    for name, data, text in texts:
        ids = enc.encode_ordinary(text)
        if original.encode_ordinary(text) != ids:
            same_as_original = False
            log(f"gpt2: {name}: the original GPT-2 pattern gives different ids")
        rows.append(row(name, data, ids))
        if name != "torture.txt":
            total_bytes += len(data)
            total_tokens += len(ids)
    name, data, text = texts[-1]
    torture_ids = enc.encode_ordinary(text)
    special_ids = enc.encode(text, allowed_special="all")
    rows.append(row(name + "+special", data, special_ids))

    trip = describe_difference(text, enc.decode(torture_ids))
    trip_special = describe_difference(text, enc.decode(special_ids))
    log(f"gpt2: decode(encode_ordinary(torture)): {trip}")
    log(f"gpt2: decode(encode(torture, allowed_special='all')): {trip_special}")
    log(f"gpt2: corpus: 42 works, {total_bytes} bytes, {total_tokens} tokens")

    header = [
        "# GPT-2 byte-level BPE reference encodings (tests/reference/tokenizer_reference.py)",
        f"# tiktoken {tiktoken.__version__}, python {platform.python_version()}; "
        f"Encoding from tokenizers/gpt2/vocab.bpe (sha256 {file_sha256(vocab_bpe)}) and "
        f"encoder.json (sha256 {file_sha256(encoder_json)}): {enc.n_vocab} ids, "
        f"<|endoftext|> = 50256",
        f"# pat_str (tiktoken_ext.openai_public.r50k_pat_str): {r50k_pat_str}",
        f"# original GPT-2 pattern {GPT2_ORIGINAL_PAT} gives the same ids on every text: "
        f"{'yes' if same_as_original else 'NO'}",
        "# texts read as bytes, decoded UTF-8; encode_ordinary (special-token text is plain text); "
        "torture.txt+special: encode(text, allowed_special=\"all\")",
        f"# decode(encode_ordinary(torture.txt)) == torture.txt: {trip}; "
        f"with special: {trip_special}",
        f"# corpus total: 42 works, {total_bytes} bytes, {total_tokens} tokens",
        "# name\tnum_bytes\tnum_tokens\tsha256 of the ids as little-endian int32",
    ]
    ids_header = (f"# GPT-2 ids of torture.txt, encode_ordinary, tiktoken {tiktoken.__version__}: "
                  f"{len(torture_ids)} ids")
    return header + rows, ids_header, torture_ids


def proto_fields(buf):
    """{field number: [values]} of one protobuf message (varints as ints, the rest as bytes)."""
    fields, i = {}, 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 2:
            n = varint()
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def model_settings(path):
    """The settings of a SentencePiece model that decide its encoding, read from the ModelProto
    (sentencepiece_model.proto: trainer_spec = 2, normalizer_spec = 3) without protobuf."""
    with open(path, "rb") as f:
        model = proto_fields(f.read())
    trainer = proto_fields(model.get(2, [b""])[0])
    normalizer = proto_fields(model.get(3, [b""])[0])

    def flag(fields, number, default):
        return bool(fields.get(number, [default])[-1])

    model_type = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}.get(trainer.get(3, [1])[-1], "?")
    name = normalizer.get(1, [b""])[-1].decode()
    return (f"; model type {model_type}, normalizer {name!r}, "
            f"add_dummy_prefix {flag(normalizer, 3, True)}, "
            f"remove_extra_whitespaces {flag(normalizer, 4, True)}, "
            f"escape_whitespaces {flag(normalizer, 5, True)}, "
            f"byte_fallback {flag(trainer, 35, False)}")


def sentencepiece(data_dir, texts, log):
    import sentencepiece as spm

    model = os.path.join(data_dir, "tokenizers", "mistral-v1", "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=model)
    settings = model_settings(model)

    rows, total_bytes, total_tokens = [], 0, 0
    torture_ids = None
    for name, data, text in texts:
        ids = sp.encode(text)
        rows.append(row(name, data, ids))
        if name == "torture.txt":
            torture_ids = ids
        else:
            total_bytes += len(data)
            total_tokens += len(ids)
    text = texts[-1][2]
    decoded = sp.decode(torture_ids)
    trip = describe_difference(text, decoded)
    if decoded != text and decoded == text.replace("\u2581", " "):
        # U+2581 is the model's whitespace symbol: a literal one in the text decodes as a space
        trip = (f"no, but only because each of its {text.count(chr(0x2581))} U+2581 "
                f"(the meta symbol) decodes as a space; {trip}")
    unk = sum(1 for i in torture_ids if i == sp.unk_id())
    log(f"sentencepiece: decode(encode(torture)): {trip}")
    log(f"sentencepiece: corpus: 42 works, {total_bytes} bytes, {total_tokens} tokens")

    header = [
        "# SentencePiece reference encodings (tests/reference/tokenizer_reference.py)",
        f"# sentencepiece {spm.__version__}, python {platform.python_version()}; "
        f"tokenizers/mistral-v1/tokenizer.model (sha256 {file_sha256(model)})",
        f"# vocab_size {sp.vocab_size()}, bos_id {sp.bos_id()}, eos_id {sp.eos_id()}, "
        f"unk_id {sp.unk_id()}, pad_id {sp.pad_id()}{settings}",
        "# texts read as bytes, decoded UTF-8; encode(text) with default options "
        "(ids, no BOS/EOS)",
        f"# decode(encode(torture.txt)) == torture.txt: {trip}; <unk> ids in it: {unk}",
        f"# corpus total: 42 works, {total_bytes} bytes, {total_tokens} tokens",
        "# name\tnum_bytes\tnum_tokens\tsha256 of the ids as little-endian int32",
    ]
    ids_header = (f"# SentencePiece ids of torture.txt, encode(text), sentencepiece "
                  f"{spm.__version__}: {len(torture_ids)} ids")
    return header + rows, ids_header, torture_ids


def ids_file(header, ids, per_line=16):
    lines = [header]
    for i in range(0, len(ids), per_line):
        lines.append(" ".join(str(x) for x in ids[i:i + per_line]))
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="the directory scripts/fetch_text.sh filled")
    p.add_argument("--out", default=DEFAULT_OUT, help="default: %(default)s")
    p.add_argument("--check", action="store_true",
                   help="compare with the files in OUT instead of writing them")
    args = p.parse_args()

    def log(msg):
        print(f"tokenizer_reference: {msg}", file=sys.stderr, flush=True)

    texts = load_texts(args.data, args.out)
    gpt2_rows, gpt2_ids_header, gpt2_ids = gpt2(args.data, texts, log)
    sp_rows, sp_ids_header, sp_ids = sentencepiece(args.data, texts, log)
    outputs = {
        "gpt2_reference.tsv": gpt2_rows,
        "sentencepiece_reference.tsv": sp_rows,
        "torture_gpt2_ids.txt": ids_file(gpt2_ids_header, gpt2_ids),
        "torture_sentencepiece_ids.txt": ids_file(sp_ids_header, sp_ids),
    }
    differ = 0
    for name, lines in outputs.items():
        path = os.path.join(args.out, name)
        content = "\n".join(lines) + "\n"
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    old = f.read()
            except FileNotFoundError:
                old = None
            if old != content:
                differ += 1
                log(f"{path}: differs from the regenerated content")
        else:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(content)
            log(f"wrote {path}")
    if args.check:
        log(f"{differ} of {len(outputs)} files differ" if differ else "all files match")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
