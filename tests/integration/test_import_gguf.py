"""``posttrain import-gguf``: a GGUF file (written here from a tiny Llama the way llama.cpp's
converter lays one out: q/k rows permuted, tokenizer and chat template in the header) becomes a
model directory whose logits equal the original model's, with its tokenizer, chat template,
end-of-turn ids and provenance; what cannot be imported is refused and leaves nothing."""

import json
import shutil

import gguf  # the `real` extra, which dev includes
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.models import load_model, load_tokenizer
from posttrain.models.chat import stop_tokens
from posttrain.models.converters.gguf import RECORD, GGUFImportError, find_gguf, import_gguf

TEXT = "<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n"


def llama_cpp_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k layout: each head's rotary halves interleaved (transformers undoes it)."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def write_gguf(model_dir, file, eot: int | None = None) -> None:
    """``model_dir``'s Llama as an F32 GGUF file."""
    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    c = model.config
    w = gguf.GGUFWriter(str(file), "llama")
    w.add_name("tiny llama")
    w.add_license("apache-2.0")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_rope_dimension_count(c.head_dim)
    vocab = tok.backend_tokenizer.get_vocab(with_added_tokens=True)
    by_id = {i: t for t, i in vocab.items()}
    special = set(tok.all_special_ids)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([by_id.get(i, f"[UNUSED{i}]") for i in range(c.vocab_size)])
    w.add_token_types([3 if i in special else 1 if i in by_id else 5
                       for i in range(c.vocab_size)])
    w.add_token_merges([" ".join(m) for m in json.loads(
        tok.backend_tokenizer.to_str())["model"]["merges"]])
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    if eot is not None:
        w.add_eot_token_id(eot)
    w.add_chat_template(tok.chat_template)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for name, tensor in model.state_dict().items():
        array = tensor.float().numpy()
        if name == "model.embed_tokens.weight":
            w.add_tensor("token_embd.weight", array)
        elif name == "model.norm.weight":
            w.add_tensor("output_norm.weight", array)
        elif name.startswith("model.layers."):
            layer, part = name[len("model.layers."):].split(".", 1)
            part = part.removesuffix(".weight")
            if part == "self_attn.q_proj":
                array = llama_cpp_rows(array, c.num_attention_heads)
            elif part == "self_attn.k_proj":
                array = llama_cpp_rows(array, c.num_key_value_heads)
            w.add_tensor(f"blk.{layer}.{names[part]}.weight", array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def gguf_folder(tiny_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    write_gguf(tiny_dir, folder / "tiny-F32.gguf", eot=2)
    return folder


def test_the_imported_model_is_the_original(tiny_dir, gguf_folder, tmp_path):
    out = tmp_path / "imported"
    record = import_gguf(find_gguf(str(gguf_folder)), out)
    original, imported = load_model(tiny_dir), load_model(out)
    tok, tok_imported = load_tokenizer(tiny_dir), load_tokenizer(out)
    ids = tok(TEXT, return_tensors="pt").input_ids
    assert torch.equal(tok_imported(TEXT, return_tensors="pt").input_ids, ids)
    with torch.no_grad():
        # the same float32 weights and forward; the header keeps rms_norm_eps as float32
        # (1e-6 -> 9.99999997e-07), a 1e-14 relative change of each norm
        torch.testing.assert_close(imported(ids).logits, original(ids).logits,
                                   rtol=1e-5, atol=1e-6)
    messages = [{"role": "user", "content": "hi"}]
    assert tok_imported.apply_chat_template(messages, tokenize=False) == \
        tok.apply_chat_template(messages, tokenize=False)
    assert stop_tokens(tok_imported) == (tok.eos_token_id, 2)  # the file's eos, then its eot
    assert record["file"] == "tiny-F32.gguf" and record["license"] == "apache-2.0"
    assert json.loads((out / RECORD).read_text())["sha256"] == record["sha256"]
    assert not list(tmp_path.glob(".imported.importing-*"))


def test_the_command_imports_and_refuses_a_full_destination(gguf_folder, tmp_path):
    out = tmp_path / "m"
    result = CliRunner().invoke(app, ["import-gguf", str(gguf_folder / "tiny-F32.gguf"),
                                      str(out)])
    assert result.exit_code == 0, result.output
    assert "licence apache-2.0" in result.output and (out / "model.safetensors").is_file()
    again = CliRunner().invoke(app, ["import-gguf", str(gguf_folder), str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output


def test_what_cannot_be_imported_is_refused_and_leaves_nothing(gguf_folder, tmp_path):
    with pytest.raises(GGUFImportError, match="neither a .gguf file, a folder, nor an installed"):
        find_gguf("no_such_package_here")
    with pytest.raises(GGUFImportError, match="holds no .gguf file"):
        find_gguf(str(tmp_path))
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.gguf", "b.gguf"):
        shutil.copyfile(gguf_folder / "tiny-F32.gguf", two / name)
    with pytest.raises(GGUFImportError, match=r"several .gguf files .*--file picks one"):
        find_gguf(str(two))
    assert find_gguf(str(two), "b.gguf").file.name == "b.gguf"
    (tmp_path / "text.gguf").write_text("not a model")
    with pytest.raises(GGUFImportError, match="text.gguf is not a GGUF file it can read"):
        import_gguf(find_gguf(str(tmp_path / "text.gguf")), tmp_path / "out")
    broken = tmp_path / "broken.gguf"  # a header naming an architecture transformers lacks
    w = gguf.GGUFWriter(str(broken), "no-such-arch")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFImportError, match="'no-such-arch'"):
        import_gguf(find_gguf(str(broken)), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.importing-*"))
