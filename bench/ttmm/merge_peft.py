#!/usr/bin/env python3
"""The PyTorch peer of bench_ttmm_merge: PEFT's add_weighted_adapter(combination_type="cat") +
merge_and_unload of the same experts (PEFT folders written by `bench_ttmm_merge --write-experts DIR`)
into a random Llama of the same shapes (Llama-3.2-1B widths, --layers of them), then the restore the
TTMM authors' code does (copy back from a clone of the weights, taken before and not timed).
Prints peft_merge_s, peft_restore_s and peft_merge_restore_s. Threads: torch.set_num_threads(--threads).
"""
import argparse
import os
import time

import torch
import transformers
import peft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=8,
                                   head_dim=64, tie_word_embeddings=True, rope_theta=500000.0)
    base = transformers.LlamaForCausalLM(cfg).float().eval()
    names = sorted((n for n in os.listdir(args.experts) if n.startswith("expert_")), key=lambda n: int(n.split("_")[1]))
    model = peft.PeftModel.from_pretrained(base, os.path.join(args.experts, names[0]), adapter_name=names[0])
    for n in names[1:]:
        model.load_adapter(os.path.join(args.experts, n), adapter_name=n)
    targets = {name: m.base_layer.weight for name, m in model.named_modules() if hasattr(m, "base_layer")}
    clones = {name: w.detach().clone() for name, w in targets.items()}
    weights = [1.0 / len(names)] * len(names)
    with torch.no_grad():
        t0 = time.perf_counter()
        model.add_weighted_adapter(names, weights, "merged", combination_type="cat")
        merged = model.merge_and_unload(adapter_names=["merged"])
        t1 = time.perf_counter()
        current = dict(merged.named_modules())
        for name, clone in clones.items():
            current[name.removeprefix("base_model.model.")].weight.copy_(clone)
        t2 = time.perf_counter()
    print(f"peft_merge_s: {t1 - t0:.4f}\npeft_restore_s: {t2 - t1:.4f}\npeft_merge_restore_s: {t2 - t0:.4f}")


if __name__ == "__main__":
    main()
