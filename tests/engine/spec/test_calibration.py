import dataclasses
import hashlib
import json
import math
import random
from types import SimpleNamespace

import pytest
import torch

from engine.config import PRESETS
from engine.errors import SwarmscopeError
from engine.loading import load_model
from engine.model import LlamaModel
from engine.spec import calibration as cal
from engine.spec.calibration import Calibration


def test_budget_is_the_last_n_within_eps_of_t1():
    c = Calibration(points=[(1, 10.0), (2, 10.2), (4, 10.5), (8, 10.9), (16, 14.0), (32, 20.0)])
    assert c.budget == 8  # t(9) = 10.9 + 3.1/8 > 11.0 fails; t(8) = 10.9 fits
    c.eps = 0.5
    assert c.budget == 18  # t(18) = 14 + 6 * 2/16 = 14.75 <= 15


def test_budget_is_where_a_scan_from_one_first_exceeds_the_limit_on_noisy_curves():
    import random
    rng = random.Random(3)
    for _ in range(200):
        ns = sorted(rng.sample(range(2, 70), rng.randint(1, 12)))
        c = Calibration(points=[(1, 10.0)] + [(n, rng.uniform(8.0, 30.0)) for n in ns],
                        eps=rng.choice((0.0, 0.1, 0.5)))
        limit, scan = (1 + c.eps) * c.t_ms(1), 1
        while scan < ns[-1] and c.t_ms(scan + 1) <= limit:
            scan += 1
        assert c.budget == scan
        assert all(c.t_ms(n) <= c.t_ms(n + 0.5) + 1e-9 for n in range(1, 80))


def test_t_interpolates_extrapolates_and_never_decreases():
    c = Calibration(points=[(1, 10.0), (4, 9.0), (8, 12.0), (16, 20.0)])
    assert c.t_ms(1) == c.t_ms(4) == 9.5  # a dip is pooled with the point before it
    assert c.t_ms(12) == pytest.approx(16.0)
    assert c.t_ms(24) == pytest.approx(30.0)  # past the last point: in proportion to N
    flat_end = Calibration(points=[(1, 10.0), (8, 12.0), (16, 11.0)])
    assert flat_end.t_ms(32) == pytest.approx(23.0)  # a flat last segment does not make depth free


def test_the_fit_is_the_least_squares_nondecreasing_one():
    assert cal.nondecreasing([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert cal.nondecreasing([3.0, 2.0, 1.0]) == [2.0, 2.0, 2.0]
    rng = random.Random(5)
    for _ in range(200):
        values = [rng.uniform(0, 10) for _ in range(rng.randint(1, 12))]
        fit = cal.nondecreasing(values)
        assert all(a <= b + 1e-12 for a, b in zip(fit, fit[1:]))
        assert sum(fit) == pytest.approx(sum(values))  # pooling keeps every run's mean
        assert cal.nondecreasing(fit) == pytest.approx(fit)
        # no nondecreasing neighbour of the fit is closer to the points
        error = sum((f - v) ** 2 for f, v in zip(fit, values))
        for i in range(len(fit)):
            for step in (-1e-3, 1e-3):
                moved = fit[:i] + [fit[i] + step] + fit[i + 1:]
                if all(a <= b for a, b in zip(moved, moved[1:])):
                    assert sum((f - v) ** 2 for f, v in zip(moved, values)) >= error - 1e-12


def test_dict_round_trip_and_dummy():
    c = Calibration.make_dummy(knee=8)
    assert Calibration.from_dict(c.to_dict()) == c
    assert c.budget == 9  # t(9) = 26.25 + 4/4 ms, interpolated on the way to N=12, still fits 27.5


def test_cache_path_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    c = Calibration.make_dummy()
    path = cal.save(c, "dummy")
    assert path.parent == tmp_path / "calibration"
    assert cal.load_cached("dummy", "dummy", "none", eps=0.2).points == c.points


def test_a_cache_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Written beside and renamed over: a second window never reads half of one, and a full
    disk leaves the old file and no partial one."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    path = cal.save(Calibration.make_dummy(), "dummy")
    before = path.read_text()

    def full(self, text):
        self.open("w").write(text[:10])  # what a full disk leaves: a part
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cal.Path, "write_text", full)
    with pytest.raises(OSError):
        cal.save(Calibration.make_dummy(t1_ms=99.0), "dummy")
    assert path.read_text() == before and [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_cache_that_cannot_be_written_or_read_is_said_not_a_crash(tmp_path, monkeypatch):
    """A cache under a file (read-only or full alike): the measured curve still serves the
    session, and the progress says it was not cached; an unreadable cache file is a message."""
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "a-file" / "cache"))
    loaded = load_model("tiny-test", dtype="fp32")
    heard = []
    monkeypatch.setattr(cal, "measure", lambda *a, **k: Calibration.make_dummy())
    assert cal.calibrate_or_load(loaded, progress=heard.append) == Calibration.make_dummy()
    assert "NOT cached" in heard[-1] and "Not a directory" in heard[-1]
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    cal.cache_path("cpu", cal.model_key(loaded), "fp32",  # a folder there
                   torch.get_num_threads()).mkdir(parents=True)
    with pytest.raises(SwarmscopeError, match="unreadable calibration"):
        cal.calibrate_or_load(loaded)


def test_a_cpu_calibration_is_cached_per_thread_count(tmp_path, monkeypatch, restore_threads):
    """One thread's t(N) is not two threads': each count is measured and cached apart, and a
    count measured before is loaded again, its thread count with it."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    loaded = load_model("tiny-test", dtype="fp32")
    measured = []

    def measure(*args, threads=None, **kwargs):
        measured.append(threads)
        return dataclasses.replace(Calibration.make_dummy(t1_ms=float(threads)), device="cpu", dtype="fp32",
                                   threads=threads)

    monkeypatch.setattr(cal, "measure", measure)
    for threads in (1, 2, 1):
        torch.set_num_threads(threads)
        found = cal.calibrate_or_load(loaded)
        assert (found.threads, found.t_ms(1), found.hardware) == \
            (threads, threads, f"cpu, {threads} thread{'s' * (threads > 1)}")
    assert measured == [1, 2]
    assert sorted(p.name.split("_")[0] for p in (tmp_path / "calibration").iterdir()) == \
        ["cpu-1threads", "cpu-2threads"]


def test_a_long_context_is_filled_in_a_few_passes_a_lane_and_recorded(monkeypatch):
    """Each lane is fed its context exactly once, position by position, in at most FILL_PASSES
    passes, the lanes taking turns (so that their blocks interleave as in a running cache)."""
    fills = []

    class Runner(_FakeRunner):

        def forward(self, lanes):
            if not lanes[0].logits_rows:
                fills.extend((lane.seq_id, lane.start_pos, len(lane.token_ids)) for lane in lanes)
            now[0] += 0.01

    now = [0.0]
    monkeypatch.setattr(cal.time, "perf_counter", lambda: now[0])
    result = cal.measure(Runner(), 100, device="d", model="m", dtype="x", repeats=1,
                         context=1000, query_sizes=(1, 2), batch_shapes=(2,), decode_drafts=(1,))
    assert result.context == 1000
    for lane in {seq_id for seq_id, _, _ in fills}:
        spans = [(start, n) for seq_id, start, n in fills if seq_id == lane]
        assert len(spans) <= cal.FILL_PASSES
        assert [start for start, _ in spans] == [sum(n for _, n in spans[:i])
                                                for i in range(len(spans))]
        assert sum(n for _, n in spans) == 1000
    assert [seq_id for seq_id, _, _ in fills[:4]] == [1_000_000, 1_000_001] * 2  # in turns


def test_calibrating_at_a_context_the_model_cannot_hold_is_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    loaded = load_model("tiny-test", dtype="fp32")  # 4096 positions
    for context in (0, 4096 - 127):
        with pytest.raises(SwarmscopeError, match=f"1..3968 tokens .* got {context}"):
            cal.calibrate_or_load(loaded, force=True, context=context)


def test_the_default_context_fits_a_model_of_few_positions(tmp_path, monkeypatch):
    """Lanes at DEFAULT_CONTEXT where the model holds it, at what it holds beside the longest
    query otherwise; a model that holds no context beside that query is a message."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    timed = []
    monkeypatch.setattr(cal, "measure", lambda *a, context, **k: timed.append(context)
                        or Calibration.make_dummy())
    loaded = load_model("tiny-test", dtype="fp32")

    def holding(positions):
        config = loaded.config.with_(max_position=positions)
        return dataclasses.replace(loaded, config=config, model=LlamaModel.random(config))

    for positions in (4096, 150):
        cal.calibrate_or_load(holding(positions), force=True)
    assert timed == [cal.DEFAULT_CONTEXT, 150 - 128]
    short = holding(128)
    for context in (None, 64):
        with pytest.raises(SwarmscopeError, match="tiny-test has 128 positions.* more than 128"):
            cal.calibrate_or_load(short, force=True, context=context)


def test_cache_is_kept_apart_for_models_of_one_name():
    """Two fine-tunes in folders both named checkpoint-500, of different sizes, must not share
    a curve; the same model loaded again must find its own."""
    config = PRESETS["tiny-test"]
    model = SimpleNamespace(name="checkpoint-500", config=config)
    again = SimpleNamespace(name="checkpoint-500", config=config.with_())
    bigger = SimpleNamespace(name="checkpoint-500", config=config.with_(num_layers=3))
    hybrid = SimpleNamespace(name="checkpoint-500", config=config.with_(conv_layers=(0,)))
    mixture = SimpleNamespace(name="checkpoint-500", config=config.with_(
        num_experts=4, experts_per_token=2, expert_size=32))
    assert cal.model_key(model) == cal.model_key(again)
    keys = {cal.model_key(m) for m in (model, bigger, hybrid, mixture)}
    assert len(keys) == 4 and all(key.startswith("checkpoint-500-") for key in keys)
    # a dense model's key is what it was before the layers' kinds were counted
    assert cal.model_key(model) == "checkpoint-500-" + hashlib.sha1(repr((
        320, 64, 128, 2, 4, 2, 16, True, False, False)).encode()).hexdigest()[:8]


def test_needs_a_point_at_one():
    with pytest.raises(ValueError):
        Calibration(points=[(2, 1.0)])


@pytest.mark.parametrize("points, eps", [([(1, float("nan"))], 0.1),
                                         ([(1, 1.0), (2, math.inf)], 0.1),
                                         ([(1, 1.0)], float("nan"))])
def test_times_and_eps_must_be_finite(points, eps):
    """A NaN in a cache file or a trace passed `<= 0` and `< 0`, and T came out of comparisons
    with NaN."""
    with pytest.raises(ValueError, match="positive"):
        Calibration(points=points, eps=eps)


def test_stale_cache_version_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    old = Calibration.make_dummy().to_dict()
    del old["version"]  # written before calibration had versions
    path = cal.cache_path("dummy", "dummy", "none")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    assert cal.load_cached("dummy", "dummy", "none", eps=0.1) is None
    assert Calibration.from_dict(old).version == 1   # an old trace's curve still reads


def test_measure_pairs_each_shape_with_a_reference_pass(monkeypatch):
    """A fake runner: a pass costs a set time per query size (N=4 dips below N=2, as MKL's
    kernel choice can); the machine runs at half speed for a stretch of passes that starts and
    ends inside a pair, and load spoils one pass."""
    cost_ms = {1: 10.0, 2: 18.0, 4: 17.0}
    now = [0.0]
    passes = []

    class Runner(_FakeRunner):

        def forward(self, lanes):
            n = sum(len(lane.token_ids) for lane in lanes if lane.logits_rows)
            passes.append(n)
            if not n:  # the lanes' context, block by block
                return
            # rounds of (reference, N=2), (reference, N=4), (reference, B=2), (B=2, B=2 D=1)
            timed = len([p for p in passes if p])
            slow = 2.0 if 10 <= timed < 26 else 1.0  # starts and ends inside a pair
            spoiled = 50.0 if timed == 36 else 0.0   # round 4's N=4
            cost = cost_ms.get(n, 12.0) if len(lanes) == 1 else 10.0 + 2 * n  # B=2: 14, D=1: 16
            now[0] += (cost * slow + spoiled) / 1e3

    monkeypatch.setattr(cal.time, "perf_counter", lambda: now[0])
    result = cal.measure(Runner(), 100, device="d", model="m", dtype="x", repeats=5,
                         query_sizes=(1, 2, 4), batch_shapes=(2,), decode_drafts=(1,))
    assert [(n, round(ms, 6)) for n, ms in result.points] == [(1, 10.0), (2, 18.0), (4, 17.0)]
    assert [(b, round(ms, 6)) for b, ms in result.batch_points] == [(2, 14.0)]
    assert [(b, d, round(ms, 6)) for b, d, ms in result.decode_points] == [(2, 1, 16.0)]
    assert result.version == cal.VERSION and result.context == 64  # what the curve is at
    assert Calibration.from_dict(result.to_dict()).context == 64
    assert passes.count(0) == 4 * 2  # two lanes' 64 tokens of context, a block at a time
    assert passes.count(1) == 3 * 6  # a reference before each shape but the drafts, 6 rounds
    assert passes.count(3) == 6      # the drafts' shape, each time after its batch (n = 2)
    assert result.t_ms(4) == result.t_ms(2) == pytest.approx(17.5)  # the dip is no free slack
    assert result.t_ms(3) == pytest.approx(17.5) and result.budget == 1


def test_points_that_scatter_are_retimed_until_they_settle_or_the_rounds_run_out(monkeypatch):
    """N=2 cycles through five costs for `noisy_passes` passes, then holds the middle one; N=4
    never scatters and is timed only in the rounds asked for."""
    now = [0.0]
    passes = []

    def run(noisy_passes):
        passes.clear()

        class Runner(_FakeRunner):

            def forward(self, lanes):
                n = sum(len(lane.token_ids) for lane in lanes if lane.logits_rows)
                if not n:
                    return
                passes.append(n)
                count = passes.count(2)
                wobble = 2.0 * (count % 5 - 2) if n == 2 and count <= noisy_passes else 0
                now[0] += ({1: 10.0, 2: 20.0, 4: 25.0}[n] + wobble) / 1e3

        monkeypatch.setattr(cal.time, "perf_counter", lambda: now[0])
        return cal.measure(Runner(), 100, device="d", model="m", dtype="x", repeats=5,
                           query_sizes=(1, 2, 4), batch_shapes=(), decode_drafts=())

    capped = run(noisy_passes=10_000)
    assert passes.count(2) == 1 + cal.EXTRA_ROUNDS * 5 and passes.count(4) == 1 + 5
    assert capped.t_ms(2) == pytest.approx(20.0, abs=4.0)
    settled = run(noisy_passes=6)  # the warm-up and five rounds scatter
    assert 1 + 5 < passes.count(2) < 1 + cal.EXTRA_ROUNDS * 5 and passes.count(4) == 1 + 5
    assert settled.t_ms(2) == pytest.approx(20.0)


def test_median_error_is_the_medians_relative_standard_error():
    assert cal.median_error([1.0, 2.0]) == float("inf")
    assert cal.median_error([1.0, 2.0, 3.0]) == pytest.approx(1.858 / (2 * 3 ** 0.5))
    assert cal.median_error([2.0, 2.0, 2.0, 9.0]) == 0.0  # one outlier leaves the median be


class _FakeRunner:
    """A ModelRunner's interface for `measure`, with a CPU's synchronize: nothing to wait for."""
    def __init__(self) -> None:
        self.kv = SimpleNamespace(blocks=_Blocks(), block_size=16)

    def synchronize(self) -> None:
        pass


def test_a_pass_is_timed_to_its_end_where_it_runs_after_forward_returns(monkeypatch):
    """As on a GPU: forward only queues the pass, and synchronize waits for it."""
    now, queued = [0.0], []

    class QueuingRunner(_FakeRunner):
        def forward(self, lanes):
            queued.append(sum(len(lane.token_ids) for lane in lanes) if lanes[0].logits_rows else 0)

        def synchronize(self):
            now[0] += sum(10.0 + n for n in queued) / 1e3  # t(N) = 10 + N ms
            queued.clear()

    monkeypatch.setattr(cal.time, "perf_counter", lambda: now[0])
    result = cal.measure(QueuingRunner(), 100, device="d", model="m", dtype="x", repeats=3,
                         query_sizes=(1, 2, 4), batch_shapes=(2,), decode_drafts=(1,))
    assert [(n, round(ms, 6)) for n, ms in result.points] == [(1, 11.0), (2, 12.0), (4, 14.0)]


class _Blocks:
    def __contains__(self, seq_id):
        return True

    def truncate(self, seq_id, n):
        pass

    def free(self, seq_id):
        pass


def test_decode_steps_are_priced_by_the_batch_shapes_where_measured():
    """B lanes with D drafts: the measured shapes, interpolated in B and D, the one-lane curve
    past them; without decode points the one-lane curve t(B + D) as before."""
    points = [(1, 10.0), (2, 10.0), (4, 10.0), (8, 11.0), (16, 12.0), (32, 20.0), (64, 36.0)]
    one_lane = Calibration(points=points)
    assert one_lane.step_ms(4, 2) == one_lane.t_ms(6)
    c = Calibration(points=points, batch_points=[(2, 12.0), (4, 14.0)],
                    decode_points=[(2, 1, 15.0), (2, 2, 15.0), (4, 1, 17.0), (4, 2, 18.0),
                                   (4, 4, 19.0), (2, 4, 14.0)])
    assert c.step_ms(1, 3) == c.t_ms(4)            # one lane: the curve
    assert c.step_ms(4, 0) == 14.0 and c.step_ms(4, 1) == 17.0  # a first draft costs a lane's worth
    assert c.step_ms(4, 3) == pytest.approx(18.5)  # between measured draft counts
    # a dip is pooled with the points before it: never cheaper with more drafts
    assert c.step_ms(2, 1) == c.step_ms(2, 4) == pytest.approx(44 / 3)
    assert c.step_ms(3, 1) == pytest.approx((44 / 3 + 17.0) / 2)  # between measured batches
    assert c.step_ms(4, 8) == pytest.approx(19.0 + c.t_ms(12) - c.t_ms(8))  # past the drafts
    assert c.step_ms(8, 1) == pytest.approx(17.0 + c.t_ms(9) - c.t_ms(5))   # past the batches
    assert c.step_ms(4, 1, prefill=20) == pytest.approx(17.0 + c.t_ms(25) - c.t_ms(5))
    assert Calibration.from_dict(c.to_dict()) == c and c.to_dict()["decode_points"]
