"""Write a tiny Qwen3 model directory (config, tokenizer, chat template; no weights) for `--load-format dummy`.

Run at image build time with the image's own transformers and tokenizers, so the files match the versions that
read them and nothing is downloaded. The tokenizer is a byte-level BPE trained here on the text below: any UTF-8
text encodes, and every token id decodes to text. Usage: python make_tiny_model.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Training is multi-threaded by default; one thread makes the merges, and so the vocabulary, reproducible.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoConfig, AutoTokenizer, GenerationConfig, Qwen3Config  # noqa: E402

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_TARGET = 1024
# ChatML, as Qwen models use; `content` is a string after vLLM's content-format handling.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TEXT = """
Prefill computes the key and value cache of the prompt; decode loads it and generates one token at a time.
A disaggregated deployment runs the two phases in separate pools of engines, so each can be sized for its work.
The router sends a request to a prefill engine first, then to a decode engine with the transfer parameters.
Hello, how are you today? I am fine, thank you. What is the capital of France? The capital of France is Paris.
The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: , . ; : ! ?
Kubernetes schedules pods onto nodes; a deployment keeps replicas running; a service gives them a stable name.
"""


def corpus() -> list[str]:
    words = TEXT.split()
    lines = [line for line in TEXT.strip().splitlines() if line]
    # Rotations of the word list give the trainer enough pairs to learn merges up to the target size.
    return lines + [" ".join(words[i:] + words[:i]) for i in range(len(words))]


def train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


def write_model(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    tokenizer.save(str(out / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": 2048,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "unk_token": None,
                "clean_up_tokenization_spaces": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
        + "\n"
    )
    # Small but shaped like a real model for vLLM's CPU kernels: head size 64, grouped-query attention, bf16.
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        dtype="bfloat16",
    )
    config.architectures = ["Qwen3ForCausalLM"]
    config.save_pretrained(out)
    GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
    ).save_pretrained(out)


def check_model(out: Path) -> None:
    """Load the files the way vLLM does and fail the build if any part would not serve text."""
    config = AutoConfig.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    if len(tokenizer) != config.vocab_size:
        raise SystemExit(f"tokenizer has {len(tokenizer)} tokens, config.vocab_size is {config.vocab_size}")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello, how are you?"}], tokenize=False, add_generation_prompt=True
    )
    if not str(prompt).endswith("<|im_start|>assistant\n"):
        raise SystemExit(f"chat template rendered {prompt!r}")
    text = "The capital of France is Paris. Ünïcode ✓"
    if tokenizer.decode(tokenizer.encode(text)) != text:
        raise SystemExit("tokenizer does not round-trip text")
    every_id = tokenizer.decode(list(range(config.vocab_size)))
    if not every_id:
        raise SystemExit("decoding the whole vocabulary gave no text")
    print(f"tiny model at {out}: vocab {config.vocab_size}, {config.num_hidden_layers} layers, {config.dtype}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    target = Path(sys.argv[1])
    write_model(target)
    check_model(target)
