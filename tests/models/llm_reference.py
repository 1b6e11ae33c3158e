#!/usr/bin/env python3
"""Hugging Face reference folders for ttmoe's Llama-family tests (tests/models).

Each case builds transformers' own LlamaForCausalLM / Qwen2ForCausalLM with seeded random weights,
saves it with save_pretrained (an HF folder exactly as users have them) and writes
<case>/reference.safetensors holding what the C++ side must reproduce:
  logits_ids [B, T] / logits [B, T, V]     full-sequence forward (float32)
  gen_prompt_ids (flat), gen_prompt_lens   prompts of different lengths
  gen_tokens [P, 32]                       transformers' greedy generate, one prompt at a time
  ll_ids [B, T], ll_prefix [B]             prefix + continuation; loss on the continuation only
  ll_loss [B]                              transformers' loss (labels -100 on the prefix), per row
  logits_unrounded_weights (bf16 case)     the same forward before the weights were rounded to bf16
Needs the pinned reference environment (TTMOE_REF_PYTHON): transformers + torch + safetensors.
"""
import argparse
import copy
import hashlib
import json
import os
import sys

try:
    import torch
    import transformers
    from safetensors.torch import save_file
except ImportError as e:  # a missing reference is a failure, never a skip
    print(f"llm_reference.py: the reference environment lacks {e.name}: {e}", file=sys.stderr)
    sys.exit(1)

NEW_TOKENS = 32


def randomize(model, seed):
    """Weights with clear logit margins (HF's 0.02 init makes near-ties that flip greedy tokens)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def make_model(kind, cfg, seed):
    torch.manual_seed(seed)
    if kind == "llama":
        config = transformers.LlamaConfig(**cfg)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.Qwen2Config(**cfg)
        model = transformers.Qwen2ForCausalLM(config)
    model = model.float().eval()
    randomize(model, seed)
    if cfg.get("tie_word_embeddings"):
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


def round_bf16(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


# (window, stride) pairs: overlapping, disjoint (stride = window), a stride not dividing the text,
# and stride 1 (every token with the longest context the window allows).
PPL_WINDOWS = [(16, 8), (16, 16), (16, 5), (12, 1)]


def windowed_nll(model, ids, max_length, stride):
    """Hugging Face's "perplexity of fixed-length models" loop: windows of max_length tokens moved by
    stride, each scoring only the tokens past the previous window's end (labels -100 before them).
    The guide weights each window's mean loss by num_valid - 1; this counts exactly the labels the
    shifted loss scores, so the result is the mean NLL over the scored tokens."""
    seq_len = ids.size(1)
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    for begin in range(0, seq_len, stride):
        end = min(begin + max_length, seq_len)
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        loss = model(input_ids=input_ids, labels=target_ids).loss.double().item()
        n = int((target_ids[:, 1:] != -100).sum())
        nll_sum += loss * n
        n_tokens += n
        prev_end = end
        if end == seq_len:
            break
    return nll_sum / n_tokens


def references(model, vocab, seed):
    g = torch.Generator().manual_seed(seed + 1000)
    out = {}
    with torch.no_grad():
        ids = torch.randint(0, vocab, (3, 12), generator=g)
        out["logits_ids"] = ids
        out["logits"] = model(input_ids=ids).logits.float().contiguous()
        lens = [5, 9, 3]
        prompts = [torch.randint(0, vocab, (n,), generator=g) for n in lens]
        model.generation_config.eos_token_id = None  # 32 tokens always, EOS handling is tested in C++
        model.generation_config.pad_token_id = 0
        gen = []
        for p in prompts:
            o = model.generate(p[None], max_new_tokens=NEW_TOKENS, do_sample=False,
                               attention_mask=torch.ones_like(p[None]))
            gen.append(o[0, len(p):])
        out["gen_prompt_ids"] = torch.cat(prompts)
        out["gen_prompt_lens"] = torch.tensor(lens, dtype=torch.int64)
        out["gen_tokens"] = torch.stack(gen)
        ll = torch.randint(0, vocab, (2, 10), generator=g)
        prefix = [4, 7]
        losses = []
        for b in range(2):
            labels = ll[b:b + 1].clone()
            labels[0, :prefix[b]] = -100
            losses.append(model(input_ids=ll[b:b + 1], labels=labels).loss.float())
        out["ll_ids"] = ll
        out["ll_prefix"] = torch.tensor(prefix, dtype=torch.int64)
        out["ll_loss"] = torch.stack(losses)
        # Sliding-window perplexity of a 40-token text (window, stride, mean NLL per scored token).
        text = torch.randint(0, vocab, (1, 40), generator=g)
        out["ppl_ids"] = text[0]
        out["ppl_windows"] = torch.tensor([[w, s, windowed_nll(model, text, w, s)] for w, s in PPL_WINDOWS],
                                          dtype=torch.float64)
    return {k: v.contiguous() for k, v in out.items()}


BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64)

CASES = {
    # Llama 2 shape: separate LM head, plain RoPE.
    "llama_small": ("llama", dict(BASE, rope_theta=10000.0, tie_word_embeddings=False), {}),
    # Llama 3.2 shape: llama3 rope scaling, tied head, head_dim != hidden / heads; sharded save.
    "llama3_small": ("llama", dict(BASE, rope_theta=500000.0, tie_word_embeddings=True, head_dim=24,
                                   rope_scaling=dict(LLAMA3_ROPE, rope_theta=500000.0),
                                   eos_token_id=[2, 3]),
                     {"max_shard_size": "40KB"}),
    # Qwen2.5 shape: q/k/v biases, one KV head, tied head.
    "qwen2_small": ("qwen2", dict(BASE, rope_theta=1000000.0, num_key_value_heads=1, tie_word_embeddings=True,
                                  rms_norm_eps=1e-6, use_sliding_window=False), {}),
    # The same Qwen2 saved in bf16; the reference runs the f32 model on the bf16-rounded weights.
    "qwen2_bf16": ("qwen2", dict(BASE, rope_theta=1000000.0, num_key_value_heads=1, tie_word_embeddings=False,
                                 rms_norm_eps=1e-6, use_sliding_window=False), {"bf16": True}),
    # Llama-3.2-1B width, 2 layers, small vocabulary.
    "llama32_1b_width": ("llama", dict(BASE, vocab_size=256, hidden_size=2048, intermediate_size=8192,
                                       num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                                       max_position_embeddings=131072, tie_word_embeddings=True,
                                       rope_scaling=dict(LLAMA3_ROPE, original_max_position_embeddings=8192,
                                                         factor=32.0, rope_theta=500000.0)), {}),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    with open(__file__, "rb") as f:  # a changed script regenerates every case
        script_hash = hashlib.sha256(f.read()).hexdigest()
    for i, (name, (kind, cfg, opts)) in enumerate(CASES.items()):
        if only and name not in only:
            continue
        folder = os.path.join(args.out, name)
        stamp = os.path.join(folder, "reference.safetensors")
        spec = json.dumps([kind, cfg, opts, transformers.__version__, script_hash], sort_keys=True)
        if os.path.exists(stamp) and open(os.path.join(folder, "case.json")).read() == spec:
            continue  # already generated from the same spec
        os.makedirs(folder, exist_ok=True)
        model = make_model(kind, cfg, seed=100 + i)
        unrounded = None
        if opts.get("bf16"):
            unrounded = references(model, cfg["vocab_size"], 100 + i)["logits"]
            round_bf16(model)
            # A copy is cast: casting the model itself would also round RoPE's inv_freq buffer.
            copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder)
        else:
            model.save_pretrained(folder, max_shard_size=opts.get("max_shard_size", "50GB"))
        refs = references(model, cfg["vocab_size"], 100 + i)
        if unrounded is not None:
            refs["logits_unrounded_weights"] = unrounded  # what bf16 rounding of the weights costs
        save_file(refs, stamp)
        with open(os.path.join(folder, "case.json"), "w") as f:
            f.write(spec)
        print(f"{name}: {sorted(os.listdir(folder))}")


if __name__ == "__main__":
    main()
