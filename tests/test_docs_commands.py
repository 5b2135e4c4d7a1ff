"""Every command the docs show parses, and every link between the docs resolves.

What is checked (README.md and docs/**/*.md; ``python -m pytest -q tests/test_docs_commands.py``, seconds):

- Commands: each fenced ```bash / ```sh / ```shell / ```console block (in ```console only the ``$ `` lines)
  is read line by line, a trailing backslash joining the next line, ``# comments`` dropped, and each line
  split at ``&&``, ``||``, ``;``, ``|`` and ``&``. Every ``python`` / ``python3`` in a piece that runs one
  of the project's entry points (``python sweeps/X.py``, ``python cluster/local.py``, ``python -m
  trainables...`` / ``analysis...`` / ``sweeps...`` / ``cluster...``) is checked from there to the piece's
  end, so the command after ``ray job submit ... --`` or ``python cluster/local.py run --`` is checked too.
  The check imports the entry point and calls its ``main(argv)`` with ``argparse.ArgumentParser.parse_args``
  replaced by one that parses and then stops (nothing runs, no Ray starts): an unknown module or script, an
  unknown flag, a bad choice or a value of the wrong type fails with the doc's file, line and the command.
  A sweep script's arguments also go through ``sweeps.cli.base_config`` and its tasks through
  ``resolve_tasks`` (a bad ``--preset``, ``--set`` key or task name fails too); ``--plan`` is parsed, not run.
- Placeholders: ``<name>`` becomes ``name``, ``{address}`` / ``{dashboard}`` a local Ray address / URL, any
  other ``{word}`` the word, and ``...`` (arguments left out) is dropped; upper-case words (DIR, BUCKET, PATH)
  are plain strings already. A numeric flag needs a number in the doc (``--seeds 3``, not ``--seeds N``).
- Links: every relative Markdown link or image outside code (``[t](path)``, ``[t](path#anchor)``,
  ``[t](#anchor)``, ``[ref]: path``) names a file or folder that exists, and an anchor into a Markdown file
  names one of its headings (GitHub's slugs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sweeps", "trainables", "analysis", "cluster")  # the project's own entry points live here
SHELLS = {"bash", "sh", "shell", "console", "zsh"}
OPERATORS = {"&&", "||", ";", "|", "&", ";;", "|&"}
PLACEHOLDER_VALUES = {"address": "127.0.0.1:6379", "dashboard": "http://127.0.0.1:8265"}


@dataclass(frozen=True)
class Command:
    """One shell command shown in a doc: where, the text as shown, and its words (placeholders filled)."""

    path: Path
    line: int
    text: str
    argv: tuple[str, ...]

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"


def doc_files(root: Path = ROOT) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("**/*.md"))] if p.exists()]


# ------------------------------------------------------------------ extraction

FENCE = re.compile(r"^\s*(`{3,}(?=[^`]*$)|~{3,})\s*([\w+-]*)")  # a ``` fence's info has no backtick


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) of the shell blocks: continuations joined, console prompts stripped."""
    out, fence, lang, pending = [], None, "", None
    for n, raw in enumerate(text.splitlines(), 1):
        m = FENCE.match(raw)
        if fence is None and m:
            fence, lang = m.group(1), m.group(2).lower()
            continue
        if fence is not None and raw.strip().startswith(fence[0] * len(fence)) and not raw.strip().strip(fence[0]):
            fence, pending = None, None
            continue
        if fence is None or lang not in SHELLS:
            continue
        line = raw.strip()
        if pending is None and lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        start, body = (n, line) if pending is None else (pending[0], pending[1] + " " + line)
        pending = (start, body[:-1]) if body.endswith("\\") else None
        if pending is None and body:
            out.append((start, body))
    return out


def fill_placeholders(line: str) -> str:
    line = re.sub(r"<([A-Za-z][\w-]*)>", r"\1", line)
    return re.sub(r"\{([A-Za-z_]\w*)\}", lambda m: PLACEHOLDER_VALUES.get(m.group(1), m.group(1)), line)


def split_chain(line: str) -> list[list[str]]:
    """Words of each simple command in ``line`` (comments dropped, split at && || ; | &)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    pieces, words = [], []
    for tok in lex:
        if tok in OPERATORS:
            pieces.append(words)
            words = []
        elif tok != "...":
            words.append(tok)
    return [w for w in [*pieces, words] if w]


def is_entry_point(words: list[str]) -> bool:
    if len(words) < 2 or not re.fullmatch(r"(.*/)?python(3(\.\d+)?)?", words[0]):
        return False
    if words[1] == "-m":
        return len(words) > 2 and words[2].split(".")[0] in PACKAGES
    return words[1].endswith(".py") and words[1].split("/")[0] in PACKAGES


def doc_commands(path: Path) -> list[Command]:
    """Every invocation of a project entry point in ``path``'s shell blocks."""
    found = []
    for n, line in shell_lines(path.read_text()):
        for words in split_chain(fill_placeholders(line)):
            for i in range(len(words)):
                if is_entry_point(words[i:]):
                    found.append(Command(path, n, line, tuple(words[i:])))
    return found


# ------------------------------------------------------------------ the parse check


class Parsed(BaseException):
    """Raised by the replaced parse_args once the arguments parsed (a BaseException: no except catches it)."""

    def __init__(self, namespace: argparse.Namespace):
        self.namespace = namespace


def load_entry_point(words: tuple[str, ...]):
    """(module, argv) of ``python -m MOD ...`` or ``python PATH.py ...``; raises LookupError when missing."""
    if words[1] == "-m":
        name, argv = words[2], list(words[3:])
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            raise LookupError(f"no module {name!r}")
        if spec.submodule_search_locations is not None:  # a package runs its __main__
            name += ".__main__"
            if importlib.util.find_spec(name) is None:
                raise LookupError(f"package {words[2]!r} has no __main__")
        return importlib.import_module(name), argv
    path, argv = ROOT / words[1], list(words[2:])
    if not path.is_file():
        raise LookupError(f"no script {words[1]!r}")
    if (path.parent / "__init__.py").exists():
        return importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts)), argv
    name = f"_docs_{'_'.join(path.relative_to(ROOT).with_suffix('').parts)}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name], argv


def parse_only(main, argv: list[str]) -> tuple[argparse.Namespace | None, int, str]:
    """Call ``main(argv)`` until its parser has parsed argv: (namespace or None, exit status, what it wrote)."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    out = io.StringIO()
    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            return None, main(argv) or 0, out.getvalue()
        except Parsed as p:
            return p.namespace, 0, out.getvalue()
        except SystemExit as e:  # argparse's error (2) or --help (0)
            return None, e.code if isinstance(e.code, int) else 1, out.getvalue()


def check_sweep_config(module, args: argparse.Namespace) -> None:
    """A sweep's --preset, --set, --corpus and --tasks as its frame would validate them before any trial."""
    from sweeps.cli import base_config
    from trainables.tasks import resolve_tasks

    sweep = getattr(module, "SWEEP", None)
    if sweep is not None and sweep.configure is base_config:
        resolve_tasks(base_config(args).finetune.tasks)


def check_command(cmd: Command) -> str | None:
    """None when ``cmd`` parses; else one line saying where, what and why."""
    try:
        module, argv = load_entry_point(cmd.argv)
        main = getattr(module, "main", None)
        if main is None:
            raise LookupError(f"{module.__name__} has no main(argv)")
        args, code, said = parse_only(main, argv)
        if code != 0:
            said_lines = [ln for ln in said.strip().splitlines() if ln.strip()]
            return failure(cmd, said_lines[-1] if said_lines else f"exit status {code}")
        if args is not None:
            check_sweep_config(module, args)
    except LookupError as e:
        return failure(cmd, str(e))
    except Exception as e:  # noqa: BLE001 -- every failure is reported with the doc's line
        return failure(cmd, f"{type(e).__name__}: {e}")
    return None


def failure(cmd: Command, why: str) -> str:
    return f"{cmd.where()}: {' '.join(cmd.argv)}\n    {why}"


def check_docs_commands(files: list[Path]) -> tuple[list[Command], list[str]]:
    commands = [c for f in files for c in doc_commands(f)]
    return commands, [msg for c in commands if (msg := check_command(c))]


# ------------------------------------------------------------------ links

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)


def outside_fences(text: str) -> str:
    """``text`` with its fenced blocks blanked (line numbers kept)."""
    lines, fence = [], None
    for raw in text.splitlines():
        m = FENCE.match(raw)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and raw.strip().startswith(fence) and not raw.strip().strip(fence[0]):
            fence = None
        elif fence is None:
            lines.append(raw)
            continue
        lines.append("")
    return "\n".join(lines)


def prose(text: str) -> str:
    """``text`` with fenced blocks and inline code blanked: where a link is a link."""
    return re.sub(r"(`+).*?\1", "", outside_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text.replace("`", "")).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", outside_fences(path.read_text()), re.M):
        s = slug(m.group(1))
        out.add(f"{s}-{seen[s]}" if s in seen else s)
        seen[s] = seen.get(s, 0) + 1
    for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text()):
        out.add(m.group(1))
    return out


def broken_links(path: Path) -> list[str]:
    text, bad = prose(path.read_text()), []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        line = text.count("\n", 0, m.start()) + 1
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: ({target})"
        if not dest.exists():
            bad.append(f"{where} no such file {file!r}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where} no heading #{anchor} in {dest.name}")
    return bad


# ------------------------------------------------------------------ the checks


def test_every_command_shown_in_the_docs_parses():
    commands, failures = check_docs_commands(doc_files())
    assert commands, "no entry-point commands found in README.md or docs/"
    assert not failures, "commands in the docs that do not parse:\n" + "\n".join(failures)


def test_every_link_between_the_docs_resolves():
    bad = [b for f in doc_files() for b in broken_links(f)]
    assert not bad, "broken links:\n" + "\n".join(bad)


def _copy_docs(tmp_path: Path) -> Path:
    for f in doc_files():
        dest = tmp_path / f.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f.read_text())
    return tmp_path / "README.md"


def test_a_flag_renamed_in_a_copy_of_the_readme_fails_with_its_line(tmp_path):
    readme = _copy_docs(tmp_path)
    cmd = next((c for c in doc_commands(readme) if any(w.startswith("--") for w in c.argv[2:])), None)
    assert cmd is not None, "README.md shows no entry-point command with a flag to rename"
    flag = next(w for w in cmd.argv[2:] if w.startswith("--")).split("=")[0]
    lines = readme.read_text().splitlines()
    at = next(i for i in range(cmd.line - 1, len(lines)) if re.search(re.escape(flag) + r"(?![\w-])", lines[i]))
    lines[at] = re.sub(re.escape(flag) + r"(?![\w-])", flag + "-renamed", lines[at], count=1)
    readme.write_text("\n".join(lines) + "\n")
    _, failures = check_docs_commands([readme])
    assert len(failures) == 1, failures
    assert f"README.md:{cmd.line}: " in failures[0] and f"{flag}-renamed" in failures[0]
    assert "unrecognized arguments" in failures[0]


def _doc(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "docs" / "x.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return path


def test_unknown_modules_scripts_choices_presets_and_overrides_fail(tmp_path):
    doc = _doc(tmp_path, "# T\n\n```bash\n"
                         "python -m analysis.nothing --json\n"
                         "python sweeps/nothing.py\n"
                         "python -m trainables.data prepare --engine spark\n"
                         "python -m analysis.calibrate --replicates many\n"
                         "python sweeps/variants.py --preset smok\n"
                         "python sweeps/variants.py --set optim.no_such_key=1\n"
                         "python -m trainables.data fetch --help\n"
                         "python sweeps/domain_adapt.py --checkpoint DIR --corpus my_corpus.txt --bogus\n"
                         "python sweeps/domain_adapt.py --checkpoint DIR --corpus my_corpus.txt\n"
                         "```\n")
    _, failures = check_docs_commands([doc])
    expect = ["no module 'analysis.nothing'", "no script 'sweeps/nothing.py'", "invalid choice: 'spark'",
              "invalid int value: 'many'", "smok", "no_such_key", "unrecognized arguments: --bogus"]
    assert len(failures) == len(expect), failures  # --help and the placeholder checkpoint (DIR) parse
    for f, e, n in zip(failures, expect, [4, 5, 6, 7, 8, 9, 11]):
        assert f"x.md:{n}: " in f.split("\n")[0], f
        assert e in f, (e, f)


def test_extraction_joins_continuations_splits_chains_and_fills_placeholders(tmp_path):
    doc = _doc(tmp_path, "```console\n$ pip install x && python -m analysis.report runs/<name>/export \\\n"
                         "    --boot 10 | tee out  # a comment --bogus\nprinted output --not-a-command\n```\n"
                         "  ```` ``` ```` is inline code, not a fence\n"
                         "```bash\nray job submit --address http://h:8265 -- \\\n"
                         "  python cluster/local.py run -- python sweeps/variants.py --address {address} ...\n"
                         "python -m pytest -q; python3 -m analysis.validate --json &\n```\n"
                         "```python\npython -m analysis.nothing\n```\n")
    got = [(c.line, c.argv) for c in doc_commands(doc)]
    assert got == [(2, ("python", "-m", "analysis.report", "runs/name/export", "--boot", "10")),
                   (8, ("python", "cluster/local.py", "run", "--", "python", "sweeps/variants.py",
                        "--address", "127.0.0.1:6379")),
                   (8, ("python", "sweeps/variants.py", "--address", "127.0.0.1:6379")),
                   (10, ("python3", "-m", "analysis.validate", "--json"))]
    assert not check_docs_commands([doc])[1]


def test_broken_links_and_anchors_are_named_with_their_line(tmp_path):
    doc = _doc(tmp_path, "# Top\n\n## The `report` and its plots\n\nSee [here](#the-report-and-its-plots), "
                         "[up](../README.md#setup), [gone](missing.md) and [bad](#nope).\n\n"
                         "```bash\n[not](a-link.md)\n```\n[ref]: other.md#x\n")
    (tmp_path / "README.md").write_text("# Setup\n")
    (tmp_path / "docs" / "other.md").write_text("# X\n")
    bad = broken_links(doc)
    assert len(bad) == 2 and "x.md:5: (missing.md) no such file" in bad[0] and "no heading #nope" in bad[1], bad
