"""The method is documented inside the repository: no tracked file points to a file outside it (the old
``../shared/METHOD.md``), and every "docs/method.md section N" that a file cites names a section of
docs/method.md, so renumbering that page cannot leave stale citations behind."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
METHOD = ROOT / "docs" / "method.md"
CHECKED = ("README.md", "docs", "src", "conf", "sweeps", "analysis", "benchmarks", "scripts", "tests")
OUTSIDE = re.compile(r"\.\./shared|METHOD\.md")
# "docs/method.md section 5", "method.md sections 4 and 5", "[`method.md`](method.md) section 8", "section 3.7"
CITATION = re.compile(r"method\.md\)?`?\s+sections?\s+(\d+(?:\.\d+)?)(?:\s*(?:-|and)\s*(\d+(?:\.\d+)?))?")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)[. ]", re.MULTILINE)


def tracked_texts() -> dict[str, str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *CHECKED], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = [p for p in out.decode().split("\0") if p and Path(__file__).name not in p]
    texts = {}
    for path in paths:
        file = ROOT / path
        if file.is_file():
            texts[path] = file.read_bytes().decode("utf-8", errors="ignore")
    return texts


def test_no_tracked_file_points_outside_the_repository():
    hits = [f"{path}:{n}" for path, text in tracked_texts().items() for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, f"point these to docs/method.md instead: {hits}"


def test_every_cited_method_section_exists():
    sections = set(HEADING.findall(METHOD.read_text(encoding="utf-8")))
    assert {str(n) for n in range(1, 10)} <= sections
    cited: dict[str, set[str]] = {}
    for path, text in tracked_texts().items():
        for match in CITATION.finditer(text):
            for number in filter(None, match.groups()):
                cited.setdefault(number, set()).add(path)
    assert cited, "no file cites docs/method.md by section"
    missing = {n: sorted(paths) for n, paths in cited.items() if n not in sections}
    assert not missing, f"cited sections that docs/method.md does not have: {missing}"
