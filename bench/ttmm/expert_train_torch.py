"""The PyTorch side of run_expert_train_bench.sh: one expert trained the way PEFT + transformers do it
(LlamaForCausalLM with the same config, get_peft_model with LoraConfig(r=64, lora_alpha=16, the seven
projections, no dropout), torch.optim.AdamW(lr 2e-4, betas (0.9, 0.999), eps 1e-8, weight decay
0.01) on the trainable parameters, loss = the model's shifted cross-entropy with labels = ids).
Prints torch_expert_train_step_s and torch_expert_train_tokens_per_s (median over the timed steps)."""
import argparse
import time

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("seq", 256), ("batch", 4), ("steps", 3), ("warmup", 1), ("threads", 2), ("hidden", 512),
                          ("layers", 4), ("vocab", 8192), ("rank", 64)]:
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--tokens", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=1376, num_hidden_layers=a.layers,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=a.seq,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    model = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    total = a.steps + a.warmup
    n = total * a.batch * a.seq
    if a.tokens:
        ids = np.fromfile(a.tokens, dtype="<i8", count=n)
    else:
        ids = np.random.default_rng(0).integers(0, a.vocab, size=n)
    ids = torch.from_numpy(ids.astype(np.int64)).view(total, a.batch, a.seq)
    times = []
    for s in range(total):
        t0 = time.perf_counter()
        loss = model(input_ids=ids[s], labels=ids[s]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    med = float(np.median(times[a.warmup:]))
    print(f"torch_expert_train_step_s: {med:.4f}")
    print(f"torch_expert_train_tokens_per_s: {a.batch * a.seq / med:.1f}")


if __name__ == "__main__":
    main()
