"""Fixtures of the API's tests."""
import json

import pytest

from tests.engine.loading.conftest import VOCAB, hf_tiny, save_hf_folder
from tests.engine.serve.serving import HERMES


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    """A random Qwen2 folder with the Hermes template (a real BPE tokenizer, tools offered)."""
    folder = save_hf_folder(hf_tiny("qwen2", max_position_embeddings=1024),
                            tmp_path_factory.mktemp("qwen2"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "chat_template": HERMES}))
    return folder


@pytest.fixture(scope="module")
def tagged_qwen2(tmp_path_factory):
    """A random Qwen2 folder with room in its vocabulary for serving.call_tokenizer's five tags."""
    return save_hf_folder(hf_tiny("qwen2", vocab_size=VOCAB + 5, max_position_embeddings=1024),
                          tmp_path_factory.mktemp("tagged_qwen2"))
