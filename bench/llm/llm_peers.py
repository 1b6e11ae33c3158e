"""Peer sides of `bench/report llm` (issue 14), one process per call, `name: value` lines on stdout.

  python bench/llm/llm_peers.py transformers HF_DIR [--prompt 512]
      PyTorch + transformers prefill: one forward of the prompt (logits of its last position only,
      logits_to_keep=1, as generation does), torch.set_num_threads(2), inference_mode: one untimed
      warm-up forward of the whole prompt, then the median of --prefill-runs (default 3) timed ones.
      Prints prefill_s.
  python bench/llm/llm_peers.py llamacpp GGUF [--prompt 512] [--new 128] [--cache 2048]
      llama.cpp through llama-cpp-python: n_threads = n_threads_batch = 2, n_batch = n_ubatch = the
      prompt (one batch), KV cache of `cache` positions; prefills the prompt with Llama.eval (one
      untimed warm-up, then the median of --prefill-runs timed prefills from an empty cache), then
      greedy-decodes `new` tokens one eval each (argmax of the last logits). Prints prefill_s,
      decode_tokens_per_s (wall time around the evals) and llama.cpp's own timers from
      llama_perf_context (prompt eval and eval ms) for reference.
The prompt ids are those of bench/llm/llm_decode.cpp: (1 + 7919 i) mod vocab. Every side (ttmoe's
bench_llm_decode too) warms up with one full-size prefill and reports the median of 3 timed ones.
"""
import argparse
import resource
import statistics
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
        # Warm-up at the full prompt: the first call at a new shape pays allocations and oneDNN's
        # primitive creation (a 16-token warm-up left the timed 512-token call 10-40% slower).
        times = []
        for _ in range(1 + args.prefill_runs):
            t0 = time.perf_counter()
            out = model(ids, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
        prefill = statistics.median(times[1:]) if args.prefill_runs > 0 else times[0]
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

    # One untimed full-size warm-up, then `prefill_runs` timed prefills from an empty cache (reset:
    # eval drops the cache's entries past n_tokens = 0); the decode continues the last one.
    times = []
    for r in range(1 + args.prefill_runs):
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        llm.eval(ids)
        tok = greedy()
        times.append(time.perf_counter() - t0)
    prefill = statistics.median(times[1:]) if args.prefill_runs > 0 else times[0]
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
    ap.add_argument("--prefill-runs", type=int, default=3,
                    help="timed prefills after one untimed full-size warm-up (their median is prefill_s)")
    args = ap.parse_args()
    if args.prefill_runs < 0:
        ap.error("--prefill-runs must be >= 0 (0: time the cold first prefill)")
    (run_transformers if args.side == "transformers" else run_llamacpp)(args)


if __name__ == "__main__":
    main()
