"""A byte-level BPE tokenizer with a fixed, seeded merge table, its streaming detokenizer, and
the seeded prompt text the workload draws from. Pure Python: the work per request is real."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from functools import lru_cache

# Never produced by the byte table's printable text, so the seeded output lengths hold.
STOP_STRINGS = ("\x00\x00\x00", "<|end|>")
N_MERGES = 256  # 256 byte tokens + 256 merges = the model's vocabulary of 512
_WORD = re.compile(r" ?[^ ]+| +")


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table, so token strings are plain text."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def lexicon(seed: int = 7, size: int = 600) -> list[str]:
    """Pseudo-words built from syllables; the merge table and all prompts use them."""
    rng = random.Random(seed)
    onsets = ["", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr"]
    nuclei = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    codas = ["", "", "n", "r", "s", "t", "nd", "ck", "ng"]
    words: set[str] = set()
    while len(words) < size:
        n = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        words.add("".join(rng.choice(onsets) + rng.choice(nuclei) + rng.choice(codas)
                          for _ in range(n)))  # fmt: skip
    out = sorted(words)
    rng.shuffle(out)
    out += [",", ".", "?", "café", "naïve", "über"]  # some multi-byte UTF-8
    return out


def prompt_text(rng: random.Random, words: list[str], n_words: int) -> str:
    """A Zipf-ish word sequence of n_words words."""
    weights = [1.0 / (i + 1) for i in range(len(words))]
    return " ".join(rng.choices(words, weights=weights, k=n_words))


@lru_cache(maxsize=1)
def merge_table() -> tuple[tuple[int, int], ...]:
    """The fixed merge table: N_MERGES BPE merges learned from the seeded lexicon."""
    words = lexicon()
    rng = random.Random(11)
    counts = Counter(_WORD.findall(prompt_text(rng, words, 20000)))
    seqs = {w: list(w.encode()) for w in counts}
    merges: list[tuple[int, int]] = []
    for new in range(256, 256 + N_MERGES):
        pairs: Counter[tuple[int, int]] = Counter()
        for w, ids in seqs.items():
            for a, b in itertools.pairwise(ids):
                pairs[(a, b)] += counts[w]
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        merges.append(best)
        for w, ids in seqs.items():
            seqs[w] = _merge(ids, best, new)
    return tuple(merges)


def _merge(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out: list[int] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class Tokenizer:
    """Byte-level BPE. `slow` applies every merge of the table in turn to each word (the
    textbook loop, same output) instead of repeatedly merging the best-ranked adjacent pair."""

    def __init__(self, slow: bool = False) -> None:
        self.merges = merge_table()
        self.ranks = {p: 256 + r for r, p in enumerate(self.merges)}
        self.slow = slow
        chars = _byte_chars()
        self.byte_of = {c: b for b, c in enumerate(chars)}
        self.strings = list(chars)
        for a, b in self.merges:
            self.strings.append(self.strings[a] + self.strings[b])
        self.vocab_size = len(self.strings)

    def encode(self, text: str) -> list[int]:
        """Token ids of text (no cache: every request is tokenized from scratch)."""
        ids: list[int] = []
        word = self._word_slow if self.slow else self._word
        for w in _WORD.findall(text):
            ids.extend(word(list(w.encode())))
        return ids

    def _word(self, ids: list[int]) -> list[int]:
        ranks = self.ranks
        while len(ids) > 1:
            best, rank = None, 1 << 30
            for a, b in itertools.pairwise(ids):
                r = ranks.get((a, b), 1 << 30)
                if r < rank:
                    best, rank = (a, b), r
            if best is None:
                break
            ids = _merge(ids, best, rank)
        return ids

    def _word_slow(self, ids: list[int]) -> list[int]:
        for r, pair in enumerate(self.merges):
            if len(ids) < 2:
                break
            ids = _merge(ids, pair, 256 + r)
        return ids

    def decode(self, ids: list[int]) -> str:
        """Text of ids; bytes that do not form UTF-8 yet become U+FFFD."""
        s = "".join(self.strings[i] for i in ids)
        return bytes(self.byte_of[c] for c in s).decode("utf-8", errors="replace")


class Detokenizer:
    """Streaming text of one request. The incremental path decodes a small window of the last
    tokens (vLLM's prefix/read offsets); `full` re-decodes the prompt and the whole output
    every token and takes the text after the prompt's."""

    def __init__(self, tok: Tokenizer, prompt: list[int], full: bool = False) -> None:
        self.tok = tok
        self.full = full
        self.prompt = prompt
        self.prompt_chars = len(tok.decode(prompt)) if full else 0
        self.ids: list[int] = []
        self.text = ""
        self.prefix = 0
        self.read = 0
        self.stopped = False  # a stop string appeared (reported, not acted on: lengths are seeded)

    def add(self, token: int) -> str:
        """Append a token; the new text it completes ("" while a UTF-8 character is open)."""
        self.ids.append(token)
        if self.full:
            whole = self.tok.decode(self.prompt + self.ids)[self.prompt_chars :]
            if whole.endswith("\ufffd"):
                return ""
            # The stop-string check over the whole text too, not just its tail.
            if any(s in whole for s in STOP_STRINGS):
                self.stopped = True
            delta = whole[len(self.text) :]
            self.text = whole
            return delta
        before = self.tok.decode(self.ids[self.prefix : self.read])
        after = self.tok.decode(self.ids[self.prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            delta = after[len(before) :]
            self.prefix, self.read = self.read, len(self.ids)
            tail = self.text[-8:] + delta
            if any(s in tail for s in STOP_STRINGS):
                self.stopped = True
            self.text += delta
            return delta
        return ""
