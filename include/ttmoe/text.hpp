#pragma once
// ttmoe text: tokenizers for language models. Hugging Face tokenizer.json (byte-level BPE as Llama 3
// and Qwen2.5 ship it, WordPiece as BERT models ship it), SentencePiece tokenizer.model (Llama 2),
// a byte-level BPE trainer, and load_tokenizer() for a model folder. Link ttmoe::text (PCRE2,
// utf8proc and, when found, libsentencepiece); the core umbrella ttmoe.hpp does not include this.

#include "ttmoe/text/added_tokens.hpp"
#include "ttmoe/text/bpe.hpp"
#include "ttmoe/text/bpe_trainer.hpp"
#include "ttmoe/text/byte_level.hpp"
#include "ttmoe/text/decoder.hpp"
#include "ttmoe/text/error.hpp"
#include "ttmoe/text/hf_tokenizer.hpp"
#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/load.hpp"
#include "ttmoe/text/normalizer.hpp"
#include "ttmoe/text/post_processor.hpp"
#include "ttmoe/text/pre_tokenizer.hpp"
#include "ttmoe/text/regex.hpp"
#include "ttmoe/text/sentencepiece.hpp"
#include "ttmoe/text/tokenizer.hpp"
#include "ttmoe/text/unicode.hpp"
#include "ttmoe/text/utf8.hpp"
#include "ttmoe/text/vocab.hpp"
#include "ttmoe/text/wordpiece.hpp"
