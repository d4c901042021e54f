#!/usr/bin/env python3
"""Writes the demo's tokenizer.json and model/config.json (beside this script,
or under --out).

The tokenizer is a tiny byte-level BPE in the layout of Qwen2.5's
tokenizer.json (NFC; Split with Qwen's regex, which isolates every digit;
ByteLevel; BPE; ChatML special tokens), with merges learned from a corpus:
the ChatML-rendered conversations of `dapo demo-data` files (prompts, and
prompts with their worked solutions). The model config is a tiny Qwen2
whose vocabulary is the tokenizer's rounded up to a multiple of 8 (so that
tensor parallelism up to 8 divides it) and whose EOS is <|im_end|>.

Needs only the standard library. inputs/demo/README.md has the commands
that made the shipped files:

    python3 inputs/demo/make_tokenizer.py [--merges 256] [--out DIR] CORPUS.jsonl...

Ids: 0..255 are the byte tokens (id = byte value), merge rank r makes token
256 + r, then <|endoftext|>, <|im_start|>, <|im_end|> (Qwen's order).
Training: count the pre-tokenized words of the corpus; repeatedly merge the
most frequent adjacent pair (ties: the smaller (left, right) strings), until
--merges merges exist or no pair occurs twice (with the demo's small word
lists every word ends up one token long before 256 merges). Deterministic:
the same corpus gives the same bytes (tests/apps/test_demo_data_cli.cpp
remakes the shipped files and compares).
"""
import argparse
import collections
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))

# Qwen2/2.5/3's pre-tokenizer pattern, written into tokenizer.json as is.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# The same pattern for ASCII text (Python's re has no \p{..}); the corpus is
# checked to be ASCII, where both give the same pieces.
ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]"
                         r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

MODEL = {  # the tiny Qwen2 of the demo
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
}


def bytes_to_unicode():
    """GPT-2's byte -> character table (printable Latin-1 maps to itself)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def chatml(messages):
    """Qwen's ChatML rendering (dapo's chat_template.h, no default system)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def corpus_texts(paths):
    texts = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                d = json.loads(line)
                messages = list(d["prompt"])
                if "response" in d:
                    messages.append({"role": "assistant", "content": d["response"]})
                    texts.append(chatml(messages))
                else:
                    texts.append(chatml(messages) + "<|im_start|>assistant\n")
    return texts


def word_counts(texts, table):
    counts = collections.Counter()
    special = re.compile("|".join(re.escape(s) for s in SPECIALS))
    for text in texts:
        if not text.isascii():
            raise SystemExit("the demo corpus must be ASCII (the Python split pattern is ASCII-only)")
        for piece in special.split(text):
            for word in ASCII_SPLIT.findall(piece):
                counts["".join(table[b] for b in word.encode("utf-8"))] += 1
    return counts


def learn_merges(counts, limit):
    words = [(list(w), c) for w, c in sorted(counts.items())]
    merges = []
    while len(merges) < limit:
        pairs = collections.Counter()
        for symbols, c in words:
            for a, b in zip(symbols, symbols[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if best[1] < 2:
            break
        (a, b), _ = best
        merges.append((a, b))
        for symbols, _ in words:
            i = 0
            while i + 1 < len(symbols):
                if symbols[i] == a and symbols[i + 1] == b:
                    symbols[i:i + 2] = [a + b]
                i += 1
    return merges


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--merges", type=int, default=256, help="the most BPE merges to learn")
    parser.add_argument("--out", default=HERE, help="directory for tokenizer.json and model/config.json")
    parser.add_argument("corpus", nargs="+", help="JSONL files of `dapo demo-data` (prompts, or SFT pairs)")
    args = parser.parse_args()

    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges = learn_merges(word_counts(corpus_texts(args.corpus), table), args.merges)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    added = []
    for content in SPECIALS:
        added.append({"id": len(vocab) + len(added), "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    os.makedirs(os.path.join(args.out, "model"), exist_ok=True)
    path = os.path.join(args.out, "tokenizer.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")

    ids = {a["content"]: a["id"] for a in added}
    size = len(vocab) + len(added)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": (size + 7) // 8 * 8,
        **MODEL,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_sliding_window": False,
        "max_window_layers": MODEL["num_hidden_layers"],
        "torch_dtype": "float32",
        "use_cache": True,
    }
    config_path = os.path.join(args.out, "model", "config.json")
    with open(config_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"wrote {path}: {len(merges)} merges, {size} tokens; {config_path}: vocab_size {config['vocab_size']}")


if __name__ == "__main__":
    main()
