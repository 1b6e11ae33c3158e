#!/usr/bin/env python3
"""PEFT LoRA reference folders for ttmoe's adapter tests (tests/models, label parity).

For a tiny random Llama and Qwen2 (transformers' own classes, llm_reference.py's seeded weights) this
saves, under <out>/<case>/:
  base/                   the model, save_pretrained
  lora_plain/             PEFT LoraConfig(r=4, alpha=8, target_modules as a list of all 7 projections)
  lora_rs/                use_rslora, target_modules as a regex string, rank_pattern and alpha_pattern
  reference.safetensors   ids [B, T] and PEFT's logits for: the base model, each adapter alone
                          (unmerged, PeftModel forward), and both at once with scales 0.7 / -0.4
                          (PEFT's weighted combination: both adapters active, each layer's scaling
                          multiplied by its weight)
  train/                  LoRA training by PEFT + torch.optim.AdamW, which ttmoe's train_lora must
                          repeat: init/ (the adapter before training, A and B random), and
                          reference.safetensors with the micro-batches (ids_k [2, 9], labels_k with
                          -100 on each row's prompt and padding), the loss of each micro-batch, the
                          gradients of step 0 ("grad.<name>") and the factors after TRAIN["steps"]
                          steps ("final.<name>"), names as ttmoe's PeftAdapter parameters
                          (model.layers.0.self_attn.q_proj.lora_A.weight)
Every lora_B is random and non-zero (PEFT's default zero B would make the adapter invisible).

With --check DIR it runs the other direction instead: DIR holds an adapter written by ttmoe
(adapter_config.json + adapter_model.safetensors), DIR/base_model.txt names the base folder and
DIR/ids.safetensors the ids; PeftModel.from_pretrained loads it (any unexpected or missing key, or a
shape mismatch, is an error) and DIR/peft_logits.safetensors gets PEFT's logits.
Needs the pinned reference environment (TTMOE_REF_PYTHON): torch, transformers, peft, safetensors.
"""
import argparse
import hashlib
import shutil
import json
import os
import sys
import warnings

try:
    import torch
    import transformers
    import peft
    from safetensors.torch import load_file, save_file
except ImportError as e:  # a missing reference is a failure, never a skip
    print(f"peft_reference.py: the reference environment lacks {e.name}: {e}", file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_reference  # noqa: E402  (same folder: the tiny models and their seeded weights)

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTERS = {
    "lora_plain": dict(r=4, lora_alpha=8, target_modules=PROJ),
    # rsLoRA scale alpha / sqrt(r) with r (and alpha) per module from the patterns; regex targets.
    "lora_rs": dict(r=4, lora_alpha=6, use_rslora=True, target_modules=r".*\.(q_proj|v_proj|up_proj|down_proj)",
                    rank_pattern={"v_proj": 2, "layers.1.mlp.down_proj": 6}, alpha_pattern={"up_proj": 3}),
}
SCALES = {"lora_plain": 0.7, "lora_rs": -0.4}
# One LoRA training run: rank 4 on all seven projections, AdamW (a rate far above the TTMM 2e-4 so
# that two steps move the factors well past float rounding), two micro-batches per step.
TRAIN = dict(r=4, lora_alpha=8, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, steps=2,
             accumulation=2)
CASES = {
    "peft_llama": ("llama", dict(llm_reference.BASE, rope_theta=10000.0, tie_word_embeddings=False)),
    "peft_qwen2": ("qwen2", dict(llm_reference.BASE, rope_theta=1000000.0, num_key_value_heads=1,
                                 tie_word_embeddings=True, rms_norm_eps=1e-6, use_sliding_window=False)),
}


def randomize_lora(model, adapter, seed):
    """Random A and B of `adapter` (only: the others keep theirs), sized to move the logits clearly."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name and f".{adapter}." in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float().contiguous()


def make_case(folder, kind, cfg, seed):
    base = llm_reference.make_model(kind, cfg, seed)
    base.save_pretrained(os.path.join(folder, "base"))
    ids = torch.randint(0, cfg["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(seed + 7))
    refs = {"ids": ids, "logits_base": logits(base, ids)}
    model = None
    for i, (name, acfg) in enumerate(ADAPTERS.items()):
        config = peft.LoraConfig(task_type="CAUSAL_LM", **acfg)
        if model is None:
            model = peft.get_peft_model(base, config, adapter_name=name)
        else:
            model.add_adapter(name, config)
        model.set_adapter(name)
        randomize_lora(model, name, seed + 100 + i)
        model.eval()
        refs[f"logits_{name}"] = logits(model, ids)
    # Each adapter saves into <folder>/<name> (PEFT puts non-default adapters in a sub-folder).
    for name in ADAPTERS:
        model.save_pretrained(os.path.join(folder, "tmp"), selected_adapters=[name])
        sub = os.path.join(folder, "tmp") if name == "default" else os.path.join(folder, "tmp", name)
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        os.replace(sub, os.path.join(folder, name))
    shutil.rmtree(os.path.join(folder, "tmp"))
    # Both adapters active, each layer's scaling times its adapter's weight.
    model.base_model.set_adapter(list(ADAPTERS))
    for module in model.modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            for name, w in SCALES.items():
                if name in module.scaling:
                    module.scaling[name] *= w
    refs["logits_combined"] = logits(model, ids)
    refs["scales"] = torch.tensor([SCALES[n] for n in ADAPTERS], dtype=torch.float64)
    # The adapters must matter: each moves the logits by far more than the 1e-4 tolerance.
    for name in list(ADAPTERS) + ["combined"]:
        delta = (refs[f"logits_{name}"] - refs["logits_base"]).norm() / refs["logits_base"].norm()
        assert delta > 0.05, f"{name} barely changes the logits ({delta})"
    save_file({k: v.contiguous() for k, v in refs.items()}, os.path.join(folder, "reference.safetensors"))


def peft_param_name(name):
    """PEFT's parameter name -> ttmoe's PeftAdapter name (no base_model.model. prefix, no adapter name)."""
    return name.removeprefix("base_model.model.").replace(".default.", ".")


def make_training_case(folder, kind, cfg, seed):
    """PEFT + torch AdamW train an adapter for TRAIN["steps"] steps on masked micro-batches."""
    base = llm_reference.make_model(kind, cfg, seed)
    model = peft.get_peft_model(base, peft.LoraConfig(task_type="CAUSAL_LM", r=TRAIN["r"],
                                                      lora_alpha=TRAIN["lora_alpha"], target_modules=PROJ))
    randomize_lora(model, "default", seed + 200)
    model.save_pretrained(os.path.join(folder, "init"))
    gen = torch.Generator().manual_seed(seed + 201)
    refs = {}
    micro = TRAIN["steps"] * TRAIN["accumulation"]
    for k in range(micro):
        ids = torch.randint(3, cfg["vocab_size"], (2, 9), generator=gen)
        labels = ids.clone()
        labels[0, :3] = -100              # row 0: a 3-token prompt, not scored
        ids[1, 6:] = 0                    # row 1: 6 tokens, right-padded with id 0
        labels[1, :2] = -100
        labels[1, 6:] = -100
        refs[f"ids_{k}"], refs[f"labels_{k}"] = ids, labels
    params = [p for p in model.parameters() if p.requires_grad]
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    opt = torch.optim.AdamW(params, lr=TRAIN["lr"], betas=TRAIN["betas"], eps=TRAIN["eps"],
                            weight_decay=TRAIN["weight_decay"])
    model.train()
    losses = []
    for step in range(TRAIN["steps"]):
        for m in range(TRAIN["accumulation"]):
            k = step * TRAIN["accumulation"] + m
            loss = model(input_ids=refs[f"ids_{k}"], labels=refs[f"labels_{k}"]).loss
            losses.append(loss.item())
            (loss / TRAIN["accumulation"]).backward()
        if step == 0:
            for n, p in model.named_parameters():
                if p.requires_grad:
                    refs["grad." + peft_param_name(n)] = p.grad.detach().clone()
        opt.step()
        opt.zero_grad()
    for n, p in model.named_parameters():
        if p.requires_grad:
            refs["final." + peft_param_name(n)] = p.detach().clone()
    refs["losses"] = torch.tensor(losses, dtype=torch.float64)
    refs["hyper"] = torch.tensor([TRAIN["lr"], TRAIN["betas"][0], TRAIN["betas"][1], TRAIN["eps"],
                                  TRAIN["weight_decay"], TRAIN["steps"], TRAIN["accumulation"]],
                                 dtype=torch.float64)
    save_file({k: v.contiguous() for k, v in refs.items()}, os.path.join(folder, "reference.safetensors"))


def check(folder):
    """Loads a ttmoe-written adapter with PEFT and writes PEFT's logits."""
    base_dir = open(os.path.join(folder, "base_model.txt")).read().strip()
    ids = load_file(os.path.join(folder, "ids.safetensors"))["ids"]
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = peft.PeftModel.from_pretrained(base, folder).eval()
    for w in caught:  # PEFT only warns about keys its model wants and the file lacks
        if "missing adapter keys" in str(w.message):
            raise SystemExit(f"{folder}: {w.message}")
    if not isinstance(model.base_model, peft.LoraModel):
        raise SystemExit(f"{folder}: PEFT did not load a LoRA adapter")
    # Unexpected file keys are dropped silently by PEFT: every tensor of the file must be in the model.
    loaded = peft.get_peft_model_state_dict(model)
    saved = load_file(os.path.join(folder, "adapter_model.safetensors"))
    if set(loaded) != set(saved):
        raise SystemExit(f"{folder}: keys differ: file only {sorted(set(saved) - set(loaded))}, "
                         f"PEFT only {sorted(set(loaded) - set(saved))}")
    for k, v in saved.items():
        if not torch.equal(loaded[k].float(), v.float()):
            raise SystemExit(f"{folder}: {k} differs after loading")
    out = logits(model, ids)
    save_file({"logits": out}, os.path.join(folder, "peft_logits.safetensors"))
    print(f"{folder}: PEFT loaded the adapter, logits {tuple(out.shape)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--check")
    args = ap.parse_args()
    if args.check:
        return check(args.check)
    with open(__file__, "rb") as f:
        script_hash = hashlib.sha256(f.read()).hexdigest()
    for i, (name, (kind, cfg)) in enumerate(CASES.items()):
        folder = os.path.join(args.out, name)
        spec = json.dumps([kind, cfg, ADAPTERS, SCALES, TRAIN, transformers.__version__, peft.__version__, script_hash],
                          sort_keys=True)
        stamp = os.path.join(folder, "reference.safetensors")
        if os.path.exists(stamp) and open(os.path.join(folder, "case.json")).read() == spec:
            continue  # already generated from the same spec
        os.makedirs(folder, exist_ok=True)
        make_case(folder, kind, cfg, seed=300 + i)
        make_training_case(os.path.join(folder, "train"), kind, cfg, seed=300 + i)
        with open(os.path.join(folder, "case.json"), "w") as f:
            f.write(spec)
        print(f"{name}: {sorted(os.listdir(folder))}")


if __name__ == "__main__":
    main()
