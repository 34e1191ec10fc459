"""Tiny random decoders of every supported family, built in code (no download)."""

import torch
import transformers as tf

COMMON = dict(
    vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
    bos_token_id=1, eos_token_id=2, pad_token_id=0,
)  # fmt: skip

CONFIGS = {
    "llama": lambda: tf.LlamaConfig(**COMMON, num_key_value_heads=2),
    "mistral": lambda: tf.MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=3),
    "qwen2": lambda: tf.Qwen2Config(
        **COMMON, num_key_value_heads=2, use_sliding_window=True, sliding_window=3, max_window_layers=2
    ),
    "qwen3": lambda: tf.Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=8),
    "gemma3_text": lambda: tf.Gemma3TextConfig(
        **COMMON, num_key_value_heads=2, head_dim=8, sliding_window=3, query_pre_attn_scalar=8
    ),
    "phi3": lambda: tf.Phi3Config(**COMMON, num_key_value_heads=2),
    "olmo": lambda: tf.OlmoConfig(**COMMON, num_key_value_heads=2),
    "olmo2": lambda: tf.Olmo2Config(**COMMON, num_key_value_heads=2),
    "gpt2": lambda: tf.GPT2Config(
        vocab_size=96, n_embd=32, n_layer=4, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2
    ),
}


def tiny_decoder(model_type: str, attn: str = "sdpa", dtype: torch.dtype = torch.float32, seed: int = 0):
    """A seeded random bare decoder (AutoModel) of ``model_type``, in eval mode."""
    config = CONFIGS[model_type]()
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = tf.AutoModel.from_config(config, dtype=dtype, attn_implementation=attn)
    # Random init leaves norms at one and biases at zero; perturb everything so no layer is trivial.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


WORDS = (
    "the a cat dog sat on mat ran in park bank money river loan paris london is city capital of france england "
    "i you we like love hate eat food good bad very not and or but what where when why how"
).split()


def tiny_tokenizer(bos: bool = True):
    """A word-level fast tokenizer over WORDS (ids 4..), built in code; ``bos`` gives it a BOS token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {w: i + 4 for i, w in enumerate(WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="</s>", bos_token="<s>" if bos else None
    )


CHAT_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}{% if add_generation_prompt %}<s> {% endif %}"
)


def tiny_chat_model(seed: int = 0):
    """A seeded random LlamaForCausalLM over the test tokenizer's words, and that tokenizer with a chat template."""
    tok = tiny_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    config = CONFIGS["llama"]()
    config.vocab_size = len(tok)
    torch.manual_seed(seed)
    lm = tf.LlamaForCausalLM(config)
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return lm.eval(), tok
