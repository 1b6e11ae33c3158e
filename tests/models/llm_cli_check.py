#!/usr/bin/env python3
"""End-to-end check of the `llm` example (examples/llm) against transformers and PEFT.

usage: llm_cli_check.py --exe PATH/llm --out DIR

Writes a tiny Hugging Face folder into DIR/model: a byte-level BPE tokenizer.json trained here by
`tokenizers` with the Llama-3 pre-tokenizer (BOS added by the post-processor), a random Llama whose
vocabulary is the tokenizer's, and a PEFT LoRA adapter for it in DIR/lora. Then runs the example and
fails (exit 1, naming the case) unless
  - `llm generate` (greedy) prints exactly the text transformers' generate + the tokenizer's decode
    give, for the base model and with `--lora DIR:0.5` in both --lora-mode values (PEFT's model with
    every layer's scaling halved);
  - `llm perplexity --prefix-tokens 5` prints transformers' loss with the prefix labels set to -100;
  - a missing model folder, a missing adapter and a prompt longer than the context each exit 1
    with an error line naming the problem;
  - `llm train` on a Debian text (the GPL) starts near ln(vocab), lowers the loss, and writes a
    folder that transformers and `tokenizers` load, on which ttmoe's perplexity and greedy text
    equal theirs.
Needs the pinned reference environment (TTMOE_REF_PYTHON): torch, transformers, peft, tokenizers.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import peft
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_reference  # noqa: E402

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PARAGRAPH = ("The quick brown fox jumps over the lazy dog. A language model predicts the next token from the ones "
        "before it; perplexity is the exponential of the mean negative log-likelihood.\n"
        "def add(a, b):\n    return a + b  # 1234 + 5678\n")
TEXT = PARAGRAPH * 3  # the training text, and a prompt longer than the context of 96
PROMPT = "The quick brown fox"
NEW_TOKENS = 16
failures = []


def expect(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def make_tokenizer(folder):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)
    return tok


def greedy_text(model, tok, prompt):
    ids = torch.tensor([tok.encode(prompt).ids])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, attention_mask=torch.ones_like(ids))
    return tok.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True)


def run(exe, *args):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def check_perplexity(exe, model, tok, model_dir, text_file, text, prefix, what):
    """`llm perplexity` on text_file scores the tokens after the first `prefix` as transformers does."""
    ids = torch.tensor([tok.encode(text).ids])
    labels = ids.clone()
    labels[0, :prefix] = -100
    with torch.no_grad():
        loss = model(input_ids=ids, labels=labels).loss.item()
    rc, out, err = run(exe, "perplexity", "--model", model_dir, "--file", text_file, "--prefix-tokens", str(prefix))
    got = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    nll = float(got.get("nll", "nan"))
    expect(rc == 0 and abs(nll - loss) <= 1e-4 * abs(loss) and int(got.get("tokens", -1)) == ids.shape[1] and
           int(got.get("scored", -1)) == ids.shape[1] - prefix and
           abs(float(got.get("perplexity", "nan")) - math.exp(loss)) <= 1e-4 * math.exp(loss),
           f"{what}: ttmoe nll {nll} (rc {rc}, {err.strip()}) == transformers {loss} on {ids.shape[1]} tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    model_dir, lora_dir = os.path.join(args.out, "model"), os.path.join(args.out, "lora")
    os.makedirs(model_dir, exist_ok=True)
    tok = make_tokenizer(model_dir)
    bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    cfg = dict(llm_reference.BASE, vocab_size=tok.get_vocab_size(), max_position_embeddings=96, rope_theta=10000.0,
               tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos)
    model = llm_reference.make_model("llama", cfg, seed=500)
    with torch.no_grad():
        # A random model drifts into stray single bytes (undecodable alone) or, with a tied head,
        # repeats its input; a separate head with the byte tokens' rows zeroed picks whole-word
        # merges, so the greedy text is readable and varied, and smaller rows keep the loss moderate.
        model.lm_head.weight.mul_(0.25)
        byte_ids = [tok.token_to_id(c) for c in pre_tokenizers.ByteLevel.alphabet()]
        model.lm_head.weight[[i for i in byte_ids if i is not None]] = 0
    model.generation_config.pad_token_id = eos
    model.save_pretrained(model_dir)
    text_file = os.path.join(args.out, "text.txt")
    with open(text_file, "w") as f:
        f.write(PARAGRAPH)
    assert len(tok.encode(PARAGRAPH).ids) < 96 < len(tok.encode(TEXT).ids)

    # Greedy generation of the base model.
    want = greedy_text(model, tok, PROMPT)
    rc, out, err = run(args.exe, "generate", "--model", model_dir, "--prompt", PROMPT,
                       "--max-new-tokens", str(NEW_TOKENS))
    expect(rc == 0 and out == want + "\n", f"generate: {out!r} (rc {rc}, {err.strip()}) == transformers {want!r}")

    # Perplexity, loss on the tokens after the first 5.
    check_perplexity(args.exe, model, tok, model_dir, text_file, PARAGRAPH, 5, "perplexity")

    # A PEFT adapter at scale 0.5, merged and unmerged.
    lcfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
                           task_type="CAUSAL_LM")
    pm = peft.get_peft_model(model, lcfg)
    g = torch.Generator().manual_seed(501)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    pm.save_pretrained(lora_dir)
    for module in pm.modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            module.scale_layer(0.5)
    pm.eval()
    want_lora = greedy_text(pm, tok, PROMPT)
    expect(want_lora != want, "the adapter changes the greedy text")
    for mode in ("merged", "unmerged"):
        rc, out, err = run(args.exe, "generate", "--model", model_dir, "--prompt", PROMPT, "--lora", lora_dir + ":0.5",
                           "--lora-mode", mode, "--max-new-tokens", str(NEW_TOKENS))
        expect(rc == 0 and out == want_lora + "\n", f"generate --lora (:0.5, {mode}): {out!r} (rc {rc}, {err.strip()}) "
               f"== PEFT {want_lora!r}")

    # Clear errors.
    missing = os.path.join(args.out, "no_such_model")
    rc, out, err = run(args.exe, "generate", "--model", missing, "--prompt", "x")
    expect(rc != 0 and "no_such_model" in err, f"missing model folder: rc {rc}, {err.strip()!r}")
    rc, out, err = run(args.exe, "generate", "--model", model_dir, "--prompt", "x", "--lora", missing)
    expect(rc == 1 and err.startswith("llm: error:") and "no_such_model" in err, f"missing adapter: rc {rc}, {err.strip()!r}")
    rc, out, err = run(args.exe, "generate", "--model", model_dir, "--prompt", TEXT)
    expect(rc == 1 and "context" in err, f"prompt over the context: rc {rc}, {err.strip()!r}")
    rc, out, err = run(args.exe, "generate", "--model", model_dir, "--prompt", "x", "--bf16-arithmetic", "bf16")
    expect(rc == 1 and "--weights bf16" in err, f"--bf16-arithmetic bf16 with F32 weights: rc {rc}, {err.strip()!r}")
    # BF16 weights with rounded activations run (their text may differ from F32's: no exact reference).
    rc, out, err = run(args.exe, "generate", "--model", model_dir, "--prompt", PROMPT, "--weights", "bf16",
                       "--bf16-arithmetic", "bf16", "--max-new-tokens", str(NEW_TOKENS))
    expect(rc == 0 and out.strip() != "", f"generate --weights bf16 --bf16-arithmetic bf16: rc {rc}, {err.strip()!r}")
    # llm train: a small model and its BPE from scratch on a Debian text (the GPL's first 24 kB).
    corpus = os.path.join(args.out, "corpus.txt")
    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
        gpl = f.read()
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(gpl[:24000])
    trained = os.path.join(args.out, "trained")
    rc, out, err = run(args.exe, "train", "--corpus", corpus, "--out", trained, "--vocab-size", "400", "--hidden", "64",
                       "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate", "128", "--context", "64",
                       "--steps", "200", "--batch", "8", "--lr", "1e-2", "--seed", "3")
    got = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    expect(rc == 0 and "final_loss" in got, f"train: rc {rc}, {out.strip()!r}, {err.strip()[-300:]!r}")
    if rc == 0:
        first, final, val = float(got["first_loss"]), float(got["final_loss"]), float(got["val_loss"])
        expect(abs(first - math.log(int(got["vocab"]))) < 1.0, f"train: first loss {first} ~ ln(vocab)")
        expect(final < first - 1.5 and val < first - 1.0, f"train: the loss falls ({first} -> {final}, validation {val})")
        # The folder loads in transformers and `tokenizers`, and ttmoe scores it as they do.
        ttok = Tokenizer.from_file(os.path.join(trained, "tokenizer.json"))
        tm = transformers.AutoModelForCausalLM.from_pretrained(trained, dtype=torch.float32).eval()
        sample = os.path.join(args.out, "sample.txt")
        with open(sample, "w", encoding="utf-8") as f:
            f.write(gpl[30000:30120])
        assert len(ttok.encode(gpl[30000:30120]).ids) <= 64, "the sample needs more tokens than the context"
        check_perplexity(args.exe, tm, ttok, trained, sample, gpl[30000:30120], 3, "trained folder")
        want = greedy_text(tm, ttok, "This License")
        rc, out, err = run(args.exe, "generate", "--model", trained, "--prompt", "This License",
                           "--max-new-tokens", str(NEW_TOKENS))
        expect(rc == 0 and out == want + "\n", f"trained folder: generate {out!r} == transformers {want!r}")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
