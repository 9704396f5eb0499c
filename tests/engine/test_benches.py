"""The benchmarks run end to end on the tiny model and report every row they promise."""
import json
import re

import pytest

from engine.cli.main import main
from engine.thread_tuner import usable_cores


def _json_out(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_bench_decode_reports_batches_verify_lengths_and_the_floor(capsys):
    report = _json_out(capsys, ["bench", "decode", "--model", "tiny-test", "--repeats", "1",
                                "--json"])
    assert [row["batch"] for row in report["batches"]] == [1, 2, 4, 8, 16, 32]
    assert report["floor_ms"] > 0 and report["read_bandwidth_gb_s"] > 0
    assert all(row["step_ms"] > 0 for row in report["batches"])
    assert len(report["verify"]) >= 8


def test_bench_swarm_runs_every_policy_on_the_same_swarm(capsys):
    rows = _json_out(capsys, ["bench", "swarm", "--model", "tiny-test", "--duration", "5",
                              "--json"])
    assert [row["policy"] for row in rows] == ["off", "fixed4", "uniform", "goodput"]
    assert all(row["tokens_per_s"] > 0 and row["turns"] >= 0 for row in rows)
    assert rows[0]["acceptance"] is None  # speculation off drafts nothing


def test_bench_memory_samples_resident_memory_through_one_session(capsys):
    report = _json_out(capsys, ["bench", "memory", "--model", "tiny-test", "--duration", "3",
                                "--samples", "3", "--json"])
    samples = report["samples"]
    assert len(samples) == 3 and all(s["resident_mb"] > 0 for s in samples)
    assert [s["session_s"] >= 3 * (i + 1) / 3 for i, s in enumerate(samples)] == [True] * 3
    assert 0 < samples[0]["steps"] < samples[1]["steps"] < samples[2]["steps"]
    middle, last = samples[1], samples[2]
    assert report["second_half_mb_per_1000_steps"] == pytest.approx(
        1000 * (last["resident_mb"] - middle["resident_mb"]) / (last["steps"] - middle["steps"]))


@pytest.mark.parametrize("option", [["--samples", "1"], ["--duration", "0"]])
def test_bench_memory_bad_options_are_messages_that_name_them(capsys, option):
    assert main(["bench", "memory", "--model", "tiny-test", *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"swarmscope bench memory: {option[0]} must be ") and len(err.splitlines()) == 1


def test_bench_threads_runs_each_count_idle_beside_a_busy_core_and_one_that_comes_and_goes(
        capsys, restore_threads):
    rows = _json_out(capsys, ["bench", "threads", "--model", "tiny-test", "--dtype", "fp32",
                              "--counts", "2,1,auto", "--duration", "0.6", "--phase", "0.2",
                              "--json"])
    assert [(row["threads"], row["load"]) for row in rows] == [
        (count, load) for load in ("idle", "busy", "swing") for count in (2, 1, "auto")]
    assert all(row["steps"] > 0 and row["tokens_per_s"] > 0 for row in rows)
    assert [row["x_first"] for row in rows[::3]] == [1.0] * 3  # each load against 2 threads
    fixed = [row["time_at"] for row in rows if row["threads"] != "auto"]
    assert fixed == [{"2": 1.0}, {"1": 1.0}] * 3  # JSON: the keys are text
    for auto in rows[2::3]:  # tuned: its time split between the counts it can run
        assert set(auto["time_at"]) <= {"1", "2"}
        assert sum(auto["time_at"].values()) == pytest.approx(1.0)


@pytest.mark.parametrize("option, message", [
    (["--counts", "1,0"], f"--counts: each must be 1..{usable_cores()} (the cores this process "
                          "may run on) or auto, got '0'"),
    (["--busy", "-1"], "--busy must be >= 0, got -1"),
    (["--phase", "0"], "--phase must be a finite number > 0, got 0")])
def test_bench_threads_bad_options_are_messages_that_name_them(capsys, option, message):
    assert main(["bench", "threads", "--model", "tiny-test", *option]) == 2
    assert capsys.readouterr().err == f"swarmscope bench threads: {message}\n"


def test_bench_attention_times_the_torch_path_at_every_shape_and_says_why_not_the_kernel(capsys):
    report = _json_out(capsys, ["bench", "attention", "--device", "cpu", "--dtype", "fp32",
                                "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                                "--lanes", "1", "3", "--drafts", "0", "2", "--contexts", "40",
                                "--repeats", "2", "--json"])
    shapes = [(row["lanes"], row["drafts"], row["ctx"]) for row in report["shapes"]]
    assert shapes == [(1, 0, 40), (1, 2, 40), (3, 0, 40), (3, 2, 40)]
    assert all(row["torch_ms"] > 0 and row["plan_ms"] > 0 for row in report["shapes"])
    assert not report["kernels"] and "GPU" in report["kernels_why_not"]
    assert all(row["kernel_ms"] is None for row in report["shapes"])
    assert all(row["calls"] == 1 and row["whole_ms"] is None for row in report["shapes"])


def test_bench_attention_times_lanes_parted_for_what_their_calls_gather_against_one_call(capsys):
    # 3 lanes of 4096 positions at 2 KV heads of 128 in fp32: 8 MB each, 16 MB a call at most
    report = _json_out(capsys, ["bench", "attention", "--device", "cpu", "--dtype", "fp32",
                                "--heads", "2", "--kv-heads", "2", "--head-dim", "128",
                                "--lanes", "3", "--drafts", "0", "--contexts", "4096",
                                "--repeats", "1", "--json"])
    [row] = report["shapes"]
    assert row["calls"] == 2 and row["whole_ms"] > 0
    assert row["parted_over_whole"] == row["torch_ms"] / row["whole_ms"]


@pytest.mark.parametrize("option, message", [(["--lanes", "2", "0"], "--lanes must be >= 1, got 0"),
                                             (["--drafts", "-1"], "--drafts must be >= 0, got -1"),
                                             (["--heads", "6", "--kv-heads", "4"],
                                              "--heads 6 is not a multiple of --kv-heads 4")])
def test_bench_attention_bad_options_are_messages_that_name_them(capsys, option, message):
    assert main(["bench", "attention", "--device", "cpu", *option]) == 2
    assert capsys.readouterr().err == f"swarmscope bench attention: {message}\n"


TINY_MIXTURE = ["--hidden", "128", "--layers", "2", "--experts", "8", "--per-token", "2",
                "--expert-size", "64", "--repeats", "1", "--dtype", "fp32"]


def test_bench_experts_calibrates_a_mixture_beside_a_dense_model_of_its_active_width(capsys):
    report = _json_out(capsys, ["bench", "experts", *TINY_MIXTURE, "--json"])
    dense, mixture = report["rows"]["dense"], report["rows"]["mixture"]
    for row in (dense, mixture):
        assert list(row["t_n_over_t1"]) == ["2", "4", "8", "16", "32"]
        assert list(row["t_b_over_t1"]) == ["2", "4", "8", "16"]
        assert row["t1_ms"] > 0 and row["budget"] >= 1
        assert all(r >= 1 for r in row["t_n_over_t1"].values())  # the fit never falls
    # a token reads 2 of 8 experts of 64 x 3 x 64 x 128 weights in each of 2 layers
    unchosen = 2 * 6 * 3 * 64 * 128 * 4
    assert mixture["weight_bytes"] - mixture["streamed_bytes"] == unchosen
    assert mixture["streamed_bytes"] - dense["streamed_bytes"] == 2 * 8 * 128 * 4  # the routers


@pytest.mark.parametrize("option,message", [
    (["--hidden", "100"], "--hidden must be a multiple of 64 and --per-token at most --experts, "
                          "got 100, 2 and 8"),
    (["--per-token", "9"], "--hidden must be a multiple of 64 and --per-token at most --experts, "
                           "got 128, 9 and 8"),
    (["--experts", "0"], "--experts must be >= 1, got 0")])
def test_bench_experts_bad_options_are_messages_that_name_them(capsys, option, message):
    assert main(["bench", "experts", *TINY_MIXTURE, *option]) == 2
    assert capsys.readouterr().err == f"swarmscope bench experts: {message}\n"


def test_bench_experts_says_when_its_random_weights_would_not_fit(capsys):
    assert main(["bench", "experts", *TINY_MIXTURE, "--expert-size", str(10 ** 9)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"swarmscope bench experts: the mixture's random weights need [\d.]+ GB "
                        r"and [\d.]+ GB is free; give fewer --layers or --experts\n", err), err


@pytest.mark.parametrize("option", [["--model", "/nonexistent"], ["--ctx", "0"],
                                    ["--repeats", "0"]])
def test_bench_decode_bad_options_are_messages(capsys, option):
    assert main(["bench", "decode", "--model", "tiny-test", *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith("swarmscope bench decode: ") and "Traceback" not in err


@pytest.mark.parametrize("option", [["--agents", "0"], ["--duration", "-1"],
                                    ["--duration", "inf"], ["--max-context", "1"],
                                    ["--tool-latency", "nan"]])
def test_bench_swarm_bad_options_are_messages_that_name_them(capsys, option):
    assert main(["bench", "swarm", "--model", "tiny-test", *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"swarmscope bench swarm: {option[0]} must be ") and len(err.splitlines()) == 1


def test_swarm_policies_step_in_turn_until_each_has_run_its_session_time():
    from engine.bench.swarm import _run_in_lockstep

    log = []

    class Clocked:
        def __init__(self, name, step_s):
            self.name, self.step_s, self.t = name, step_s, 0.0

        def now(self):
            return self.t

        def step(self):
            log.append(self.name)
            self.t += self.step_s

    engines = [Clocked("a", 1.0), Clocked("b", 2.0), Clocked("c", 1.0)]
    _run_in_lockstep(engines, 4.0)
    assert [e.now() for e in engines] == [4.0, 4.0, 4.0]
    assert log[:6] == ["a", "b", "c", "b", "c", "a"]  # one step each, the first rotating
    assert log.count("b") == 2 and log.count("a") == log.count("c") == 4


def test_bench_serve_serves_the_same_conversations_to_each_policy_over_http(capsys):
    rows = _json_out(capsys, ["bench", "serve", "--model", "tiny-test", "--dtype", "fp32",
                              "--clients", "2", "--turns", "2", "--rounds", "2",
                              "--policies", "off,fixed,goodput", "--json"])
    assert [row["policy"] for row in rows] == ["off", "fixed", "goodput"]
    assert all(len(row["rounds_tokens_per_s"]) == 2 and row["tokens_per_s"] > 0 for row in rows)
    assert rows[0]["ratio"] == 1.0 and rows[0]["acceptance"] is None
    assert rows[2]["acceptance"] > 0 and rows[2]["ratio_spread"] is not None
    # each conversation's second request went on from its first: its KV was reused
    assert all(0 < row["reused_share"] < 1 for row in rows)


def test_bench_serve_feeds_and_holds_once_a_system_prompt_new_conversations_share(
        capsys, tmp_path):
    system = tmp_path / "system.md"
    system.write_text("You are one of a swarm of agents. Answer briefly.\n" * 8)
    rows = _json_out(capsys, ["bench", "serve", "--model", "tiny-test", "--dtype", "fp32",
                              "--clients", "2", "--conversations", "2", "--turns", "1",
                              "--rounds", "1", "--category", "chat", "--system", str(system),
                              "--policies", "off:unshared,off", "--json"])
    assert [row["policy"] for row in rows] == ["off:unshared", "off"]
    # one request a conversation: what is reused is the system prompt, whose KV blocks the
    # four conversations (kept as their agents wait for their clients) hold once
    assert rows[0]["reused_share"] == 0 and rows[1]["reused_share"] > 0.3
    assert rows[1]["kv_peak_bytes"] < 0.7 * rows[0]["kv_peak_bytes"]


def test_bench_serve_clients_may_predict_their_answers(capsys):
    """POLICY:predicted: each request predicts the file it edits (then the answer before), which
    the lane drafts from; the tiny model writes newlines, which the file seldom predicts, where
    its context alone (newlines too) predicts them well."""
    rows = _json_out(capsys, ["bench", "serve", "--model", "tiny-test", "--dtype", "fp32",
                              "--clients", "1", "--turns", "1", "--rounds", "1",
                              "--policies", "fixed,fixed:predicted:unshared", "--json"])
    assert [row["policy"] for row in rows] == ["fixed", "fixed:predicted:unshared"]
    assert rows[1]["acceptance"] < rows[0]["acceptance"]


def test_bench_serve_holds_every_answer_to_a_response_format(capsys, tmp_path):
    schema = tmp_path / "verdict.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                  "required": ["ok"], "additionalProperties": False,
                                  "x-guidance": {"whitespace_pattern": ""}}))
    command = ["bench", "serve", "--model", "tiny-test", "--dtype", "fp32", "--clients", "1",
               "--turns", "1", "--rounds", "1", "--category", "chat", "--policies", "off,goodput",
               "--response-format", str(schema), "--json"]
    rows = _json_out(capsys, command)  # every request with the format was answered
    assert [row["policy"] for row in rows] == ["off", "goodput"]
    schema.write_text('{"type": "sentence"}')  # it reaches the server, which refuses it
    assert main(command) == 2
    assert "response_format: the answer cannot be held to it" in capsys.readouterr().err


@pytest.mark.parametrize("option, message", [(["--clients", "0"], "--clients must be >= 1"),
                                             (["--conversations", "0"],
                                              "--conversations must be >= 1"),
                                             (["--policies", "off,off"], "--policies: each at"),
                                             (["--policies", "off:predicted:predicted"],
                                              "--policies: each of"),
                                             (["--policies", "off:shared"], "--policies: each of"),
                                             (["--system", "/no/such.md"],
                                              "--system: cannot read /no/such.md"),
                                             (["--policies", "fast"], "--policies: each of")])
def test_bench_serve_bad_options_are_messages_that_name_them(capsys, option, message):
    assert main(["bench", "serve", "--model", "tiny-test", *option]) == 2
    assert message in capsys.readouterr().err


def test_bench_dequant_reads_each_format_back_beside_the_plain_matrix(capsys):
    report = _json_out(capsys, ["bench", "dequant", "--rows", "256", "--columns", "384",
                                "--repeats", "1", "--json"])
    assert (report["rows"], report["columns"]) == (256, 384)
    rows = {row["format"]: row for row in report["formats"]}
    assert list(rows) == ["bf16 (plain)", "gptq int4", "awq int4", "fp8 blocks"]
    assert rows["bf16 (plain)"]["x_plain"] == 1.0
    assert all(row["ms"] > 0 for row in rows.values())


@pytest.mark.parametrize("option,message", [
    (["--rows", "300"], "--rows and --columns must be multiples of 128"),
    (["--repeats", "0"], "--repeats must be >= 1, got 0")])
def test_bench_dequant_bad_options_are_messages_that_name_them(capsys, option, message):
    assert main(["bench", "dequant", "--rows", "256", "--columns", "256", *option]) == 2
    assert capsys.readouterr().err == f"swarmscope bench dequant: {message}\n"


def test_bench_recurrent_times_the_hybrid_beside_the_model_attending(capsys):
    report = _json_out(capsys, ["bench", "recurrent", "--hidden", "256", "--layers", "4",
                                "--vocab", "300", "--ctx", "20", "--lanes", "2", "--rounds", "1",
                                "--dtype", "fp32", "--json"])
    assert [row["step"] for row in report["steps"]] == [
        "1 lane, 1 token", "1 lane verifying 5", "1 lane verifying 9", "2 lanes, 1 token each"]
    assert all(row["hybrid_ms"] > 0 and row["attention_ms"] > 0 and row["x_attention"] > 0
               for row in report["steps"])
    # three DeltaNet layers of 4 heads: states of 128 x 128 fp32, a ring of 67 rows of q, k, v,
    # b and a (3 x 512 + 8 values); one attention layer's KV against four's
    assert report["state_bytes_per_lane"] == 3 * (4 * 4 * 128 * 128 + 67 * (3 * 512 + 8) * 4)
    assert report["kv_bytes_per_token"] == {"hybrid": 2 * 2 * 256 * 4,
                                            "attention": 4 * 2 * 2 * 256 * 4}


def test_bench_recurrent_bad_shapes_are_messages_that_name_them(capsys):
    assert main(["bench", "recurrent", "--hidden", "384"]) == 2
    assert "--hidden must be a multiple of 256" in capsys.readouterr().err
