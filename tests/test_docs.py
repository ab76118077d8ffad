"""The docs stand on their own and their commands work as written (issue #35).

- Every Markdown link in the repository's docs stays inside the repository (http(s) links to papers and
  libraries aside) and points to a file that exists and, for ``#anchor``, a heading that exists.
- No doc cites a file outside the repository (``../shared``) or "SPEC §N" without linking docs/SPEC.md.
- Shell blocks: commands run through the project's virtualenv (``.venv/bin/python``, never a bare
  ``python`` / ``tensorboard`` / ``pip``); every script a block names exists, and every flag it passes is
  one the script's ``--help`` lists.
- Python blocks compile, and each doc's blocks run in order (one namespace per doc, all docs in one fresh
  process), except a block whose preceding line is ``<!-- not run by tests/test_docs.py: REASON -->``.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".venv", ".git", "runs", "logs", "build", "dist", ".pytest_cache", ".hypothesis", "node_modules"}
NOT_RUN = re.compile(r"<!--\s*not run by tests/test_docs\.py:\s*(.+?)\s*-->")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.S | re.M)
SHELL_LANGS = {"bash", "sh", "shell", "console"}
#: commands that must run through the virtualenv: setup.sh installs them in .venv, never on PATH
VENV_COMMANDS = {"python", "python3", "pip", "pip3", "tensorboard", "pytest", "flwr", "ray"}


def markdown_files() -> List[Path]:
    """README.md, docs/ and every other Markdown file of the repository (not the venv or run folders)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        out += [Path(dirpath) / f for f in filenames if f.endswith(".md")]
    return sorted(out)


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def blocks(text: str) -> Iterator[Tuple[str, str, int, str]]:
    """(language, body, line number, skip reason or '') of each fenced block."""
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NOT_RUN.search(before)
        body = "\n".join(ln[len(m.group("indent")):] if ln.startswith(m.group("indent")) else ln
                         for ln in m.group("body").split("\n"))
        yield m.group("lang"), body, line, reason.group(1) if reason else ""


def prose(text: str) -> str:
    """The text without fenced blocks, inline code spans or HTML comments (what links are read from)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


# -- links ---------------------------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path: Path) -> Set[str]:
    """Every anchor a Markdown file offers (headings, with GitHub's -1, -2 for repeats; explicit ids)."""
    text = path.read_text(encoding="utf-8")
    seen: Dict[str, int] = {}
    out = set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", FENCE.sub("", text), flags=re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def links(text: str) -> List[str]:
    """The targets of inline links, images and reference definitions."""
    body = prose(text)
    found = [m.group(1) for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", body)]
    found += re.findall(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", body, flags=re.M)
    return found


def link_problem(doc: Path, target: str) -> str:
    """Why ``target`` (a link in ``doc``) is broken, or '' when it is fine."""
    if re.match(r"https?://", target):
        return ""
    if re.match(r"[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
        return "leaves the repository (only http(s) links go outside it)"
    path_part, _, anchor = target.partition("#")
    dest = (doc.parent / path_part).resolve() if path_part else doc
    if not dest.is_relative_to(ROOT):
        return "leaves the repository"
    if any(part in SKIP_DIRS for part in dest.relative_to(ROOT).parts):
        return "points into a folder a clone does not have (runs/, .venv/, ...)"
    if not dest.exists():
        return f"{rel(dest)} does not exist"
    if anchor:
        if dest.suffix != ".md":
            return "has an anchor into a file that is not Markdown"
        if anchor not in anchors(dest):
            return f"{rel(dest)} has no heading with anchor #{anchor}"
    return ""


@pytest.mark.parametrize("doc", markdown_files(), ids=rel)
def test_links_stay_in_the_repository_and_resolve(doc):
    text = doc.read_text(encoding="utf-8")
    broken = [f"{t}: {why}" for t in links(text) if (why := link_problem(doc, t))]
    assert not broken, f"{rel(doc)}: broken links:\n" + "\n".join(broken)
    assert "../shared" not in text, f"{rel(doc)} cites ../shared, which a clone does not have: use docs/SPEC.md"
    if doc != ROOT / "docs" / "SPEC.md":
        unlinked = re.sub(r"\[[^\]]*\]\([^)]*\)", "", prose(text))
        assert not re.search(r"\bSPEC(\.md)? §", unlinked), \
            f"{rel(doc)}: 'SPEC §N' without a link: write [SPEC §N](docs/SPEC.md#...)"


def test_the_link_checker_catches_what_it_should(tmp_path):
    doc = ROOT / "docs" / "SPEC.md"
    assert link_problem(doc, "ENVIRONMENT.md#observation") == ""
    assert link_problem(doc, "https://arxiv.org/abs/1602.05629") == ""
    assert "leaves the repository" in link_problem(doc, "../../shared/SPEC.md")
    assert "leaves the repository" in link_problem(doc, "/etc/passwd")
    assert "does not exist" in link_problem(doc, "NOPE.md")
    assert "no heading" in link_problem(doc, "ENVIRONMENT.md#no-such-section")
    assert "no heading" in link_problem(doc, "#no-such-section")
    assert slug("Vector reward (`reward: vector`, `fedsel/MOFedSelect-v0`)") == \
        "vector-reward-reward-vector-fedselmofedselect-v0"
    assert links("a [x](y.md#z) `[not](a link)`\n```\n[nor](this)\n```\n[r]: ref.md\n") == ["y.md#z", "ref.md"]


# -- shell blocks --------------------------------------------------------------------------------------------

def shell_commands() -> List[Tuple[str, List[str]]]:
    """(where, argv) of every command in every shell block of the docs."""
    out = []
    for doc in markdown_files():
        for lang, body, line, _ in blocks(doc.read_text(encoding="utf-8")):
            if lang not in SHELL_LANGS:
                continue
            for i, raw in enumerate(body.replace("\\\n", " ").split("\n")):
                try:
                    tokens = shlex.split(raw, comments=True)
                except ValueError:
                    tokens = raw.split()
                cmd: List[str] = []
                for tok in tokens + [";"]:
                    if tok in ("&&", "||", ";", "|") or tok.endswith(";"):
                        if tok.endswith(";") and tok != ";":
                            cmd.append(tok[:-1])
                        while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):  # VAR=value cmd
                            cmd.pop(0)
                        if cmd:
                            out.append((f"{rel(doc)}:{line + 1 + i}", cmd))
                        cmd = []
                    else:
                        cmd.append(tok)
    return out


def test_commands_run_through_the_virtualenv():
    bare = [f"{where}: {' '.join(cmd)}" for where, cmd in shell_commands() if cmd[0] in VENV_COMMANDS]
    assert not bare, ("commands that need an activated venv (setup.sh does not activate one): write "
                      ".venv/bin/<command>\n" + "\n".join(bare))
    inline = []
    for doc in markdown_files():
        text = FENCE.sub("", doc.read_text(encoding="utf-8"))
        inline += [f"{rel(doc)}: `{m.group(1)} ...`" for m in re.finditer(r"`(python3?|pip|tensorboard) ", text)]
    assert not inline, "inline commands without .venv/bin/:\n" + "\n".join(inline)


def python_invocations() -> Dict[str, List[Tuple[str, List[str]]]]:
    """Script (repository path) → [(where, its arguments)] for every ``.venv/bin/python SCRIPT.py ...``."""
    out: Dict[str, List[Tuple[str, List[str]]]] = {}
    for where, cmd in shell_commands():
        if cmd[0] == ".venv/bin/python" and len(cmd) > 1 and cmd[1].endswith(".py"):
            out.setdefault(cmd[1], []).append((where, cmd[2:]))
    return out


#: commands and modules of the optional extras (pyproject.toml), by the extra that installs them
EXTRA_COMMANDS = {"ray": ("ray", "ray"), "flwr": ("flower", "flwr"), "rl_zoo3": ("zoo", "rl_zoo3")}
#: top-level modules of the optional extras -> the extra (a script or block failing to import one of them where
#: the extra is not installed is skipped by name, not failed; scripts/setup.sh installs them all for CI)
EXTRA_MODULES = {"flwr": "flower", "ray": "ray", "rl_zoo3": "zoo", "optuna": "zoo", "mo_gymnasium": "mo"}


def skip_absent_extras(absent: Set[str], what: str) -> None:
    if absent:
        pytest.skip(f"{what} of the optional extra(s) {', '.join(sorted(absent))} were not checked: not installed "
                    f"here (pip install '.[{','.join(sorted(absent))}]')")


def test_every_named_script_module_and_venv_command_exists():
    """Every command the docs name exists. Those of an optional extra that is not installed are left out and
    the test is then skipped naming the extra (after checking all the rest): scripts/setup.sh installs every
    extra, so CI checks them all; a GPU machine's own Python (bench/gpu_check.sh --full) has none of them."""
    venv_bin = Path(sys.executable).parent
    missing, absent = [], set()

    def extra_absent(name: str) -> bool:
        extra = EXTRA_COMMANDS.get(name)
        if extra is not None and importlib.util.find_spec(extra[1]) is None:
            absent.add(extra[0])
            return True
        return False

    for where, cmd in shell_commands():
        exe = cmd[0].rsplit("/", 1)[-1]
        if cmd[0].startswith(".venv/bin/") and not (venv_bin / exe).exists() and not extra_absent(exe) \
                and not (exe == "pip" and importlib.util.find_spec("pip") is not None):  # `python -m pip` works
            missing.append(f"{where}: {cmd[0]} is not installed in the virtualenv")
        if cmd[0] == "bash" and len(cmd) > 1 and not (ROOT / cmd[1]).is_file():
            missing.append(f"{where}: {cmd[1]} does not exist")
        if cmd[0] != ".venv/bin/python" or len(cmd) < 2:
            continue
        if cmd[1] == "-m" and len(cmd) > 2:
            if extra_absent(cmd[2].split(".")[0]):
                continue
            if importlib.util.find_spec(cmd[2].split(".")[0]) is None or importlib.util.find_spec(cmd[2]) is None:
                missing.append(f"{where}: module {cmd[2]} cannot be imported")
            if cmd[2] == "pytest":
                missing += [f"{where}: {a} does not exist" for a in cmd[3:]
                            if a.startswith("tests/") and not (ROOT / a.split("::")[0]).exists()]
        elif cmd[1].endswith(".py") and not (ROOT / cmd[1]).is_file():
            missing.append(f"{where}: {cmd[1]} does not exist")
    assert not missing, "\n".join(missing)
    skip_absent_extras(absent, "the commands")


HELP_RUNNER = r"""
import json, os, runpy, sys
import torch, stable_baselines3, sb3_contrib, gymnasium, matplotlib, fedsel_env, agents, fedsel_eval  # once, for every fork
wanted, result, folder = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
out = {}
for i, (script, sub) in enumerate(wanted):
    path = os.path.join(folder, f"help{i}.txt")
    pid = os.fork()
    if pid == 0:  # the child: its stdout (fd 1, kept across an exec) goes to the file
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        sys.argv = [script] + ([sub] if sub else []) + ["--help"]
        code = 1
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = 0 if e.code in (0, None) else 1
        except ModuleNotFoundError as e:  # the test decides whether it is an optional extra's
            print(f"__absent_module__ {e.name}")
            code = 3
        except BaseException:
            code = 1
        sys.stdout.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 3)
    out[f"{script} {sub}"] = open(path).read() if ok else None
json.dump(out, open(result, "w"))
"""


def help_texts(tmp_path: Path, wanted: List[Tuple[str, str]]) -> Dict[str, str]:
    """``SCRIPT [SUB] --help`` of each script, each in a fork of one process that imported torch and SB3 once."""
    import json

    (tmp_path / "wanted.json").write_text(json.dumps(wanted))
    (tmp_path / "help.py").write_text(HELP_RUNNER)
    done = subprocess.run([sys.executable, str(tmp_path / "help.py"), str(tmp_path / "wanted.json"),
                           str(tmp_path / "help.json"), str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "help.json").read_text())


@pytest.mark.slow
def test_flags_in_the_docs_are_the_scripts_flags(tmp_path):
    calls = {s: v for s, v in python_invocations().items() if (ROOT / s).is_file()}
    assert "evaluate.py" in calls and "train_agent.py" in calls
    mains = help_texts(tmp_path, [(s, "") for s in sorted(calls)])
    absent = set()
    for s in list(calls):
        m = re.match(r"__absent_module__ (\S+)", mains[f"{s} "] or "")
        if m and m.group(1).split(".")[0] in EXTRA_MODULES:
            absent.add(EXTRA_MODULES[m.group(1).split(".")[0]])
            del calls[s]
        elif m:
            mains[f"{s} "] = None  # a module the project needs: a failure
    missing = [s for s in calls if not mains[f"{s} "]]
    assert not missing, f"scripts whose --help does not print their options and exit 0: {missing}"
    subs = set()
    for script, uses in calls.items():
        choices = re.search(r"\{([\w,-]+)\}", mains[f"{script} "])
        for _, args in uses:
            if args and choices and args[0] in choices.group(1).split(","):
                subs.add((script, args[0]))
    helps = {**mains, **(help_texts(tmp_path, sorted(subs)) if subs else {})}
    bad = []
    for script, uses in sorted(calls.items()):
        for where, args in uses:
            sub = args[0] if (script, args[0] if args else "") in subs else ""
            listed = helps[f"{script} {sub}"] or ""
            for a in args:
                flag = a.split("=", 1)[0]
                if re.match(r"^--?[A-Za-z][\w-]*$", flag) and \
                        not re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", listed):
                    bad.append(f"{where}: {script} {sub} has no flag {flag}")
    assert not bad, "\n".join(bad)
    skip_absent_extras(absent, "the flags of the scripts")


# -- Python blocks -------------------------------------------------------------------------------------------

def python_blocks(doc: Path) -> List[Tuple[str, int, str]]:
    return [(body, line, reason) for lang, body, line, reason in blocks(doc.read_text(encoding="utf-8"))
            if lang == "python"]


@pytest.mark.parametrize("doc", markdown_files(), ids=rel)
def test_python_blocks_compile(doc):
    for body, line, _ in python_blocks(doc):
        try:
            compile(body, f"{rel(doc)}:{line}", "exec")
        except SyntaxError as e:
            pytest.fail(f"{rel(doc)}:{line}: the Python block does not compile: {e}")


RUNNER = r"""
import json, sys, traceback
failed = {}
for doc, blocks in json.load(open(sys.argv[1])).items():
    namespace = {"__name__": "__doc_blocks__"}  # one namespace per doc: its blocks build on each other
    for where, body in blocks:
        try:
            exec(compile(body, where, "exec"), namespace)
        except ModuleNotFoundError as e:  # the test decides whether it is an optional extra's
            failed[doc] = f"__absent_module__ {e.name}\nblock at {where} failed:\n" + traceback.format_exc()[-3000:]
            break
        except BaseException:
            failed[doc] = f"block at {where} failed:\n" + traceback.format_exc()[-3000:]
            break
json.dump(failed, open(sys.argv[2], "w"))
"""


@pytest.mark.slow
def test_python_blocks_run(tmp_path):
    """Every doc's runnable Python blocks, in order, in one fresh process (one import of torch and SB3)."""
    import json

    todo = {rel(d): [(f"{rel(d)}:{line}", body) for body, line, reason in python_blocks(d) if not reason]
            for d in markdown_files()}
    todo = {d: b for d, b in todo.items() if b}
    assert "README.md" in todo  # the Ten lines run
    (tmp_path / "blocks.json").write_text(json.dumps(todo))
    (tmp_path / "runner.py").write_text(RUNNER)
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json"),
                           str(tmp_path / "failed.json")], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads((tmp_path / "failed.json").read_text())
    absent = set()
    for doc, why in list(failed.items()):
        m = re.match(r"__absent_module__ (\S+)", why)
        if m and m.group(1).split(".")[0] in EXTRA_MODULES:  # the rest of that doc's blocks are not run
            absent.add(EXTRA_MODULES[m.group(1).split(".")[0]])
            del failed[doc]
    assert not failed, "Python blocks that fail when run as written:\n" + "\n".join(failed.values())
    skip_absent_extras(absent, "the Python blocks (from the first that imports one on)")


def test_every_skipped_block_says_why():
    for doc in markdown_files():
        for body, line, reason in python_blocks(doc):
            assert reason == "" or len(reason) > 10, f"{rel(doc)}:{line}: say why the block is not run"
