"""Build a tiny model and a byte-level BPE tokenizer locally (no hub).

``build_tiny(out_dir, preset, architecture=...)`` writes a directory that
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load:
safetensors weights, config, tokenizer and a ChatML chat template. The architecture is a real
Hugging Face one (Llama 3, Qwen2, Qwen3, Qwen3-MoE, Gemma 3) at the preset's sizes, randomly
initialised. Digits are always single tokens, so arithmetic is learnable.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    Qwen3MoeConfig,
)
from transformers.utils import logging as hf_logging

from posttrain.models.architectures.attn_res import AttnResConfig
from posttrain.models.presets import ARCHITECTURES, PRESETS, TinyPreset
from posttrain.models.quick_tokens import add_quick_tokens, has_quick_tokens, with_quick_tokens

PAD, EOS, BOS = "<|pad|>", "<|im_end|>", "<|endoftext|>"
IM_START = "<|im_start|>"
SPECIAL_TOKENS = [PAD, BOS, IM_START, EOS]
EXTRA_TOKENS = ["<answer>", "</answer>", "<think>", "</think>", "<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\nTools:' }}"
    "{% for tool in tools %}{{ ' ' + tool.function.name + '(' }}"
    "{{ tool.function.parameters.properties | list | join(', ') }}{{ ')' }}{% endfor %}"
    "{{ '\nCall: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\n' }}"
    "{% endif %}"
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}"
    "{% if message.get('reasoning_content') %}"
    "{{ '<think>' + message['reasoning_content'] + '</think>' }}{% endif %}"
    "{{ message['content'] }}"
    "{% for call in message.get('tool_calls') or [] %}{{ '<tool_call>' + "
    "{'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson"
    " + '</tool_call>' }}{% endfor %}"
    "{{ '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


_WORDS = (
    "what is the answer compute calculate solve find value of sum difference product "
    "plus minus times please give your final in tags think step by a an and or to it "
    "user assistant system you are helpful model question result number equals so we "
    "first then next add subtract multiply carry borrow digit digits ones tens hundreds"
).split()


_TOOL_ARGS = (("calculate", "expression"), ("search", "query"))


def _corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
        a, b = rng.randint(0, 9999), rng.randint(0, 9999)
        op = rng.choice("+-*")
        lines.append(f"{words.capitalize()}: {a}{op}{b}? <answer>{a}</answer>\n{words}.")
    for _ in range(n_lines // 4):  # tool calls in the Hermes JSON format
        name, arg = rng.choice(_TOOL_ARGS)
        value = (rng.choice(_WORDS) if arg == "query"
                 else f"{rng.randint(0, 999)}*{rng.randint(0, 99)}")
        lines.append(f'{{"name": "{name}", "arguments": {{"{arg}": "{value}"}}}}')
    return lines


def build_tokenizer(vocab_size: int = 512, seed: int = 0) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer (digits split individually) on generated text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(EXTRA_TOKENS), special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(4000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, additional_special_tokens=[IM_START])
    fast.add_tokens(EXTRA_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(architecture: str, p: TinyPreset, tokenizer, max_positions: int,
                attn_res: str | None = None, attn_res_block: int = 2) -> PretrainedConfig:
    """``architecture``'s Hugging Face config at preset ``p``'s sizes, tied embeddings. Qwen3
    and Gemma 3 normalise q and k per head; Qwen3-MoE routes each token to 2 of 4 experts of
    half the dense width in every layer; Gemma 3 alternates sliding-window and global layers."""
    common = dict(
        vocab_size=len(tokenizer), hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size, num_hidden_layers=p.num_layers,
        num_attention_heads=p.num_heads, num_key_value_heads=p.num_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id)
    head_dim = p.hidden_size // p.num_heads
    if attn_res is not None:
        if architecture != "llama":
            raise ValueError("attn_res is a variant of the llama architecture")
        return AttnResConfig(attn_res=attn_res, attn_res_block=attn_res_block, **common)
    if architecture == "llama":
        return LlamaConfig(**common)
    if architecture == "qwen2":
        return Qwen2Config(**common, use_sliding_window=False)
    if architecture == "qwen3":
        return Qwen3Config(**common, head_dim=head_dim)
    if architecture == "qwen3_moe":
        return Qwen3MoeConfig(**common, head_dim=head_dim, num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=p.intermediate_size // 2,
                              decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
    if architecture == "gemma3":
        return Gemma3TextConfig(**common, head_dim=head_dim, query_pre_attn_scalar=head_dim,
                                sliding_window=max_positions // 4)
    raise ValueError(f"unknown architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")


def build_tiny(
    out_dir: str | Path, preset: str = "micro", seed: int = 0, max_positions: int = 512,
    architecture: str = "llama", attn_res: str | None = None, attn_res_block: int = 2,
    quick_tokens: Sequence[str] = (),
) -> Path:
    """Create model + tokenizer for ``preset`` in ``architecture`` (with Attention Residuals:
    ``attn_res`` ``full`` or ``block``) in ``out_dir`` and return the directory. The
    ``quick_tokens`` are added afterwards (``add_quick_tokens``): the model is the same but
    for their rows."""
    if preset not in PRESETS:
        raise ValueError(f"unknown tiny preset {preset!r}; known: {', '.join(PRESETS)}")
    p = PRESETS[preset]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(p.vocab_size, seed=seed)
    config = tiny_config(architecture, p, tokenizer, max_positions, attn_res, attn_res_block)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    add_quick_tokens(tokenizer, model, quick_tokens)
    hf_logging.disable_progress_bar()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def starting_model(into: Path, seed: int, path: str | None, preset: str | None,
                   quick_tokens: Sequence[str] = (), **build: Any
                   ) -> tuple[Path, Callable[[], object] | None]:
    """Where a run's starting model is (the ``model`` section's values) and what writes it
    there first (None: nothing to write): ``preset`` built into ``into`` (``build_tiny`` with
    ``build``), or the model at ``path``, copied into ``into`` with the ``quick_tokens`` its
    tokenizer lacks."""
    if path is None:
        return into, lambda: build_tiny(into, preset, seed=seed, quick_tokens=quick_tokens,
                                        **build)
    if not quick_tokens or has_quick_tokens(path, quick_tokens):
        return Path(path), None
    return into, lambda: with_quick_tokens(path, into, quick_tokens)
