"""Writes the `bench/report llm` models: Llama-3.2-1B shapes with random weights, as Hugging Face
folders (F32 and BF16, save_pretrained) and as the same weights in GGUF (F32 and BF16) for llama.cpp.
The weights are random because only speed is measured; a small init (std 0.02) keeps logits finite.
Prompts are token ids, so the vocabulary only has to be one the runtimes accept: the GGUF files carry
a SentencePiece-style list (the 256 byte tokens, <unk>/<s>/</s>, then placeholder pieces).

  python bench/llm/make_models.py OUT_DIR [--layers 16]

Writes OUT_DIR/{hf-f32,hf-bf16,llama-f32.gguf,llama-bf16.gguf} and OUT_DIR/done (a stamp holding the
settings); does nothing when the stamp already matches. With fewer layers the 1B widths are kept.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2048, 32, 8, 8192, 128256
ROPE_THETA, RMS_EPS, MAX_POS = 500000.0, 1e-5, 131072
# Llama 3.2's rope scaling (its config.json's rope_scaling block).
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def hf_config(layers):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=layers,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
                       max_position_embeddings=MAX_POS, rms_norm_eps=RMS_EPS, rope_theta=ROPE_THETA,
                       rope_scaling=dict(LLAMA3_ROPE), tie_word_embeddings=True, initializer_range=0.02,
                       bos_token_id=1, eos_token_id=2, hidden_act="silu")


def llama3_rope_factors():
    """Per-frequency divisors of Llama 3 rope scaling, as llama.cpp reads them (rope_freqs.weight):
    short wavelengths keep their frequency, long ones are divided by `factor`, the band between is
    interpolated smoothly."""
    dim = HIDDEN // HEADS
    factor, lo, hi, old = (LLAMA3_ROPE[k] for k in
                           ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"))
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * ROPE_THETA ** (i / dim)
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def rotary_to_interleaved(w, heads):
    """HF keeps each head's rotary pairs as two halves; GGUF (llama.cpp) interleaves them, so the q/k
    rows are permuted per head (the same permutation llama.cpp's converter applies)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    parts = hf.split(".")  # model.layers.N.<module>.<sub>.weight
    if parts[:2] != ["model", "layers"]:
        raise ValueError(f"make_models: unexpected tensor {hf}")
    return f"blk.{parts[2]}.{GGUF_NAMES['.'.join(parts[3:-1])]}.weight"


def write_gguf(path, state, layers, bf16):
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("llama-3.2-1b-shapes-random")
    w.add_context_length(MAX_POS)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if bf16 else gguf.LlamaFileType.ALL_F32)
    # Vocabulary: byte pieces, the three specials, then placeholders (prompts are ids, never text).
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    tokens += [f"tok{i}" for i in range(len(tokens), VOCAB)]
    types += [gguf.TokenType.NORMAL] * (VOCAB - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_tensor("rope_freqs.weight", llama3_rope_factors())
    for name, t in state.items():
        if name == "lm_head.weight":
            continue  # tied: llama.cpp falls back to token_embd
        if name.endswith("q_proj.weight"):
            t = rotary_to_interleaved(t, HEADS)
        elif name.endswith("k_proj.weight"):
            t = rotary_to_interleaved(t, KV_HEADS)
        if t.dim() == 1 or not bf16:  # norms stay F32, as llama.cpp's converter keeps them
            w.add_tensor(gguf_name(name), t.float().numpy())
        else:
            raw = t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)
            w.add_tensor(gguf_name(name), raw, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=16)
    args = ap.parse_args()
    if args.layers < 1:
        sys.exit(f"make_models: --layers must be >= 1, got {args.layers}")
    stamp = os.path.join(args.out, "done")
    want = json.dumps({"layers": args.layers, "version": 1})
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    os.makedirs(args.out, exist_ok=True)
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(hf_config(args.layers)).float().eval()
    model.save_pretrained(os.path.join(args.out, "hf-f32"))
    state = {k: v.detach() for k, v in model.state_dict().items()}
    write_gguf(os.path.join(args.out, "llama-f32.gguf"), state, args.layers, bf16=False)
    model = model.to(torch.bfloat16)
    model.save_pretrained(os.path.join(args.out, "hf-bf16"))
    write_gguf(os.path.join(args.out, "llama-bf16.gguf"), state, args.layers, bf16=True)
    with open(stamp, "w") as f:
        f.write(want)


if __name__ == "__main__":
    main()
