"""Regenerate the navigation corpus in tests/sessions/nav/: changes between pinned package releases, typed as editors type.

Deterministic: the same pinned releases (sha256-checked archives from PyPI and npm) give byte-identical
files. Each session is one synthesized "commit": a modest set of line hunks of the diff between two
releases, across 1-3 files of one package, typed with Enter at the end of the previous line, visiting the
hunks as a developer does (a later hunk first and back up to an earlier one, other files opened on the
way and switched back to). `--stats` prints the corpus counts that docs/sessions.md quotes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from codespec.sessions.format import DID_CHANGE, read_session, write_session  # noqa: E402
from codespec.sessions.synth import (  # noqa: E402
    FileChange,
    Hunk,
    apply_hunks,
    keystrokes,
    line_hunks,
    synth_change,
)

OUT = Path(__file__).resolve().parent / "nav"
CACHE = Path.home() / ".cache" / "codespec" / "corpus-sources"
SEED = 41
MIN_KEYS, MAX_KEYS = 100, 420  # typed keystrokes per session before typos (typos add ~4 %)
MAX_HUNK_LINES = 12  # new lines in one hunk
MAX_OLD_LINES = 15  # old lines one hunk replaces
MAX_HUNKS = 5  # per file in one session
MAX_FILE_CHARS = 80_000  # files larger than this are left out (keeps the corpus small)
SESSIONS_PER_PACKAGE = 7


@dataclass(frozen=True)
class Release:
    registry: str  # "pypi" (sdist) or "npm" (npm pack tarball)
    name: str
    version: str
    sha256: str

    @property
    def archive(self) -> str:
        return f"{self.name}-{self.version}.tar.gz" if self.registry == "pypi" else f"{self.name}-{self.version}.tgz"


@dataclass(frozen=True)
class Package:
    name: str
    licence: str
    old: Release
    new: Release
    suffix: str  # source files typed: ".py" or ".ts"
    prefix: str  # inside the archive, after its top folder


PACKAGES = [
    Package("attrs", "MIT", Release("pypi", "attrs", "23.1.0", "6279836d581513a26f1bf235f9acd333bc9115683f14f7e8fae46c98fc50e015"),
            Release("pypi", "attrs", "23.2.0", "935dc3b529c262f6cf76e50877d35a4bd3c1de194fd41f47a2b7ae8f19971f30"), ".py", "src/"),
    Package("click", "BSD-3-Clause", Release("pypi", "click", "8.1.3", "7682dc8afb30297001674575ea00d1814d808d6a36af415a82bd481d37ba7b8e"),
            Release("pypi", "click", "8.1.7", "ca9853ad459e787e2192211578cc907e7594e294c7ccc834310722b41b9ca6de"), ".py", "src/"),
    Package("rxjs", "Apache-2.0", Release("npm", "rxjs", "7.5.7", "c48055fbd8bf0734be2f07f4405170486951b65f269656c36f06e65943746ae6"),
            Release("npm", "rxjs", "7.8.1", "c532167725ab7d085123209156c93cef22f2479cb9c8527060f1cd903aa9d149"), ".ts", "src/"),
    Package("immer", "MIT", Release("npm", "immer", "9.0.21", "df5ec8ae41275aa58025cadde1d755035d3291e08dd2630ac7c82f7fe1b94acb"),
            Release("npm", "immer", "10.0.3", "1c7570272a9af8cd685cd805bdd4422bbcbc8e5fb2ac0dd6e9b2c783f7e7a1fd"), ".ts", "src/"),
]  # fmt: skip


def fetch(release: Release, cache: Path) -> bytes:
    """The release's archive (downloaded once into `cache` with pip or npm), checked against its sha256."""
    path = cache / release.archive
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        if release.registry == "pypi":
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                       f"{release.name}=={release.version}", "-d", str(cache)]  # fmt: skip
        else:
            command = ["npm", "pack", "--quiet", f"{release.name}@{release.version}"]
        subprocess.run(command, check=True, cwd=cache, stdout=subprocess.DEVNULL)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != release.sha256:
        raise SystemExit(f"{path}: sha256 {digest}, want {release.sha256}")
    return data


def sources(package: Package, release: Release, cache: Path) -> dict[str, str]:
    """Source files of one release: path below the archive's top folder -> text (tests left out)."""
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(fetch(release, cache)), mode="r:gz") as tar:
        for member in tar.getmembers():
            path = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if (
                member.isfile()
                and path.startswith(package.prefix)
                and path.endswith(package.suffix)
                and not path.endswith(".d.ts")
                and "test" not in path
            ):
                data = tar.extractfile(member)
                assert data is not None
                files[path] = data.read().decode("utf-8").replace("\r\n", "\n")
    return files


def licence_text(release: Release, cache: Path) -> str:
    """The release's own licence file (its top folder's LICENSE*), kept beside the sessions."""
    with tarfile.open(fileobj=io.BytesIO(fetch(release, cache)), mode="r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 2 and parts[1].upper().startswith("LICEN"):
                data = tar.extractfile(member)
                assert data is not None
                return data.read().decode("utf-8")
    raise SystemExit(f"{release.archive}: no licence file")


def typed_keys(hunk: Hunk) -> int:
    return len(keystrokes(hunk.new_text))


def eligible(before: str, hunk: Hunk) -> bool:
    new_lines = hunk.new_text.count("\n")
    old_lines = before[hunk.start : hunk.end].count("\n")
    return 1 <= new_lines <= MAX_HUNK_LINES and old_lines <= MAX_OLD_LINES and 8 <= typed_keys(hunk) <= 250


@dataclass
class Unit:
    """Some hunks of one file."""

    path: str
    before: str
    hunks: list[Hunk]

    @property
    def keys(self) -> int:
        return sum(typed_keys(h) for h in self.hunks)


def units(package: Package, cache: Path) -> list[Unit]:
    """Each changed file's eligible hunks, cut into runs of at most MAX_HUNKS hunks and MAX_KEYS keys."""
    old, new = sources(package, package.old, cache), sources(package, package.new, cache)
    found: list[Unit] = []
    for path in sorted(set(old) & set(new)):
        before, after = old[path], new[path]
        if before == after or len(before) > MAX_FILE_CHARS:
            continue
        unit = Unit(path, before, [])
        for hunk in line_hunks(before, after):
            if not eligible(before, hunk):
                continue
            if unit.hunks and (len(unit.hunks) >= MAX_HUNKS or unit.keys + typed_keys(hunk) > MAX_KEYS):
                found.append(unit)
                unit = Unit(path, before, [])
            unit.hunks.append(hunk)
        if unit.hunks:
            found.append(unit)
    return found


def commits(found: list[Unit]) -> list[list[Unit]]:
    """Units grouped into commits of MIN_KEYS..MAX_KEYS keys: a small unit takes the next file's along
    (at most 3 files)."""
    groups: list[list[Unit]] = []
    group: list[Unit] = []
    for unit in found:
        if group and (sum(u.keys for u in group) + unit.keys > MAX_KEYS or len(group) == 3):
            groups.append(group)
            group = []
        group.append(unit)
        if sum(u.keys for u in group) >= MIN_KEYS and (len(group) > 1 or len(unit.hunks) > 1):
            groups.append(group)
            group = []
    if group:
        groups.append(group)
    return [g for g in groups if MIN_KEYS <= sum(u.keys for u in g) <= MAX_KEYS and sum(len(u.hunks) for u in g) >= 2]


def visit_order(group: list[Unit]) -> list[tuple[int, int]]:
    """How the developer goes through the commit: in the first file a later hunk first, then back up to
    the one above (writing the use, then the definition or import); with several files, the first
    file's last hunk after the other files (switching back)."""
    first = list(range(len(group[0].hunks)))
    if len(first) >= 3:
        first[0], first[1] = first[1], first[0]
    held = [first.pop()] if len(group) > 1 and len(first) >= 2 else []
    order = [(0, k) for k in first]
    for index, unit in enumerate(group[1:], 1):
        order += [(index, k) for k in range(len(unit.hunks))]
    return order + [(0, k) for k in held]


def build(package: Package, group: list[Unit]):
    files = [FileChange(u.path, u.before, apply_hunks(u.before, u.hunks)) for u in group]
    names = ", ".join(u.path for u in group)
    source = f"{package.name} {package.old.version}->{package.new.version} ({package.old.registry}, {package.licence}): {names}"
    return synth_change(files, visit_order(group), uri_root=f"file:///nav/{package.name}", source=source,
                        seed=SEED)  # fmt: skip


def pick(groups: list[list[Unit]], count: int) -> list[list[Unit]]:
    """`count` groups spread over the package (every k-th), multi-file ones first."""
    multi = [g for g in groups if len(g) > 1]
    single = [g for g in groups if len(g) == 1]
    chosen = multi[: max(2, count // 3)]
    rest = count - len(chosen)
    step = max(1, len(single) // rest) if rest > 0 else 1
    chosen += single[::step][:rest]
    return sorted(chosen, key=lambda g: (g[0].path, g[0].hunks[0].start))


def stats(paths: list[Path]) -> dict[str, int]:
    totals = {"sessions": 0, "keystrokes": 0, "pauses": 0, "jumps": 0, "file_switches": 0, "python": 0,
              "typescript": 0, "multi_file": 0}  # fmt: skip
    for path in paths:
        session = read_session(path)
        totals["sessions"] += 1
        totals["keystrokes"] += sum(e.method == DID_CHANGE for e in session.events)
        times = [e.t for e in session.events if e.method == DID_CHANGE]  # as replay.keystroke_gaps_ms
        ends = [*times[1:], session.events[-1].t]
        totals["pauses"] += sum(later - t >= 0.5 for t, later in zip(times, ends, strict=True))
        totals["jumps"] += session.header.get("jumps", 0)
        totals["file_switches"] += session.header.get("file_switches", 0)
        totals[session.header["language"]] = totals.get(session.header["language"], 0) + 1
        totals["multi_file"] += session.header.get("files", 1) > 1
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the release archives are kept")
    parser.add_argument("--stats", action="store_true", help="only print the counts of the corpus in --out")
    args = parser.parse_args()
    if not args.stats:
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.jsonl"):
            old.unlink()
        for package in PACKAGES:
            licence = args.out / "licences" / f"{package.name}-{package.new.version}-LICENSE.txt"
            licence.parent.mkdir(exist_ok=True)
            licence.write_text(licence_text(package.new, args.cache), encoding="utf-8")
            for number, group in enumerate(pick(commits(units(package, args.cache)), SESSIONS_PER_PACKAGE)):
                session = build(package, group)
                stem = Path(group[0].path).stem.lstrip("_") or "init"
                path = write_session(session, args.out / f"{package.name}-{number:02d}-{stem}.jsonl")
                print(f"{path.name}: {session.keystrokes()} keystrokes, {len(group)} files, "
                      f"{session.header['hunks']} hunks")  # fmt: skip
    totals = stats(sorted(args.out.glob("*.jsonl")))
    print(", ".join(f"{k} {v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
