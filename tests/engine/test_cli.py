"""`swarmscope` itself: its help (the commands and the window's options), its version, the
net under every command (Ctrl+C, a closed pipe), and the options the commands share."""
from importlib.metadata import version

import pytest

from engine.cli.main import build_parser, main
from engine.thread_tuner import usable_cores


def test_help_lists_the_commands_and_the_windows_options(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("generate", "run", "serve", "trace", "calibrate", "bench", "fetch-model",
                    "models"):
        assert f"    {command}" in out
    window = out[out.index("With no COMMAND, the window:"):]
    for option in ("--model", "--trace-out", "--replay", "--screenshot", "--quit-after",
                   "--theme", "--size", "--agents"):
        assert option in window


def test_models_lists_what_model_takes_on_this_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "models--Org--Tiny-1B" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    manifest = tmp_path / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "qwen3" / "4b"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["default", "Org/Tiny-1B", "ollama:qwen3:4b"]
    assert lines[1].endswith("Hugging Face cache") and lines[2].endswith("Ollama")
    assert str(tmp_path / "hub") in lines[-1] and str(tmp_path / "ollama") in lines[-1]


def test_models_check_says_what_each_is_or_why_it_would_not_load(tmp_path, monkeypatch,
                                                                  capsys):
    from tests.engine.loading.conftest import hf_tiny, save_hf_folder

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    for repo, config in (("Org--Broken", "{}"), ("Org--Tiny", "gemma3"),
                         ("Org--Mixture", "qwen3_moe")):
        snapshot = tmp_path / "hub" / f"models--{repo}" / "snapshots" / "abc"
        if config != "{}":
            save_hf_folder(hf_tiny(config), snapshot)
        else:
            snapshot.mkdir(parents=True)
            (snapshot / "config.json").write_text(config)
    assert main(["models", "--check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = {line.split()[0]: line for line in lines[:4]}
    assert said["default"].endswith("loads")
    assert "would not load:" in said["Org/Broken"] and "architecture None" in said["Org/Broken"]
    assert said["Org/Tiny"].endswith("loads: gemma3, 2 layers")
    assert said["Org/Mixture"].endswith("loads: qwen3_moe, 2 layers, 4 experts (2 a token)")


def test_serve_answers_on_port_8000_of_this_machine_unless_told_otherwise():
    parse = build_parser().parse_args
    assert parse(["serve"]).serve == ("127.0.0.1", 8000) and parse(["serve"]).headless
    assert parse(["serve", "0.0.0.0:9000"]).serve == ("0.0.0.0", 9000)
    assert parse(["run", "--headless"]).serve is None


@pytest.mark.parametrize("argv", [["--version"], ["--model", "tiny-test", "--version"]])
def test_version(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"swarmscope {version('swarmscope')}"


def test_a_source_checkout_without_the_package_installed_starts_and_says_so(capsys, monkeypatch):
    """As on a lent GPU machine, where the checkout runs through PYTHONPATH."""
    from importlib import metadata

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert main(["--help"]) == 0
    with pytest.raises(SystemExit):
        main(["--version"])
    assert "not installed" in capsys.readouterr().out


def test_ctrl_c_outside_a_commands_own_handling_is_one_line_not_a_traceback(monkeypatch, capfd):
    """A model loading or a prompt decoding when Ctrl+C comes (`run` summarises by itself)."""
    from engine.cli import generate_cmd

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_cmd, "run", interrupted)
    assert main(["generate", "--prompt", "hi"]) == 130
    err = capfd.readouterr().err
    assert err == "swarmscope generate: interrupted\n"


def test_output_cut_short_by_its_reader_is_not_an_error(monkeypatch, capfd):
    """`swarmscope trace check t.jsonl | head -1`: the pipe closes under the command's prints."""
    from engine.cli import trace_cmd

    def cut_short(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(trace_cmd, "check_cmd", cut_short)
    assert main(["trace", "check", "any.jsonl"]) == 0
    assert "Traceback" not in capfd.readouterr().err


def test_ctrl_c_before_a_command_runs_is_one_line_too(monkeypatch, capfd):
    """In the first second the command's modules are still being imported."""
    import engine.cli.main as cli

    def importing():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", importing)
    assert main(["bench", "spec", "--batches", "1"]) == 130
    assert capfd.readouterr().err == "swarmscope bench spec: interrupted\n"


@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["run", "--headless"]])
@pytest.mark.parametrize("flag, thinking", [([], None), (["--no-thinking"], False),
                                            (["--thinking"], True)])
def test_thinking_reaches_the_chat_template(monkeypatch, capsys, command, flag, thinking):
    """The model is loaded with the switch as given, or none: then the template's default."""
    import engine.loading
    from engine.errors import SwarmscopeError
    asked = []

    def load_model(*args, **kwargs):
        asked.append(kwargs.get("thinking"))
        raise SwarmscopeError("stop here")

    monkeypatch.setattr(engine.loading, "load_model", load_model)
    assert main([*command, "--model", "tiny-test", *flag]) == 2
    assert asked == [thinking] and "stop here" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["run", "--headless"],
                                     ["calibrate"], ["bench", "spec"], ["bench", "swarm"]])
def test_threads_reach_the_model_loader(monkeypatch, capsys, command):
    """Every command that loads a model sets the CPU threads through the loader, or leaves
    torch's choice where --threads is not given."""
    import engine.loading
    from engine.errors import SwarmscopeError
    asked = []

    def load_model(*args, **kwargs):
        asked.append(kwargs.get("threads"))
        raise SwarmscopeError("stop here")

    monkeypatch.setattr(engine.loading, "load_model", load_model)
    for flag in ([], ["--threads", "1"]):
        main([*command, "--model", "tiny-test", *flag])
    assert asked == [None, 1] and "stop here" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "two", "100000", "auto"])
def test_a_thread_count_this_machine_cannot_run_names_the_flag(capsys, value):
    """auto only where a session runs long enough to tune (run, the window), not calibrate."""
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", "--threads", value])
    assert exit_.value.code == 2
    assert f"argument --threads: must be 1..{usable_cores()} (the cores this process may run " \
        f"on), got '{value}'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--headless", "--threads", "0"])
    assert f"must be 1..{usable_cores()} (the cores this process may run on) or auto, got '0'" in \
        capsys.readouterr().err


def test_threads_count_only_the_cores_this_process_may_run_on(monkeypatch, capsys):
    """A container's cpuset or `taskset` leaves fewer cores than the machine has: more threads
    than those would only queue on them."""
    import os
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5})
    assert usable_cores() == 2
    with pytest.raises(SystemExit):
        main(["calibrate", "--threads", "3"])
    assert "must be 1..2 (the cores this process may run on), got '3'" in capsys.readouterr().err
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS, Windows: the machine's
    assert usable_cores() == 64
