"""A draft model folder must share the target's tokenizer: refused with a clear error, by the
drafter and, before a session starts, by the commands that take --drafter."""
import pytest

from engine.cli.main import main
from engine.errors import ModelLoadError
from engine.loading import load_model
from engine.spec.draft_model import DraftModelDrafter, check_draft_folder
from tests.engine.loading.conftest import hf_tiny, save_hf_folder


@pytest.fixture
def draft_folder(tmp_path):
    return save_hf_folder(hf_tiny("llama"), tmp_path / "draft")


def test_a_draft_model_of_the_targets_tokenizer_drafts(draft_folder):
    target = load_model(str(draft_folder), dtype="fp32", device="cpu")
    check_draft_folder(str(draft_folder), target)
    assert DraftModelDrafter.from_path(str(draft_folder), target).name == "draft"


def test_a_draft_model_of_another_tokenizer_is_refused(draft_folder):
    target = load_model("tiny-test", dtype="fp32", device="cpu")  # a byte tokenizer, 320 ids
    says = r"draft model tokenizer differs from the target's \(265 vs 320 tokens"
    with pytest.raises(ModelLoadError, match=says):
        check_draft_folder(str(draft_folder), target)
    with pytest.raises(ModelLoadError, match=says):
        DraftModelDrafter.from_path(str(draft_folder), target)


def test_a_draft_model_of_as_many_tokens_encoding_otherwise_is_refused(tmp_path):
    folder = save_hf_folder(hf_tiny("llama", vocab_size=320), tmp_path / "draft")  # BPE, 320
    target = load_model("tiny-test", dtype="fp32", device="cpu")
    with pytest.raises(ModelLoadError, match=r"\(the same number of tokens, encoding text "
                                             r"differently\); a draft model must share"):
        check_draft_folder(str(folder), target)


@pytest.mark.parametrize("command", [
    ["run", "--headless", "--steps", "3", "--clock", "virtual"],
    ["generate", "--prompt", "hi", "--max-tokens", "4"]])
def test_the_commands_refuse_it_before_anything_runs(draft_folder, capsys, command):
    assert main([*command, "--model", "tiny-test", "--dtype", "fp32",
                 "--drafter", str(draft_folder)]) == 2
    err = capsys.readouterr().err
    assert f"--drafter {draft_folder}: {draft_folder}: draft model tokenizer differs" in err
    assert "engine error" not in err and "Traceback" not in err


def first_layer_drafts(target):
    """k greedy tokens of the target's first layer after `ids`, from an empty cache each: what
    a drafter with one layer must propose."""
    from engine.forward_batch import LaneInput
    from engine.kv_cache import PagedKVCache
    from engine.runner import ModelRunner
    from engine.spec.draft_model import first_layers

    layers = first_layers(target.model, 1)

    def fresh(ids, k):
        out = []
        for _ in range(k):
            runner = ModelRunner(layers, PagedKVCache(layers.config, 64, 16, layers.dtype,
                                                      layers.device))
            out.append(runner.forward([LaneInput(0, ids + out, 0, 1)]).greedy()[0][-1])
        return out
    return fresh


def test_the_self_drafter_follows_the_committed_text_through_rollbacks_and_pauses():
    """Each proposal is what the target's first layers predict from the lane's whole committed
    text, as a fresh cache computes it: after drafts partly accepted (rolled back), and after
    steps that drafted nothing (caught up, never stale)."""
    import random

    from engine.sequence import Sequence

    target = load_model("tiny-test", dtype="fp32", device="cpu")
    drafter = DraftModelDrafter.self_draft(target, num_blocks=64)
    fresh = first_layer_drafts(target)
    rng = random.Random(0)
    seq = Sequence(0, [rng.randrange(256) for _ in range(20)], 20)
    paused = rolled_back = 0
    for _ in range(16):
        k = rng.choice([0, 1, 3, 4])
        if k:
            [draft] = drafter.propose([seq], [k])
            assert draft.tokens == fresh(seq.token_ids, k)
            accepted = rng.randint(0, k)
            drafter.commit(seq, k, accepted)
            rolled_back += accepted < k
            seq.token_ids += draft.tokens[:accepted] + [rng.randrange(256)]
        else:
            paused += 1
            seq.token_ids += [rng.randrange(256) for _ in range(rng.randint(1, 3))]
    assert paused and rolled_back  # both were met


def test_a_lane_starts_with_the_draft_kv_of_the_prefix_it_shares_and_drafts_the_same():
    from engine.sequence import Sequence

    target = load_model("tiny-test", dtype="fp32", device="cpu")
    drafter = DraftModelDrafter.self_draft(target, num_layers=1, num_blocks=64)
    fresh = first_layer_drafts(target)
    system = list(range(40, 80))  # 40 tokens: two whole blocks of 16 and 8 more
    first, second = Sequence(0, system + [1, 2], 42), Sequence(1, system + [3, 4, 5], 43)
    [draft] = drafter.propose([first], [3])
    drafter.commit(first, 3, 1)
    first.token_ids += draft.tokens[:1] + [9]
    [again] = drafter.propose([second], [3])
    blocks = drafter.runner.kv.blocks
    assert blocks.block_table(1)[:2] == blocks.block_table(0)[:2]  # shared, not fed again
    assert blocks.block_table(1)[2] != blocks.block_table(0)[2]
    assert again.tokens == fresh(second.token_ids, 3)
    # both go on drafting what a fresh cache would, the first cut back into the shared blocks
    first.token_ids[20:] = [7, 7, 7]
    drafter.release(0)  # as the executor does when a lane's context is cut
    assert drafter.propose([first], [2])[0].tokens == fresh(first.token_ids, 2)
    second.token_ids += again.tokens[:2] + [5]
    drafter.commit(second, 3, 2)
    assert drafter.propose([second], [2])[0].tokens == fresh(second.token_ids, 2)
