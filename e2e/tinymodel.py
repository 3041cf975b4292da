"""Write a tiny Qwen2-architecture model directory that vLLM serves with `--load-format dummy`.

Nothing is downloaded: the config is written here and the tokenizer is a byte-level BPE trained with the
`tokenizers` package on a corpus this script generates, so the same inputs always give the same files. The
weights are left to vLLM's dummy loader (random values): the model talks nonsense, but every serving path
(tokenizer, chat template, prefill, KV transfer, decode, detokenizer) runs for real.

Used by the real-engine tests (tests/real/) and meant to be run in the engine image the same way:
    python e2e/tinymodel.py OUTPUT_DIR
It needs only `tokenizers` (which vLLM depends on); it does not import the operator.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

# Sizes vLLM CPU serves quickly: one attention head of 64 (a head size its CPU kernels support), two layers.
HIDDEN = 128
LAYERS = 2
HEADS = 2
HEAD_DIM = 64
INTERMEDIATE = 256
VOCAB_TARGET = 2048
MAX_POSITIONS = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_SYLLABLE_TEXT = (
    "ka ri to mu se na lo pe vi da ne so ta mi ru ko be la zu fi an el in on un ar er or is as es os al il ol ur"
)
_SYLLABLES = _SYLLABLE_TEXT.split()


def corpus(lines: int = 4000) -> list[str]:
    """Deterministic English-ish text: words built from syllables by a fixed linear congruential sequence."""
    state = 12345
    out: list[str] = []
    for _ in range(lines):
        words = []
        for _ in range(12):
            state = (state * 1103515245 + 12345) % (1 << 31)
            length = 1 + state % 3
            word = ""
            for _ in range(length):
                state = (state * 1103515245 + 12345) % (1 << 31)
                word += _SYLLABLES[state % len(_SYLLABLES)]
            words.append(word)
        out.append(" ".join(words) + ".")
    out.append("The quick brown fox jumps over the lazy dog. Hello, world! 0123456789")
    return out


def build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    return int(tokenizer.get_vocab_size())


def write_model(out: Path) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos = tok.token_to_id("<|im_end|>")
    bos = tok.token_to_id("<|endoftext|>")
    padded_vocab = (vocab + 63) // 64 * 64
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": padded_vocab,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "use_sliding_window": False,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos, "eos_token_id": eos}, indent=2, sort_keys=True) + "\n"
    )
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    return config


def digest(out: Path) -> str:
    h = hashlib.sha256()
    for name in sorted(p.name for p in out.iterdir() if p.is_file()):
        h.update(name.encode() + b"\0" + (out / name).read_bytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="directory to write (created if missing)")
    args = parser.parse_args(argv)
    write_model(args.output)
    print(f"{args.output} sha256={digest(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
