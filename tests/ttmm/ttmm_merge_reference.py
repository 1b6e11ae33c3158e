#!/usr/bin/env python3
"""PEFT reference for ttmoe's TTMM merge (tests/ttmm, label parity).

For a tiny random Llama (transformers' LlamaForCausalLM, llm_reference.py's seeded weights) this saves
under <out>/ttmm_merge/:
  base/                   the model, save_pretrained
  expert_<k>/             three PEFT LoRA experts (r=4, alpha=16, all 7 projections; random A and B)
  reference.safetensors   ids [2, 9]; "weights" [3] (the merging weights w_k); the logits of the model
                          after PEFT's add_weighted_adapter(combination_type="cat") with those weights
                          and merge_and_unload ("logits_merged"), and the base logits ("logits_base")
ttmoe must reproduce logits_merged by merging the same experts (ttmm::DenseMerge, ActiveExperts).
Needs the pinned reference environment (TTMOE_REF_PYTHON): torch, transformers, peft, safetensors.
"""
import argparse
import os
import shutil
import sys

import peft
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
import llm_reference  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
WEIGHTS = [0.5, 0.3, 0.2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    folder = os.path.join(args.out, "ttmm_merge")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    cfg = dict(llm_reference.BASE, rope_theta=10000.0, tie_word_embeddings=False)
    base = llm_reference.make_model("llama", cfg, 77)
    base.save_pretrained(os.path.join(folder, "base"))
    ids = torch.randint(0, cfg["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits_base = base(input_ids=ids).logits.float().contiguous()
    model = None
    names = [f"expert_{k}" for k in range(len(WEIGHTS))]
    for k, name in enumerate(names):
        config = peft.LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0)
        if model is None:
            model = peft.get_peft_model(base, config, adapter_name=name)
        else:
            model.add_adapter(name, config)
        g = torch.Generator().manual_seed(1000 + k)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_" in pname and f".{name}." in pname:
                    p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    for name in names:
        model.save_pretrained(os.path.join(folder, "tmp"), selected_adapters=[name])
        sub = os.path.join(folder, "tmp", name) if name != "default" else os.path.join(folder, "tmp")
        os.replace(sub, os.path.join(folder, name))
    shutil.rmtree(os.path.join(folder, "tmp"))
    model.add_weighted_adapter(names, WEIGHTS, "merged", combination_type="cat")
    model.set_adapter("merged")
    merged = model.merge_and_unload(adapter_names=["merged"])
    merged.eval()
    with torch.no_grad():
        logits_merged = merged(input_ids=ids).logits.float().contiguous()
    delta = float((logits_merged - logits_base).norm() / logits_base.norm())
    assert delta > 0.05, f"the merged experts barely change the logits ({delta})"
    save_file({"ids": ids, "weights": torch.tensor(WEIGHTS, dtype=torch.float64), "logits_base": logits_base,
               "logits_merged": logits_merged}, os.path.join(folder, "reference.safetensors"))
    print(f"ttmm_merge: relative change of the logits by the merge {delta:.3f}")


if __name__ == "__main__":
    main()
