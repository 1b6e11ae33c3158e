#!/usr/bin/env python3
"""Loads an HF folder written by ttmoe's save_llama with transformers and runs it.

usage: hf_load_check.py DIR   (reads DIR/ids.safetensors "ids" [B, T] int64, writes
DIR/hf_logits.safetensors "logits" [B, T, V] float32 computed in float32). Any failure to load
(unknown config field, missing or mis-shaped tensor) is a non-zero exit with transformers' message.
"""
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file


def main():
    folder = sys.argv[1]
    ids = load_file(f"{folder}/ids.safetensors")["ids"]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().contiguous()
    save_file({"logits": logits}, f"{folder}/hf_logits.safetensors")
    print(f"{folder}: {type(model).__name__} loaded, logits {tuple(logits.shape)}")


if __name__ == "__main__":
    main()
