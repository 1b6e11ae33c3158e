// ttmm: test-time model merging (the TTMM paper) with a Llama-family base model from a Hugging Face
// folder.
//
//   ttmm train --model DIR --corpus PATH --clusters K --out STORE [--embedder lm|DIR --rank 64
//              --alpha 16 --lr 2e-4 --weight-decay 0.01 --batch 4 --epochs 1 --max-tokens 1024
//              --text-field text --id-field F --seed S]
//       one LoRA expert per cluster of the corpus's documents, written to the expert store STORE
//       (train.hpp). Alone, or sharded over processes:
//         mpirun -np N ttmm train ...            (as root: scripts/ttmm-mpirun.sh N ttmm train ...)
//       A run that was killed is finished by running the same command again.
//   ttmm base-model --corpus PATH --out DIR [--steps S --hidden H --layers L --context T ...]
//       a small Llama and its BPE tokenizer trained from scratch on a corpus (`llm train`'s recipe),
//       to try `ttmm train` without downloading a model.
//   ttmm eval --model DIR --experts STORE --eval PATH [--train PATH --methods base,finetune,ttmm,ensemble,ttt]
//       the paper's comparison table on held-out documents (eval.hpp).
//   ttmm generate --model DIR --experts STORE --prompt TEXT
//       streams a continuation with the merged experts, printing which were chosen (generate.hpp).
//   ttmm   (no argument) the embedded default: Python code and prose from Debian packages, base model,
//       experts, choices on validation, the table and a Figure-1 PNG, cached (default_run.hpp).
//
// Every failure is one "ttmm ...: error: ..." line on stderr and exit status 1.

#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "ttmoe/ttmoe.hpp"  // the CPU backend the model runs on
#include "../llm/train.hpp"
#include "ranks.hpp"
#include "train.hpp"
#include "default_run.hpp"
#include "eval.hpp"
#include "generate.hpp"

int main(int argc, char** argv) {
  ttmm_example::Ranks ranks(argc, argv);
  CLI::App app{"ttmm: test-time model merging of LoRA experts (TTMM)"};
  app.require_subcommand(0, 1);

  ttmm_example::TrainOptions o;
  CLI::App* t = app.add_subcommand("train", "train one LoRA expert per cluster of a corpus into an expert store");
  t->add_option("--model", o.model, "Hugging Face folder of the base model")->required()->check(CLI::ExistingDirectory);
  t->add_option("--embedder", o.embedder, "φ: 'lm' (the base model's mean-pooled last hidden states) or a sentence-encoder folder")
      ->capture_default_str();
  t->add_option("--corpus", o.corpus, "a folder of text files or a .jsonl file")->required();
  t->add_option("--text-field", o.corpus_options.text_field, "JSONL: the field holding the text")->capture_default_str();
  t->add_option("--id-field", o.corpus_options.id_field, "JSONL: the field holding the document id");
  t->add_option("--clusters", o.clusters, "K, the number of clusters and experts")->required()->check(CLI::PositiveNumber);
  t->add_option("--out", o.out, "the expert store folder")->required();
  t->add_option("--rank", o.expert.rank, "LoRA rank r")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--alpha", o.expert.alpha, "LoRA alpha (scale alpha / r)")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--lr", o.expert.adam.lr, "AdamW learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--weight-decay", o.expert.adam.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  t->add_option("--batch", o.expert.batch, "documents per step")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--epochs", o.expert.epochs, "passes over each cluster")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--max-tokens", o.max_tokens, "each document's first tokens used (capped at the model's context)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 30));
  t->add_option("--seed", o.expert.seed, "expert initialisation and document order seed")->capture_default_str();

  llm_example::TrainOptions bo;
  bo.steps = 200;
  CLI::App* b = app.add_subcommand("base-model", "train a small Llama and its BPE tokenizer from scratch on a corpus");
  b->add_option("--corpus", bo.corpus, "a UTF-8 text file or a folder of them")->required()->check(CLI::ExistingPath);
  b->add_option("--out", bo.out, "the Hugging Face folder to write")->required();
  b->add_option("--vocab-size", bo.vocab_size, "BPE vocabulary")->capture_default_str();
  b->add_option("--hidden", bo.hidden, "hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--layers", bo.layers, "decoder layers")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--heads", bo.heads, "attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--kv-heads", bo.kv_heads, "key/value heads")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--intermediate", bo.intermediate, "MLP width")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--context", bo.context, "the model's context")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--steps", bo.steps, "optimiser steps")->capture_default_str()->check(CLI::PositiveNumber);
  b->add_option("--seed", bo.seed, "initialisation seed")->capture_default_str();

  ttmm_example::EvalOptions eo;
  CLI::App* ev = app.add_subcommand("eval", "compare base, multitask fine-tune, TTMM, ensemble and TTT on held-out documents");
  ev->add_option("--model", eo.model, "Hugging Face folder of the base model")->required()->check(CLI::ExistingDirectory);
  ev->add_option("--experts", eo.experts, "the expert store")->required();
  ev->add_option("--eval", eo.eval, "held-out documents: a folder of text files or a .jsonl file")->required();
  ev->add_option("--train", eo.train, "the training documents (finetune and ttt need them)");
  ev->add_option("--finetuned", eo.finetuned, "folder of the multitask adapter: reused when there, else trained and saved");
  ev->add_option("--methods", eo.methods, "comma-separated: base, finetune, ttmm, ensemble, ttt")->capture_default_str();
  ev->add_option("--beta", eo.selection.beta, "selection temperature β")->capture_default_str()->check(CLI::PositiveNumber);
  ev->add_option("--tau", eo.selection.tau, "selection threshold τ")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  ev->add_option("--prompt-tokens", eo.prompt_tokens, "prompt length (0: 50 for prose, 200 for code)")->capture_default_str();
  ev->add_option("--neighbours", eo.ttt.neighbours, "TTT: N nearest training documents")->capture_default_str()->check(CLI::PositiveNumber);
  ev->add_option("--ttt-lr", eo.ttt.lora.adam.lr, "TTT learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  ev->add_option("--max-documents", eo.max_documents, "evaluate the first N documents (0: all)")->capture_default_str();
  ev->add_option("--cost-prompts", eo.cost_prompts, "prompts timed for the cost column")->capture_default_str();

  ttmm_example::GenerateOptions go;
  CLI::App* g = app.add_subcommand("generate", "generate from a prompt with the experts TTMM merges for it");
  g->add_option("--model", go.model, "Hugging Face folder of the base model")->required()->check(CLI::ExistingDirectory);
  g->add_option("--experts", go.experts, "the expert store")->required();
  g->add_option("--prompt", go.prompt, "the prompt text")->required();
  g->add_option("--max-new-tokens", go.max_new_tokens, "tokens to generate")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--beta", go.selection.beta, "selection temperature β")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--tau", go.selection.tau, "selection threshold τ")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  g->add_option("--temperature", go.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  g->add_option("--merge-arithmetic", go.merge_arithmetic,
                "dense merge: f32, or bf16 (BF16 products, F32 sums, for a BF16 checkpoint's weights)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, ttmoe::ttmm::MergeArithmetic>{
          {"f32", ttmoe::ttmm::MergeArithmetic::f32}, {"bf16", ttmoe::ttmm::MergeArithmetic::bf16_products}}));

  ttmm_example::DefaultOptions dopt;
  app.add_option("--cache", dopt.cache, "default run: the cache folder (else $TTMOE_CACHE_DIR or ~/.cache/ttmoe)");
  app.add_option("--figure", dopt.figure, "default run: where to write the Figure-1 PNG");
  app.add_option("--docs", dopt.train, "default run: training documents per corpus")->capture_default_str();
  app.add_option("--val-docs", dopt.val, "default run: validation documents per corpus")->capture_default_str();
  app.add_option("--test-docs", dopt.test, "default run: test documents per corpus")->capture_default_str();
  app.add_option("--base-steps", dopt.base_steps, "default run: base-model training steps")->capture_default_str();
  app.add_option("--clusters", dopt.clusters, "default run: experts")->capture_default_str();
  app.add_option("--neighbours", dopt.neighbours, "default run: TTT's N")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ranks.leader() ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
  }
  if (t->parsed()) return ttmm_example::run_train(ranks, o);
  if (ev->parsed()) return ranks.leader() ? ttmm_example::run_eval(eo) : 0;
  if (g->parsed()) return ranks.leader() ? ttmm_example::run_generate(go) : 0;
  if (!b->parsed()) return ttmm_example::run_default(ranks, dopt);
  try {
    if (!ranks.leader()) return 0;  // one process writes the folder
    return llm_example::run_train(bo);
  } catch (const std::exception& e) {
    std::cerr << "ttmm base-model: error: " << e.what() << "\n";
    return 1;
  }
}
