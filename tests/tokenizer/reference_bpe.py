#!/usr/bin/env python3
"""The tokenizer's reference, written apart from the C++ one (common/tokenizer.cpp):
GPT-2's pre-tokenizer as the published pattern run by Python's `regex` module (the
engine GPT-2's own encoder used), and byte-level BPE by ranks written as the plain
quadratic loop. Run with /usr/bin/python3 (Debian's python3-regex); the vocabularies of
bytes alone (identity, identity_eot, reversed) need only the standard library.

  reference_bpe.py text SEED N OUT          write N characters drawn from a pool of
                                            scripts, classes and white space
  reference_bpe.py vocab KIND SEED CORPUS OUT
                                            write an llm.c tokenizer file (KIND below)
  reference_bpe.py pieces TEXT [--control]  the pieces, one per line as hex
  reference_bpe.py encode VOCAB TEXT [--control] [--plain]
                                            the ids, one per line
  reference_bpe.py shard SHARD...           the tokens of llm.c shards, one per line

--control runs a deliberately wrong variant that the comparison must reject: the
pieces without the look-ahead of '\\s+(?!\\S)' (white space keeps its last character),
or BPE that merges the rightmost of the lowest-rank pairs instead of the leftmost.
--plain encodes the end-of-text token's text as ordinary text (tiktoken's
encode_ordinary), the control of cutting it out.

Vocabulary kinds: the 256 bytes (ids 0..255, except `reversed` and `no_nul`) followed by:
  identity   nothing more (version 1: the end-of-text id is the last, 255, byte 0xFF,
             which UTF-8 never holds)
  identity_eot  an end-of-text token (version 2: 257 tokens)
  reversed   id i is byte 255 - i, nothing more (version 1: byte 0x00 is end-of-text)
  no_nul     ids 0..254 are the bytes 0x01..0xFF, then end-of-text (version 2): byte
             0x00 is no token
  trained    merges learned from CORPUS by counting pairs (the usual BPE training), so
             every merged token is reachable; then an end-of-text token (version 2)
  substrings random substrings of CORPUS's pieces in random rank order: many cannot be
             reached by merges, which tests the exact rule (lowest rank, leftmost, a
             whole piece that is a token taken as it is); then end-of-text (version 2)
"""
import random
import struct
import sys

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The control: white space without the look-ahead.
CONTROL_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"""

EOT = b"<|endoftext|>"


def pieces(text, control=False):
    import regex  # only here: the vocabularies of bytes alone are written without it
    return regex.findall(CONTROL_PATTERN if control else GPT2_PATTERN, text)


def bpe(piece, ranks, control=False):
    """Ids of one piece (bytes): merge the lowest-rank adjacent pair until none is a token."""
    if piece in ranks:
        return [ranks[piece]]
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is None:
                continue
            better = best is None or r < best[0] or (control and r == best[0])
            if better:
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[p] for p in parts]


def read_vocab(path):
    data = open(path, "rb").read()
    magic, version, size = struct.unpack_from("<3I", data, 0)
    assert magic == 20240328 and version in (1, 2), path
    eot = struct.unpack_from("<I", data, 12)[0] if version == 2 else size - 1
    tokens, at = [], 1024
    for _ in range(size):
        n = data[at]
        tokens.append(data[at + 1:at + 1 + n])
        at += 1 + n
    assert at == len(data), path
    ranks = {}
    for i, t in enumerate(tokens):
        if i != eot and t not in ranks:
            ranks[t] = i
    return ranks, tokens[eot], eot


def encode(text, vocab, control=False, plain=False):
    """Ids of text (bytes): split at the end-of-text marker's bytes (each is that
    token), then pieces and BPE on the parts between. plain: no split (the marker is
    text like any other), the control of the split."""
    ranks, marker, eot = vocab
    ids = []
    for k, part in enumerate([text] if plain else text.split(marker)):
        if k > 0:
            ids.append(eot)
        for p in pieces(part.decode("utf-8")):
            ids += bpe(p.encode(), ranks, control)
    return ids


def write_vocab(path, tokens, version):
    header = [20240328, version, len(tokens), len(tokens) - 1 if version == 2 else 0] + [0] * 252
    with open(path, "wb") as f:
        f.write(struct.pack("<256I", *header))
        for t in tokens:
            assert 1 <= len(t) <= 255
            f.write(bytes([len(t)]) + t)


def train(corpus, merges):
    """The usual byte-level BPE training: count adjacent pairs within pieces, merge the
    most frequent (the first seen on a tie), repeat."""
    words = {}
    for p in pieces(corpus):
        b = p.encode()
        words[b] = words.get(b, 0) + 1
    split = {w: [w[i:i + 1] for i in range(len(w))] for w in words}
    learned = []
    for _ in range(merges):
        counts = {}
        for w, n in words.items():
            parts = split[w]
            for pair in zip(parts, parts[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        a, b = max(counts, key=counts.get)
        learned.append(a + b)
        for w in words:
            if a + b not in w:  # the pair's bytes are not in the word: nothing to merge
                continue
            parts, out, i = split[w], [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            split[w] = out
    return learned


def make_vocab(kind, seed, corpus):
    rng = random.Random(seed)
    singles = [bytes([i]) for i in range(256)]
    if kind == "identity":
        return singles, 1
    if kind == "identity_eot":
        return singles + [EOT], 2
    if kind == "reversed":
        return singles[::-1], 1
    if kind == "no_nul":
        return singles[1:] + [EOT], 2
    if kind == "trained":
        merged = [t for t in dict.fromkeys(train(corpus, 300)) if len(t) <= 255]
        return singles + merged + [EOT], 2
    if kind == "substrings":
        found = set()
        ps = [p.encode() for p in pieces(corpus)]
        while len(found) < 1500:
            p = rng.choice(ps)
            if len(p) < 2:
                continue
            i = rng.randrange(len(p) - 1)
            j = rng.randrange(i + 2, min(len(p), i + 8) + 1)
            found.add(p[i:j])
        extra = sorted(found)
        rng.shuffle(extra)
        return singles + extra + [EOT], 2
    sys.exit(f"unknown vocabulary kind {kind}")


# Characters of every class the pattern tells apart: ASCII, accented and other-script
# letters, combining marks (neither letter nor number), digits and other numbers,
# punctuation and symbols (emoji need 4 bytes), every kind of white space, controls
# that are not white space, and the apostrophes of the contractions.
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        + list(".,;:!?-()[]{}\"/\\@#$%^&*_+=<>|~`") + ["'"] * 8 + ["s", "t", "re", "ve", "m", "ll", "d"]
        + list("éüñçÅøßÆœ") + list("αβγΩЖжяשׁעربي日本語中文한국어ภาษา") + ["\u0301", "\u0308", "\u093f"]
        + list("²³¼½٣৩Ⅻⅷ") + ["€", "©", "→", "😀", "🎉", "—", "…", "’", "“"]
        + [" "] * 12 + ["\n"] * 4 + ["\t", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2003",
                                     "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
        + ["\x1c", "\x1f", "\x00", "\x7f"])


def random_text(seed, n):
    rng = random.Random(seed)
    out, length = [], 0
    while length < n:
        c = rng.choice(POOL)
        out.append(c * rng.choice([1, 1, 1, 2, 3]) if c.isspace() else c)
        length += len(out[-1])
    return "".join(out)


def main():
    a = sys.argv[1:]
    control, plain = "--control" in a, "--plain" in a
    a = [x for x in a if x not in ("--control", "--plain")]
    if a[:1] == ["text"] and len(a) == 4:
        open(a[3], "w", encoding="utf-8").write(random_text(int(a[1]), int(a[2])))
    elif a[:1] == ["vocab"] and len(a) == 5:
        corpus = open(a[3], encoding="utf-8").read()
        tokens, version = make_vocab(a[1], int(a[2]), corpus)
        write_vocab(a[4], tokens, version)
    elif a[:1] == ["pieces"] and len(a) == 2:
        for p in pieces(open(a[1], encoding="utf-8", newline="").read(), control):
            print(p.encode().hex())
    elif a[:1] == ["encode"] and len(a) == 3:
        for i in encode(open(a[2], "rb").read(), read_vocab(a[1]), control, plain):
            print(i)
    elif a[:1] == ["shard"] and len(a) >= 2:
        for path in a[1:]:
            data = open(path, "rb").read()
            n = struct.unpack_from("<i", data, 8)[0]
            for t in struct.unpack_from(f"<{n}H", data, 1024):
                print(t)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
