"""Peer sides of `bench/report llm` (issue 14), one process per call, `name: value` lines on stdout.

  python bench/llm/llm_peers.py transformers HF_DIR [--prompt 512]
      PyTorch + transformers prefill: one forward of the prompt (logits of its last position only,
      logits_to_keep=1, as generation does), torch.set_num_threads(2), inference_mode, after a short
      warm-up forward. Prints prefill_s.
  python bench/llm/llm_peers.py llamacpp GGUF [--prompt 512] [--new 128] [--cache 2048]
      llama.cpp through llama-cpp-python: n_threads = n_threads_batch = 2, n_batch = n_ubatch = the
      prompt (one batch), KV cache of `cache` positions; prefills the prompt with Llama.eval, then
      greedy-decodes `new` tokens one eval each (argmax of the last logits). Prints prefill_s,
      decode_tokens_per_s (wall time around the evals) and llama.cpp's own timers from
      llama_perf_context (prompt eval and eval ms) for reference.
The prompt ids are those of bench/llm/llm_decode.cpp: (1 + 7919 i) mod vocab.
"""
import argparse
import resource
import sys
import time


def prompt_ids(n, vocab):
    return [(1 + 7919 * i) % vocab for i in range(n)]


def run_transformers(args):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).eval()
    ids = torch.tensor([prompt_ids(args.prompt, model.config.vocab_size)])
    with torch.inference_mode():
        model(ids[:, :16], logits_to_keep=1)  # warm-up: first-call allocations and kernel choice
        t0 = time.perf_counter()
        out = model(ids, logits_to_keep=1)
        prefill = time.perf_counter() - t0
    if not torch.isfinite(out.logits).all():
        sys.exit("llm_peers: transformers logits are not finite")
    print(f"prefill_s: {prefill:.4f}")
    print(f"peak_rss_mb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


def run_llamacpp(args):
    import numpy as np
    import llama_cpp
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=args.cache, n_threads=args.threads,
                          n_threads_batch=args.threads, n_batch=args.prompt, n_ubatch=args.prompt,
                          logits_all=False, verbose=False)
    vocab = llm.n_vocab()
    ids = prompt_ids(args.prompt, vocab)

    def greedy():
        # Llama.eval keeps no logits without logits_all (its sampler reads them in C), so read the last
        # position's row straight from the context.
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))
        return int(np.argmax(row))

    llama_cpp.llama_perf_context_reset(llm.ctx)
    t0 = time.perf_counter()
    llm.eval(ids)
    tok = greedy()
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.new):
        llm.eval([tok])
        tok = greedy()
    decode = time.perf_counter() - t0
    perf = llama_cpp.llama_perf_context(llm.ctx)
    print(f"prefill_s: {prefill:.4f}")
    print(f"decode_tokens_per_s: {args.new / decode:.4f}")
    print(f"llamacpp_prompt_eval_ms: {perf.t_p_eval_ms:.1f}")
    print(f"llamacpp_eval_ms: {perf.t_eval_ms:.1f} ({perf.n_eval} evals)")
    print(f"peak_rss_mb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


def main():
    ap = argparse.ArgumentParser(description="peer sides of bench/report llm")
    ap.add_argument("side", choices=["transformers", "llamacpp"])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--cache", type=int, default=2048)
    args = ap.parse_args()
    (run_transformers if args.side == "transformers" else run_llamacpp)(args)


if __name__ == "__main__":
    main()
